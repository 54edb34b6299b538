"""The load generator keeps client-side work (prepare / finish) off its event loop, checks every
answer of a checked workload on each protocol, and tries a request again as its Retry says.

Each workload's ``prepare()`` and ``finish()`` wait on a barrier that two of them must reach
together. Run on the event loop, the first call blocks the loop, no second call can start,
the barrier breaks and every request fails; run in worker threads, requests in flight meet
there and succeed. The server is a real tritonserver with the harness's echo model.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import numpy as np
import pytest

from harness.measuring.loadgen import Load, Retry, Workload, run_checked_load, run_load
from harness.tests.repositories import make_repository, ready_server

BARRIER_TIMEOUT_S = 3.0


@pytest.fixture(scope="module")
def echo_server(tmp_path_factory):
    repo = make_repository(tmp_path_factory.mktemp("loadgen"), models=("echo",))
    with ready_server(repo, ["echo"]) as server:
        yield server


def _meeting_workload(where: str) -> tuple[Workload, dict]:
    """A workload whose ``where`` step ('prepare' or 'finish') needs two requests inside it at once."""
    barrier = threading.Barrier(2, timeout=BARRIER_TIMEOUT_S)
    seen = {"met": 0, "threads": set()}
    lock = threading.Lock()

    def meet():
        barrier.wait()
        with lock:
            seen["met"] += 1
            seen["threads"].add(threading.current_thread().name)

    def prepare():
        if where == "prepare":
            meet()
        return {"TEXT": np.array([[b"hello"]], dtype=object)}

    def finish(outputs):
        if where == "finish":
            meet()
        assert outputs["TEXT_OUT"].reshape(-1)[0] == b"hello"

    return Workload(model="echo", prepare=prepare, finish=finish, outputs=["TEXT_OUT"]), seen


@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", ["prepare", "finish"])
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_client_side_work_runs_off_the_event_loop(echo_server, where, protocol):
    workload, seen = _meeting_workload(where)
    result = run_load(workload, echo_server, protocol=protocol, concurrency=2, duration_s=1.0, warmup_s=0.2)
    assert result.errors == 0 and result.requests >= 2, (
        f"{where}() of two requests in flight never ran at the same time "
        f"(errors {result.errors}, first: {result.first_error})"
    )
    assert seen["met"] >= 2
    assert threading.main_thread().name not in seen["threads"], f"{where}() ran on the event loop's thread"


def _static_echo_load(echo_server):
    """Half a second of load over gRPC, two requests in flight, of one fixed echo request."""
    workload = Workload(model="echo", inputs={"TEXT": np.array([[b"x"]], dtype=object)}, outputs=["TEXT_OUT"])
    return run_load(workload, echo_server, protocol="grpc", concurrency=2, duration_s=0.5, warmup_s=0.1)


@pytest.mark.timeout(60)
def test_static_inputs_still_need_no_prepare(echo_server):
    result = _static_echo_load(echo_server)
    assert result.errors == 0 and result.requests >= 2, result.first_error


def _affinities(pid: int) -> set[frozenset]:
    import os
    from pathlib import Path

    return {frozenset(os.sched_getaffinity(int(t.name))) for t in Path(f"/proc/{pid}/task").iterdir()}


def test_pin_plan_parses_and_refuses():
    from harness.measuring.pinning import pin_plan

    assert pin_plan("") == {}
    assert pin_plan("server=0 generator=1") == {"server": {0}, "generator": {1}}
    assert pin_plan("server=0-2,5;generator=3") == {"server": {0, 1, 2, 5}, "generator": {3}}
    with pytest.raises(ValueError, match="HARNESS_PIN"):
        pin_plan("client=1")


@pytest.mark.timeout(60)
@pytest.mark.skipif(len(__import__("os").sched_getaffinity(0)) < 2, reason="pinning needs two CPUs")
def test_pinning_puts_server_and_generator_on_their_cpus(echo_server, monkeypatch):
    import os

    import psutil

    everything = os.sched_getaffinity(0)
    server_cpu, generator_cpu = sorted(everything)[:2]
    monkeypatch.setenv("HARNESS_PIN", f"server={server_cpu} generator={generator_cpu}")
    root = psutil.Process(echo_server.process.pid)
    tree = [root, *root.children(recursive=True)]
    try:
        result = _static_echo_load(echo_server)
        assert result.errors == 0
        assert (
            result.metrics()["pinning"].startswith(f"server cpus {server_cpu} (")
            and f"generator cpus {generator_cpu}" in result.metrics()["pinning"]
        )
        names = {p.name() for p in tree}
        assert any("tritonserver" in n for n in names) and any("stub" in n for n in names), names
        for process in tree:
            assert _affinities(process.pid) == {frozenset({server_cpu})}, process.cmdline()[:2]
        assert _affinities(os.getpid()) == {frozenset({generator_cpu})}
    finally:
        for pid in [p.pid for p in tree] + [os.getpid()]:
            for task in __import__("pathlib").Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
                    os.sched_setaffinity(int(task.name), everything)


def _echo_checked(retry: Retry) -> Workload:
    """Request ``i`` sends its own text; the check names a reply that is not that text."""

    def make(i: int):
        text = f"request {i}".encode()
        return {"TEXT": np.array([[text]], dtype=object)}, text

    def check(arrays, text):
        got = arrays["TEXT_OUT"].reshape(-1)[0]
        got = got.encode() if isinstance(got, str) else bytes(got)
        return None if got == text else f"{got!r}"

    return Workload(model="echo", outputs=["TEXT_OUT"], make=make, check=check, retry=retry)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("protocol", ["http", "grpc", "json"])
def test_background_load_checks_every_answer(echo_server, protocol):
    url = {"http": echo_server.http_url, "grpc": echo_server.grpc_url, "json": f"http://{echo_server.http_url}"}
    load = Load(_echo_checked(Retry()), url[protocol], protocol=protocol, concurrency=4).start()
    time.sleep(1.0)
    log = load.stop()
    assert log.count() >= 8 and log.count("ok") == log.count(), log.select("failed")[:3]
    wrong = _echo_checked(Retry())
    wrong.check = lambda arrays, text: "not mine"
    log = run_checked_load(wrong, echo_server.http_url, concurrency=2, during=lambda log: time.sleep(0.5))
    assert log.count("wrong") == log.count() > 0 and log.select()[0].detail.startswith("request ")


@pytest.mark.timeout(60)
def test_a_refused_try_is_tried_again_as_the_policy_says():
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # bound, never listening: every connection is refused
        retry = Retry(tries=3, retry_on=("connection error",), backoff_s=0.01, timeout_s=5)
        load = Load(_echo_checked(retry), f"http://127.0.0.1:{port}", protocol="json", concurrency=1).start()
        time.sleep(0.3)
        log = load.stop()
    records = log.select()
    assert records and all(r.status == "error" and r.tries == 3 for r in records), records[:2]
    assert records[0].first_try_error.startswith("connection error: ")
