"""The gate with several worker processes (``triton_gate.workers``) on a real tritonserver:
every worker serves, refuses what the policy refuses the same way, one metrics view, and a stop
leaves no process behind."""

from __future__ import annotations

import http.client
import json
import os
import re
import time
from contextlib import contextmanager

import numpy as np
import psutil
import pytest
import requests
import tritonclient.grpc as grpcclient

from harness.serving.launchers import LocalTritonServer, ServerOptions
from harness.tests.gate_cases import GATE_POLICY, make_gate_repository
from triton_gate.workers import SharedDict

WORKERS = 2
#: Fresh connections opened to reach every worker: SO_REUSEPORT hashes each to one worker's socket.
CONNECTIONS = 24
ECHO = json.dumps({"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["hi"]}]})


def test_shared_dict_writes_of_a_forked_worker_reach_the_primary():
    shared = SharedDict()
    shared["broken"] = 1.5
    pid = os.fork()
    if pid == 0:  # the worker: sees the primary's write, writes its own
        seen = shared.get("broken") == 1.5
        shared["changing"] = float("inf")
        del shared["broken"]
        os._exit(0 if seen else 1)
    assert os.waitpid(pid, 0)[1] == 0, "the forked worker did not see the primary's write"
    assert dict(shared) == {"changing": float("inf")}
    assert "broken" not in shared


@pytest.fixture(scope="module")
def workers_server(tmp_path_factory):
    repo = make_gate_repository(tmp_path_factory.mktemp("workers"))
    with LocalTritonServer(
        ServerOptions(str(repo), required_models=["sink", "echo", "internal_echo"], gate_policy=GATE_POLICY),
        gate_workers=WORKERS,
    ) as server:
        yield server


def gate_workers(server) -> list[psutil.Process]:
    """The gate's primary and its forked workers (Python processes; tritonserver and stubs are not)."""
    primary = psutil.Process(server.process.pid)
    return [primary] + [p for p in primary.children() if p.name() != "tritonserver"]


def connections_by_worker(server) -> dict[int, list[http.client.HTTPConnection]]:
    """``CONNECTIONS`` open keep-alive connections to the public HTTP port, by the pid of the worker
    that accepted each (read from the worker's sockets)."""
    host, port = server.http_url.rsplit(":", 1)
    opened = []
    for _ in range(CONNECTIONS):
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request("GET", "/v2/health/live")
        assert conn.getresponse().read() == b""
        opened.append(conn)
    by_port = {conn.sock.getsockname()[1]: conn for conn in opened}
    found: dict[int, list] = {}
    for worker in gate_workers(server):
        for sock in worker.net_connections(kind="tcp"):
            if sock.laddr and sock.laddr.port == int(port) and sock.raddr and sock.raddr.port in by_port:
                found.setdefault(worker.pid, []).append(by_port[sock.raddr.port])
    return found


@pytest.mark.server
@pytest.mark.timeout(120)
def test_every_worker_serves_and_refuses_alike(workers_server):
    assert len(gate_workers(workers_server)) == WORKERS
    found = connections_by_worker(workers_server)
    assert len(found) == WORKERS, f"connections reached workers {sorted(found)} only"
    answers: dict[int, set] = {}
    for pid, conns in found.items():
        for conn in conns:
            for model in ("echo", "internal_echo"):
                conn.request("POST", f"/v2/models/{model}/infer", body=ECHO)
                resp = conn.getresponse()
                body = json.loads(resp.read())
                answers.setdefault(pid, set()).add((model, resp.status, json.dumps(body, sort_keys=True)))
            conn.close()
    assert len({frozenset(a) for a in answers.values()}) == 1, answers
    statuses = {(model, status) for model, status, _ in next(iter(answers.values()))}
    assert statuses == {("echo", 200), ("internal_echo", 403)}


@pytest.mark.server
@pytest.mark.timeout(120)
def test_metrics_count_the_requests_of_every_worker(workers_server):
    def echo_successes() -> float:
        text = requests.get(f"http://{workers_server.metrics_url}/metrics", timeout=10).text
        match = re.search(r'nv_inference_request_success\{model="echo",version="1"\} (\S+)', text)
        return float(match.group(1)) if match else 0.0

    before = echo_successes()
    found = connections_by_worker(workers_server)
    assert len(found) == WORKERS
    sent = 0
    for conns in found.values():
        for conn in conns:
            conn.request("POST", "/v2/models/echo/infer", body=ECHO)
            assert conn.getresponse().read()
            sent += 1
            conn.close()
    deadline = time.monotonic() + 10
    while echo_successes() < before + sent and time.monotonic() < deadline:
        time.sleep(0.2)
    assert echo_successes() == before + sent


@pytest.mark.server
@pytest.mark.timeout(120)
def test_grpc_through_workers(workers_server):
    for _ in range(8):  # fresh channels: each hashed to one worker's gRPC socket
        with grpcclient.InferenceServerClient(workers_server.grpc_url) as client:
            text = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
            text.set_data_from_numpy(np.array([[b"hi"]], dtype=object))
            assert client.infer("echo", [text]).as_numpy("TEXT_OUT")[0, 0] == b"hi"
            with pytest.raises(Exception, match="internal"):
                client.infer("internal_echo", [text])


@pytest.mark.server
@pytest.mark.timeout(120)
def test_a_stub_death_turns_every_worker_not_ready_until_the_reload(workers_server):
    found = connections_by_worker(workers_server)
    assert len(found) == WORKERS
    probes = [conns[0] for conns in found.values()]  # one keep-alive connection per worker

    def readiness() -> list[int]:
        statuses = []
        for conn in probes:
            conn.request("GET", "/v2/models/echo/ready")
            resp = conn.getresponse()
            resp.read()
            statuses.append(resp.status)
        return statuses

    assert readiness() == [200] * WORKERS
    triton = next(p for p in psutil.Process(workers_server.process.pid).children() if p.name() == "tritonserver")
    stubs = [p for p in triton.children() if len(p.cmdline()) > 1]
    stub = next(p for p in stubs if re.search(r"(^|/)echo/\d+/[^/]+$", p.cmdline()[1]))
    stub.kill()
    seen = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        seen.append(readiness())
        if [400] * WORKERS in seen and seen[-1] == [200] * WORKERS:
            break
        time.sleep(0.05)
    assert [400] * WORKERS in seen, f"not every worker answered not-ready: {seen[:5]} ... {seen[-3:]}"
    assert seen[-1] == [200] * WORKERS, "the model did not come back on every worker"


@contextmanager
def _gate_with_workers(tmp_path, workers: int):
    """A ready local server on the gate's repository with ``workers`` gate workers: yields it and
    its processes (server, gate workers, stubs); stopped on exit."""
    server = LocalTritonServer(
        ServerOptions(str(make_gate_repository(tmp_path)), required_models=["echo"]), gate_workers=workers
    )
    server.start()
    try:
        server.wait_ready(120)
        yield server, [psutil.Process(server.process.pid), *psutil.Process(server.process.pid).children(recursive=True)]
    finally:
        server.stop()


def _left(processes: list[psutil.Process]) -> list[int]:
    """The pids of ``processes`` still running half a second from now."""
    time.sleep(0.5)
    return [p.pid for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.server
@pytest.mark.timeout(120)
def test_stop_leaves_no_worker_behind(tmp_path):
    with _gate_with_workers(tmp_path, 3) as (server, processes):
        assert len(gate_workers(server)) == 3
    left = _left(processes)
    assert not left, f"processes left after stop: {left}"


@pytest.mark.server
@pytest.mark.timeout(120)
def test_a_killed_worker_stops_the_whole_gate_and_leaves_nothing(tmp_path):
    with _gate_with_workers(tmp_path, 2) as (server, processes):
        gate_workers(server)[1].kill()
        deadline = time.monotonic() + 60
        while server.is_running() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not server.is_running(), "the gate kept serving with a worker gone"
        left = _left(processes)
        assert not left, f"processes left after a worker died: {left}"
