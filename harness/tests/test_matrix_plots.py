"""The matrix's figures: one run per figure (the latest server mode, default generator), variants
in model-family order, a bar per concurrency each variant was measured at."""

from __future__ import annotations

from harness.measuring.matrix.plots import by_concurrency, figure_run, plot, variants_in_order


def _row(benchmark: str, model: str, concurrency: int, **extra) -> dict:
    return {
        "benchmark": benchmark,
        "model": model,
        "concurrency": concurrency,
        "server_mode": "local",
        "generator": "harness-asyncio (tritonclient grpc.aio)",
        "timestamp": "2026-12-01T10:00:00+00:00",
        "machine": {"cpu_model": "Test CPU", "cpu_cores": 2},
        "measured": True,
        "items_per_second": 10.0 * concurrency,
        "perf_latency_p50": 5.0,
        "perf_latency_p99": 8.0,
        "bytes_sent_per_request": 1000,
        "bytes_received_per_request": 100,
        **extra,
    }


ROWS = [
    _row("net-b1", "net", 1),
    _row("net-b1", "net", 8),
    _row("other-b1", "other", 1),
    _row("classify-jpeg", "classify", 1),
    _row("classify-jpeg", "classify", 8),
    _row("net-b1", "net", 1, server_mode="docker", timestamp="2026-11-30T10:00:00+00:00"),
    _row("net-b1", "net", 1, generator="perf_analyzer (2.60)", timestamp="2026-12-01T11:00:00+00:00"),
    {**_row("never", "never", 2), "measured": False},
]


def test_a_figure_shows_one_run_the_latest_server_mode_and_the_default_generator():
    mode, run = figure_run(ROWS)
    assert mode == "local" and len(run) == 5
    assert all(r["server_mode"] == "local" and r["generator"].startswith("harness") for r in run)
    later_docker = ROWS + [_row("net-b1", "net", 8, server_mode="docker", timestamp="2026-12-02T10:00:00+00:00")]
    assert figure_run(later_docker)[0] == "docker"


def test_an_entry_model_is_drawn_next_to_its_model_only_path():
    _, run = figure_run(ROWS)
    assert variants_in_order(run, {"classify-jpeg": "net-b1"}) == ["net-b1", "classify-jpeg", "other-b1"]
    assert variants_in_order(run) == ["classify-jpeg", "net-b1", "other-b1"], "without model_only: by model"


def test_each_variant_has_a_bar_per_concurrency_of_the_run_and_none_where_not_measured():
    _, run = figure_run(ROWS)
    variants = variants_in_order(run)
    series = by_concurrency(run, variants, "items_per_second")
    assert list(series) == ["c=1", "c=8"] and variants == ["classify-jpeg", "net-b1", "other-b1"]
    assert series["c=1"] == [10.0, 10.0, 10.0]
    assert series["c=8"][:2] == [80.0, 80.0] and series["c=8"][2] != series["c=8"][2], "other-b1: NaN at c=8"


def test_figures_are_written_for_measured_rows_only(tmp_path):
    written = plot("toy", ROWS, tmp_path, {"classify-jpeg": "net-b1"})
    assert sorted(written) == ["bytes", "latency", "throughput"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in written.values())
    assert plot("toy", [r for r in ROWS if not r["measured"]], tmp_path / "none") == {}
