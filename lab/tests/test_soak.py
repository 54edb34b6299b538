"""Soak (short setting): concurrency 64 on a Python model, every answer verified, memory bounded."""

from __future__ import annotations

import pytest

from harness.measuring.loadgen import LoadLog, RequestRecord
from harness.testing.toy_models import echo_repository
from harness.tests.repositories import ready_server
from harness_lab.reliability.memory import memory_growth, memory_trend
from harness_lab.reliability.report import render_long_soak
from harness_lab.reliability.soak import check_soak, format_soak, run_soak, summarize_soak
from harness_lab.reliability.workloads import echo_workload

SOAK_S = 8.0


@pytest.fixture(scope="module")
def echo_server(tmp_path_factory):
    repo = echo_repository(tmp_path_factory.mktemp("soak"))
    with ready_server(repo, ["echo"]) as server:
        yield server


@pytest.mark.timeout(120)
def test_soak_holds_concurrency_64_with_no_error_and_bounded_memory(echo_server):
    report = run_soak(echo_server, echo_workload(), concurrency=64, duration_s=SOAK_S, warmup_s=1.5)
    failed = check_soak(report, max_growth_mib=64, max_growth_pct=10)
    print(format_soak(report))
    assert not failed, failed
    assert report["requests"] > 64 and report["errors"] == report["wrong_answers"] == report["timeouts"] == 0
    stubs = [k for k in report["memory"]["processes"] if k.startswith("stub:echo#")]
    assert len(stubs) == 2, f"expected the 2 echo stubs in the memory report, got {list(report['memory']['processes'])}"
    assert report["latency_first_third"]["n"] and report["latency_last_third"]["n"]
    # tritonserver ("server") and the front gate are told apart; RSS sampled through the run.
    assert {"server", "gate"} <= set(report["memory"]["processes"]), list(report["memory"]["processes"])
    assert report["memory"]["processes"]["server"]["start_mib"] > 0
    assert len(report["memory_series"]) >= 8 and report["memory_series"][-1]["t_s"] >= SOAK_S - 1
    assert report["memory_trend"]["server"] is not None


def test_memory_trend_tells_levelling_off_from_steady_growth():
    def series(values):
        return [{"t_s": 10.0 * i, "rss_mib": {"server": v}, "total_mib": v} for i, v in enumerate(values)]

    levelled = memory_trend(series([276, 330, 380, 410, 420, 424, 425, 425, 425, 425]), "server")
    assert levelled["levelled"] and levelled["start_mib"] == 276 and levelled["end_mib"] == 425
    growing = memory_trend(series([276 + 15 * i for i in range(10)]), "server")
    assert not growing["levelled"] and growing["growth_per_third_mib"][2] == 45
    assert memory_trend(series([1, 2]), "server") is None


def test_summary_counts_drift_and_wrong_answers():
    log = LoadLog(began=0.0, ended=10.0)
    log.records = [RequestRecord(1 + i * 0.01, 1.1 + i * 0.01, "ok") for i in range(300)]
    log.records += [RequestRecord(9.0, 9.5, "ok"), RequestRecord(9.1, 9.2, "wrong", "request 7 got case 3")]
    summary = summarize_soak(log, warmup_s=1.0)
    assert summary["wrong_answers"] == 1 and summary["first_problem"] == "request 7 got case 3"
    assert summary["latency_drift"]["p50_ratio"] > 1
    growth = memory_growth(
        {"server": {"rss_mib": 100.0}, "stub:a#1": {"rss_mib": 50.0}}, {"server": {"rss_mib": 110.0}}
    )
    assert growth["total_growth_mib"] == 10.0 and growth["gone"] == ["stub:a#1"]


def test_load_log_selects_by_status_and_window():
    log = LoadLog(began=0.0, ended=4.0)
    log.records = [
        RequestRecord(0.0, 1.0, "ok"),
        RequestRecord(0.5, 1.5, "error", "refused"),
        RequestRecord(1.0, 2.0, "timeout", "no answer within 60 s"),
        RequestRecord(2.5, 3.0, "wrong", "request 3 got case 1"),
        RequestRecord(3.0, 3.5, "ok"),
    ]
    assert log.count() == 5 and log.count("ok") == 2 and log.count("failed") == 3
    assert log.count("failed", ended_from=1.5, ended_before=3.0) == 2, "ended_from inclusive, ended_before exclusive"
    assert [r.status for r in log.select(started_from=1.0, started_before=3.0)] == ["timeout", "wrong"]
    steady = log.steady(warmup_s=1.0)
    assert (steady["requests"], steady["ok"], steady["timeouts"], steady["wrong_answers"]) == (3, 1, 1, 1)
    assert steady["throughput_rps"] == round(1 / 3.0, 1) and steady["first_problem"] == "no answer within 60 s"


def test_a_long_soak_is_rendered_as_a_table_and_a_verdict():
    series = [
        {
            "t_s": 30.0 * i,
            "rss_mib": {"server": 276.0 + min(i, 10) * 15, "gate": 70.0, "stub:pre#1": 100.0},
            "total_mib": 446.0 + min(i, 10) * 15,
        }
        for i in range(41)
    ]
    soak = {
        "deployment": "dep",
        "model": "m",
        "concurrency": 8,
        "measured_s": 1200.0,
        "warmup_s": 10.0,
        "gate": True,
        "requests": 4000,
        "errors": 0,
        "timeouts": 0,
        "wrong_answers": 0,
        "throughput_rps": 3.3,
        "command": "python -m harness soak --duration 1200",
        "memory_series": series,
        "memory_trend": {k: memory_trend(series, k) for k in ("server", "total")},
    }
    text = "\n".join(render_long_soak(soak))
    rows = [" | ".join(cell.strip() for cell in line.strip("|").split("|")) for line in text.splitlines()]
    assert "0.0 | 276.0 | 70.0 | 100.0 | 446.0" in rows and "20.0 | 426.0 | 70.0 | 100.0 | 596.0" in rows
    assert "tritonserver 276.0 -> 426.0 MiB" in text and "**levels off**" in text
    assert "`python -m harness soak --duration 1200`" in text
    assert "![" not in text, "numbers and tables only, no figure"
