"""Where one request's time goes (harness_lab.matrix_sections.stages): the matrix table shows each
stage's median over rounds and its share of the gated request."""

from __future__ import annotations

import re

from harness_lab.matrix_sections import stages as section


def _round(gated_ms: float, round_: int) -> dict:
    """A round of the removed stages tool's records: every stage 1 ms but the front gate's."""
    stages_ms = dict.fromkeys(section.STAGES, 1.0) | {"front gate": gated_ms - len(section.STAGES) + 1}
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
        "stages_ms": stages_ms,
    }


def test_the_table_shows_medians_over_rounds_and_shares_of_the_gated_request():
    run = [_round(10.0, 0), _round(12.0, 1), _round(14.0, 2)]
    text = "\n".join(section.render(run))
    assert re.search(r"^\| front gate +\| 5\.00 \(42 %\)", text, re.M)  # median 5 ms of 12
    assert re.search(r"^\| queue +\| 1\.00 \(8 %\)", text, re.M)
    assert re.search(r"^\| client latency through the gate +\| 12\.00", text, re.M)
    assert section.render([{"comparison": "side-by-side"}]) == []
