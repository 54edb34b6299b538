"""``python -m harness.measuring.alternate`` on a real tritonserver: its rounds are records of a
comparison of their own, never the latest number of a matrix cell."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness import PROJECT_ROOT
from harness.measuring import matrix
from harness.measuring.alternate import COMPARISON
from harness.tests.repositories import make_repository

pytestmark = pytest.mark.server

MANIFEST = """
name = "toy_alternate"
summary = "Two scenarios of one ONNX model"
targets = ["cpu"]
entry_models = ["double"]

[[benchmarks]]
id = "double-a"
workload = "checks.py:workload"
concurrency = [1]

[[benchmarks]]
id = "double-b"
workload = "checks.py:workload"
concurrency = [1]
"""
CHECKS = """
import numpy as np

from harness.measuring.loadgen import Workload


def workload(ctx):
    return Workload(model="double", inputs={"INPUT": np.ones((1, 4), np.float32)}, outputs=["OUTPUT"])
"""
BENCH_RECORD = {
    "timestamp": "2026-01-01T00:00:00+00:00",
    "machine": {"cpu_model": "Test CPU", "cpu_cores": 2},
    "deployment": "toy_alternate",
    "benchmark": "double-a",
    "model": "double",
    "variant": "double-a",
    "target": "cpu",
    "generator": "harness-asyncio (tritonclient grpc.aio)",
    "server_mode": "local",
    "concurrency": 1,
    "items_per_second": 12345.6,
    "bytes_sent_per_request": 64,
    "bytes_received_per_request": 64,
}


def test_alternating_rounds_are_a_comparison_not_the_matrix_cells(tmp_path):
    root = tmp_path / "deployments"
    make_repository(root / "toy_alternate", models=("double",))
    (root / "toy_alternate" / "deployment.toml").write_text(MANIFEST)
    (root / "toy_alternate" / "checks.py").write_text(CHECKS)
    results = tmp_path / "results"
    results.mkdir()
    records_file = results / "records.jsonl"
    records_file.write_text(json.dumps(BENCH_RECORD) + "\n")  # what `make bench` measured before
    env = {**os.environ, "HARNESS_DEPLOYMENTS_DIR": str(root), "HARNESS_RESULTS_DIR": str(results)}
    command = [sys.executable, "-m", "harness.measuring.alternate", "toy_alternate", "double-a", "double-b"]
    done = subprocess.run(
        [*command, "--rounds", "2", "--duration", "0.5"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rounds = [json.loads(line) for line in records_file.read_text().splitlines()[1:]]
    assert sorted((r["round"], r["benchmark"]) for r in rounds) == [
        (1, "double-a"),
        (1, "double-b"),
        (2, "double-a"),
        (2, "double-b"),
    ]
    assert {r["comparison"] for r in rounds} == {COMPARISON} and len({r["run_id"] for r in rounds}) == 1
    assert all(r["items_per_second"] > 0 and r["timestamp"] > BENCH_RECORD["timestamp"] for r in rounds)

    written = matrix.generate(records_file, tmp_path / "docs", root)
    cells = json.loads(written["json"].read_text())["deployments"]["toy_alternate"]["rows"]
    by_benchmark = {r["benchmark"]: r for r in cells if r["server_mode"] == "local"}
    assert by_benchmark["double-a"]["items_per_second"] == BENCH_RECORD["items_per_second"]
    assert by_benchmark["double-b"]["measured"] is False
