"""What the gate costs: the same model served with and without it, verified load at concurrency c.

    python -m harness gate-cost --deployment <d>    # the model of <d>'s [reliability] table, c=8
    python -m harness gate-cost --deployment <d> --model <entry model> --rounds 3 --duration 10
    python -m harness gate-cost --model echo --json results/reliability/gate_cost_echo.json   # worst case

Without ``--deployment``: the one deployment whose manifest has a ``[reliability]`` table (its
``workload`` checks every answer; ``--workload`` overrides it).

Servers run one at a time (never both at once), in alternating rounds (gate, direct, gate,
direct, ...) so that drift of a shared machine hits both; each round measures ``duration``
seconds of verified requests (every answer checked) after ``warmup`` seconds. The report
(results/reliability/gate_cost.json) gives per-round and median throughput and p50/p99.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from harness.manifest import ManifestError
from harness.testing.servers import model_server, stop_server
from harness_lab.reliability.load import run_checked_load
from harness_lab.reliability.report import RESULTS_DIR, write_json
from harness_lab.reliability.servers import checked_workload, defaults


def measure(server, workload, concurrency: int, duration_s: float, warmup_s: float) -> dict:
    log = run_checked_load(workload, server.http_url, concurrency=concurrency, duration_s=warmup_s + duration_s)
    steady = log.steady(warmup_s)
    return {
        "requests": steady["requests"],
        "ok": steady["ok"],
        "not_ok": steady["requests"] - steady["ok"],
        "throughput_rps": steady["throughput_rps"],
        **steady["latency_all"],
    }


def run(
    deployment: str,
    model: str,
    concurrency: int,
    rounds: int,
    duration_s: float,
    warmup_s: float,
    workload_reference: str | None = None,
) -> dict:
    rows = []
    for index in range(rounds):
        for gated in (True, False):
            server = model_server(deployment, model, gate=gated)
            server.start()
            try:
                server.wait_ready()
                workload = checked_workload(deployment, model, server.http_url, workload_reference)
                row = {"round": index, "gate": gated, **measure(server, workload, concurrency, duration_s, warmup_s)}
            finally:
                stop_server(server)
            rows.append(row)
            print(row, flush=True)
    summary = {}
    for gated in (True, False):
        mine = [r for r in rows if r["gate"] is gated]
        summary["gate" if gated else "direct"] = {
            "throughput_rps_median": statistics.median(r["throughput_rps"] for r in mine),
            "p50_ms_median": statistics.median(r["p50_ms"] for r in mine),
            "p99_ms_median": statistics.median(r["p99_ms"] for r in mine),
        }
    cost = 1 - summary["gate"]["throughput_rps_median"] / summary["direct"]["throughput_rps_median"]
    return {
        "deployment": deployment,
        "model": model,
        "concurrency": concurrency,
        "rounds": rounds,
        "duration_s": duration_s,
        "warmup_s": warmup_s,
        "rows": rows,
        **summary,
        "throughput_cost_pct": round(100 * cost, 1),
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deployment", default=None, help="default: the one with a [reliability] table")
    parser.add_argument("--model", default=None, help="default: its [reliability] model; echo: the toy echo model")
    parser.add_argument("--workload", default=None, help="file.py:function (default: its [reliability] workload)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--json", type=Path, default=RESULTS_DIR / "gate_cost.json")
    args = parser.parse_args(argv)
    try:
        deployment, model = defaults(args.deployment, args.model)
    except ManifestError as exc:
        parser.error(str(exc))
    report = run(deployment, model, args.concurrency, args.rounds, args.duration, args.warmup, args.workload)
    write_json(report, args.json)
    print(f"gate {report['gate']} | direct {report['direct']} | throughput cost {report['throughput_cost_pct']} %")
    print(f"report: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
