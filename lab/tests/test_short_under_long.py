"""short-under-long: short queries probed alone and behind passages on a real server, every answer checked."""

from __future__ import annotations

import pytest

from harness_lab.reliability.short_under_long import LONG_FACTOR, main, split_texts


def test_split_keeps_order_and_puts_only_texts_far_over_the_median_on_the_long_side():
    texts = ["a query"] * 6 + ["x" * 400, "another query", "y" * 500]
    short, long = split_texts(texts)
    assert long == ["x" * 400, "y" * 500]
    assert short == ["a query"] * 6 + ["another query"]
    assert all(len(t) > LONG_FACTOR * len("a query") for t in long)


@pytest.mark.server
@pytest.mark.timeout(300)
def test_a_short_run_probes_its_query_lane_idle_and_loaded_and_reports_both(tmp_path):
    import json

    report = tmp_path / "short_under_long.json"
    argv = ["--deployment", "embedding_cpu", "--model", "embedding_onnx_text", "--rounds", "1", "--query-lane", "1"]
    assert main([*argv, "--duration", "1.5", "--warmup", "0.5", "--long-concurrency", "2", "--json", str(report)]) == 0
    found = json.loads(report.read_text())
    assert found["query_lane"] == {"model": "embedding_onnx_text_queries", "instances": 1, "config_overrides": None}
    row = found["rows"][0]
    assert row["idle"]["n"] > 0 and row["loaded"]["n"] > 0, row
    assert row["long_per_s"] > 0, row
    assert found["long_texts"] > 0 and found["short_texts"] > found["long_texts"]
    assert found["p99_loaded_over_idle"] == round(found["loaded_p99_ms_median"] / found["idle_p99_ms_median"], 2)
