"""The matrix's figures: a panel per model family, concurrency gaps left open, log latency where scales differ."""

from __future__ import annotations

import math

from harness.measuring.matrix.plots import latency_scale, on_concurrency_axis, panels, plot


def _row(benchmark: str, model: str, concurrency: int, **extra) -> dict:
    return {
        "benchmark": benchmark,
        "model": model,
        "concurrency": concurrency,
        "server_mode": "local",
        "generator": "harness-asyncio (tritonclient grpc.aio)",
        "measured": True,
        "perf_throughput": 10.0 * concurrency,
        "perf_latency_p50": 5.0,
        "perf_latency_p99": 8.0,
        "bytes_sent_per_request": 1000,
        "bytes_received_per_request": 100,
        **extra,
    }


ROWS = [
    _row("net-b1", "net", 1),
    _row("net-b1", "net", 8),
    _row("classify-jpeg", "classify", 1),
    _row("classify-jpeg", "classify", 4),
    _row("classify-jpeg", "classify", 8),
    _row("other-b1", "other", 1),
    {**_row("never", "never", 2), "measured": False},
]


def test_an_entry_model_joins_the_family_of_its_model_only_path():
    by_family = panels(ROWS, {"classify-jpeg": "net-b1"})
    assert sorted(by_family) == ["net", "other"]
    assert sorted(by_family["net"]) == ["classify-jpeg [local, harness-asyncio]", "net-b1 [local, harness-asyncio]"]
    assert sorted(panels(ROWS)) == ["classify", "net", "other"], "without model_only each model is its own family"


def test_a_concurrency_a_series_skipped_is_a_gap_not_a_line():
    points = panels(ROWS, {"classify-jpeg": "net-b1"})["net"]["net-b1 [local, harness-asyncio]"]
    values = on_concurrency_axis(points, [1, 4, 8], "perf_throughput")
    assert values[0] == 10.0 and math.isnan(values[1]) and values[2] == 80.0


def test_latency_axis_is_log_only_where_values_span_more_than_ten_times():
    close = {"s": [_row("a", "a", 1), _row("a", "a", 4, perf_latency_p99=40.0)]}
    apart = {"s": [_row("a", "a", 1), _row("a", "a", 4, perf_latency_p99=51.0)]}
    assert latency_scale(close) == "linear" and latency_scale(apart) == "log"


def test_figures_are_written_for_measured_rows_only(tmp_path):
    written = plot("toy", ROWS, tmp_path, {"classify-jpeg": "net-b1"})
    assert sorted(written) == ["bytes", "latency", "throughput"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in written.values())
    assert plot("toy", [r for r in ROWS if not r["measured"]], tmp_path / "none") == {}
