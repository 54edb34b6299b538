"""Where one request's time goes (harness_lab.stages): the stages add up to the gated latency, and
the matrix table shows each stage's median over rounds."""

from __future__ import annotations

import re

import pytest

from harness_lab import stages
from harness_lab.matrix_sections import stages as section


def _round(gated_ms: float, direct_ms: float, request: float, infer: float, whole: float, onnx: float, round_=0):
    direct = {
        "latency_ms": direct_ms,
        "perf_server_request": request,
        "perf_server_queue": 0.1,
        "perf_server_compute_input": 0.2,
        "perf_server_compute_infer": infer,
        "perf_server_compute_output": 0.3,
    }
    found = stages.breakdown({"latency_ms": gated_ms}, direct, whole, onnx)
    return {
        "comparison": "stages",
        "run_id": "r1",
        "round": round_,
        "deployment": "embedding_cpu",
        "model": "embedding_onnx_text",
        "items_per_request": 1,
        "timestamp": f"2026-12-03T00:00:0{round_}+00:00",
        "client_ms_gate": gated_ms,
        "in_process_threads": 1,
        "stages_ms": found,
    }


def test_the_stages_add_up_to_the_gated_latency_when_triton_splits_its_request_time():
    record = _round(gated_ms=10.0, direct_ms=8.0, request=6.0, infer=5.4, whole=4.0, onnx=3.0)
    assert list(record["stages_ms"]) == list(stages.STAGES)
    assert record["stages_ms"]["front gate"] == 2.0
    assert record["stages_ms"]["stub round trip and model code"] == pytest.approx(1.4)
    assert sum(record["stages_ms"].values()) == pytest.approx(10.0)


def test_the_table_shows_medians_over_rounds_and_shares_of_the_gated_request():
    run = [
        _round(10.0, 8.0, 6.0, 5.4, 4.0, 3.0, round_=0),
        _round(12.0, 8.0, 6.0, 5.4, 4.0, 3.0, round_=1),
        _round(14.0, 8.0, 6.0, 5.4, 4.0, 3.0, round_=2),
    ]
    text = "\n".join(section.render(run))
    assert re.search(r"^\| front gate +\| 4\.00 \(33 %\)", text, re.M)  # median 4 ms of 12
    assert re.search(r"^\| client latency through the gate +\| 12\.00", text, re.M)
    assert section.render([{"comparison": "side-by-side"}]) == []
