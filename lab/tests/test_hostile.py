"""``python -m harness hostile`` (lab/harness_lab/hostile/): the cases it builds from a model's
metadata, and the command against real servers: a plain tritonserver 2.51 dies of the known
crashers (the command stops with a clear line), the gated
server refuses every class cleanly."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from harness.serving.launchers import LocalTritonServer, ServerOptions
from harness.tests.gate_cases import make_gate_repository
from harness_lab.hostile.__main__ import main
from triton_gate.tests.hostile_cases import CLASSES, InputSpec, Target, all_cases, declared_bytes, huge_shape
from triton_gate.tests.hostile_runner import DIED, NOT_RUN, REFUSED

SINK = Target("sink", (InputSpec("X", "FP32", (-1, -1, -1)),), max_batch_size=8)
TEXT = Target("t", (InputSpec("TEXT", "BYTES", (-1, 1)),), max_batch_size=16)
FIXED = Target("f", (InputSpec("IMAGE", "FP32", (3, 224, 224)), InputSpec("K", "INT32", (1,))))


def _pairs(body: bytes):
    """Every (key, value) pair of every object in ``body``, duplicates kept."""
    seen = []
    json.loads(body, object_pairs_hook=lambda pairs: seen.extend(pairs) or dict(pairs))
    return seen


@pytest.mark.parametrize("target", [SINK, TEXT, FIXED], ids=["fp32_batched", "bytes_batched", "fixed_unbatched"])
def test_cases_fit_the_model_and_stay_bounded(target):
    nbytes = declared_bytes()
    cases = all_cases(target, nbytes)
    assert {c.klass for c in cases} >= set(CLASSES) - ({"bytes_lengths", "grpc_bytes"} if target is not TEXT else set())
    for case in cases:
        if case.grpc_request:
            message = case.grpc_request()
            assert case.grpc_method != "ModelInfer" or message.model_name == target.model
            continue
        wire = b"".join(case.body()) if callable(case.body) else case.body or b""
        assert len(wire) < 7 << 20, (case.klass, case.name, len(wire))
    # The duplicate-key crasher: Python's json keeps the valid last shape, the first declares > the machine.
    shape_case = next(c for c in cases if (c.klass, c.name) == ("duplicate_keys", "shape"))
    shapes = [v for k, v in _pairs(shape_case.body) if k == "shape"][:2]  # the sized input's, first
    assert max(shapes[0]) > 1 and json.loads(shape_case.body)["inputs"][0]["shape"] == shapes[1]
    huge = next(c for c in cases if (c.klass, c.name) == ("huge_shape", "json"))
    shape = json.loads(huge.body)["inputs"][0]["shape"]
    assert len(shape) == max(len(target.inputs[0].shape), 1)
    if target.max_batch_size:
        assert shape[0] == 1  # a batch a server accepts: the size is in the other dims


def test_declared_allocations_exceed_the_machine():
    nbytes = declared_bytes()
    assert nbytes >= 1 << 40 and nbytes & (nbytes - 1) == 0
    assert huge_shape(3, 1 << 40, 4, batched=True) == [1, 1 << 19, 1 << 19]
    assert huge_shape(2, 1 << 40, 4, batched=True) == [1, 1 << 38]
    assert huge_shape(1, 1 << 40, 8) == [1 << 37]


def test_the_cases_import_without_pytest_or_hypothesis():
    code = (
        "import sys, harness_lab.hostile.__main__, triton_gate.tests.hostile_cases;"
        "assert not {'pytest', 'hypothesis'} & set(sys.modules), sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_only_loopback_unless_named(capsys):
    assert main(["--url", "10.255.255.1:8000"]) == 2
    assert "--allow-remote" in capsys.readouterr().err


def _run(tmp_path, *argv) -> tuple[int, dict]:
    path = tmp_path / f"hostile-{len(list(tmp_path.glob('hostile-*')))}.json"
    code = main([*argv, "--json", str(path)])
    return code, json.loads(path.read_text())


# -- against real servers --------------------------------------------------------------------
@pytest.mark.server
@pytest.mark.timeout(120)
def test_plain_tritonserver_dies_of_the_huge_shape_and_the_command_stops_cleanly(tmp_path):
    repo = make_gate_repository(tmp_path)
    server = LocalTritonServer(ServerOptions(str(repo), required_models=["sink"]), gate=False)
    server.start()
    try:
        server.wait_ready(120)
        code, report = _run(
            tmp_path,
            "--url",
            server.http_url,
            "--model",
            "sink",
            "--only",
            "huge_shape",
            "malformed",
            "--wait-back",
            "3",
        )
    finally:
        server.stop()
    assert code == 3
    assert report["classes"]["huge_shape"] == DIED
    assert report["classes"]["malformed"] == NOT_RUN
    assert "not ready again within 3 s after huge_shape/json" in report["stopped"]


@pytest.fixture(scope="module")
def gated_report(tmp_path_factory):
    """Every class against a gated server: on ``sink`` (FP32), and the BYTES classes on ``echo``."""
    tmp_path = tmp_path_factory.mktemp("hostile")
    repo = make_gate_repository(tmp_path)
    server = LocalTritonServer(ServerOptions(str(repo), required_models=["sink", "echo", "internal_echo"]))
    server.start()
    try:
        server.wait_ready(120)
        urls = ("--url", server.http_url, "--grpc-url", server.grpc_url, "--wait-back", "5")
        runs = [
            _run(tmp_path, *urls, "--model", "sink"),
            _run(tmp_path, *urls, "--model", "echo", "--only", "bytes_lengths", "grpc_bytes", "restricted_apis"),
        ]
        logs = server.logs()
    finally:
        server.stop()
    outcomes = [o for _, report in runs for o in report["outcomes"]]
    return {klass: [o for o in outcomes if o["class"] == klass] for klass in CLASSES}, logs


@pytest.mark.server
@pytest.mark.timeout(180)
@pytest.mark.parametrize("klass", CLASSES)
def test_the_gated_server_refuses_every_class_cleanly(gated_report, klass):
    outcomes = gated_report[0][klass]
    assert outcomes, f"no case of {klass} ran"
    wrong = [
        f"{o['case']}: {o['verdict']} ({o['answer']} {o['message'][:120]})" for o in outcomes if o["verdict"] != REFUSED
    ]
    assert wrong == []  # (a case answered after the request timeout, 10 s, would be "hung")


@pytest.mark.server
@pytest.mark.timeout(180)
def test_each_refusal_is_one_line_of_the_gate_log_without_a_traceback(gated_report):
    """The gate's own refusals are logged one line each (status, model, client, reason), HTTP ones
    found by their message; the restricted APIs are refused by tritonserver itself (not logged)."""
    by_class, logs = gated_report
    outcomes = [o for items in by_class.values() for o in items]
    lines = [line for line in logs.splitlines() if line.startswith("gate: refused ")]
    for bad in ("Traceback", "Error handling request", "Unhandled exception"):
        assert bad not in logs, logs[logs.index(bad) - 500 : logs.index(bad) + 1500]
    assert all(re.match(r"gate: refused [45]\d\d model=\S+ client=\S+", line) for line in lines), lines
    # at most one line per case, and a line for every case the gate refused itself (its messages)
    assert len(lines) <= len(outcomes)
    for outcome in outcomes:
        by_gate = outcome["class"] != "restricted_apis"  # those tritonserver refuses itself
        if by_gate and outcome["verdict"] == REFUSED and outcome["message"] and outcome["answer"].isdigit():
            said = " ".join(outcome["message"].split())[:60]
            assert any(said in line for line in lines), outcome
