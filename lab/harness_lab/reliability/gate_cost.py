"""What the gate costs: the same model served with and without it, verified load at concurrency c.

    python -m harness gate-cost --deployment <d>    # the model of <d>'s [reliability] table, c=8
    python -m harness gate-cost --deployment <d> --model <entry model> --rounds 3 --duration 10
    python -m harness gate-cost --model echo --json results/reliability/gate_cost_echo.json   # worst case

Without ``--deployment``: the one deployment whose manifest has a ``[reliability]`` table (its
``workload`` checks every answer; ``--workload`` overrides it).

Servers run one at a time (never two at once), in alternating rounds (gate, direct, gate, ...)
so that drift of a shared machine hits both; each round measures ``duration`` seconds of
verified requests (every answer checked) after ``warmup`` seconds, and the CPU seconds the
gate's process and tritonserver's (with its stubs) spent meanwhile, per request. The report (results/reliability/gate_cost.json) gives per-round and median throughput,
p50/p99, CPU milliseconds per request and each variant's throughput over direct's.
"""

from __future__ import annotations

import statistics
import time

import psutil

from harness.measuring.loadgen import run_checked_load
from harness.measuring.pair_bench import cpu_seconds as pair_cpu_seconds
from harness.testing.servers import model_server, started, stop_server
from harness_lab.reliability.report import write_json
from harness_lab.reliability.servers import checked_workload, chosen_target, target_parser


def cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds so far of the process tree at ``pid``: tritonserver's (with its stubs) and the gate's (the rest)."""
    parts = pair_cpu_seconds(pid)
    parts.pop("generator")
    triton = sum(v for k, v in parts.items() if k == "tritonserver" or k.startswith("stub:"))
    return {"gate": sum(parts.values()) - triton, "triton": triton}


def measure(server, workload, concurrency: int, duration_s: float, warmup_s: float) -> dict:
    window: dict = {}

    def during(log) -> None:
        time.sleep(warmup_s)
        window["began"], window["cpu_before"] = time.monotonic(), cpu_seconds(server.process.pid)
        time.sleep(duration_s)
        window["ended"], window["cpu_after"] = time.monotonic(), cpu_seconds(server.process.pid)

    log = run_checked_load(workload, server.http_url, concurrency=concurrency, during=during)
    steady = log.steady(warmup_s)
    ok = max(log.count("ok", ended_from=window["began"], ended_before=window["ended"]), 1)
    cpu = {
        f"{part}_cpu_ms_per_request": round(1e3 * (window["cpu_after"][part] - window["cpu_before"][part]) / ok, 3)
        for part in ("gate", "triton")
    }
    return {
        "requests": steady["requests"],
        "ok": steady["ok"],
        "not_ok": steady["requests"] - steady["ok"],
        "first_problem": steady["first_problem"],
        "throughput_rps": steady["throughput_rps"],
        **steady["latency_all"],
        **cpu,
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
    """Rounds of the gate, then direct; the report, with each variant's summary."""
    variants = ["gate", "direct"]
    rows = []
    for index in range(rounds):
        for variant in variants:
            server = model_server(deployment, model, gate=variant == "gate")
            started(server)
            try:
                workload = checked_workload(deployment, model, server.http_url, workload_reference)
                measured = measure(server, workload, concurrency, duration_s, warmup_s)
            finally:
                stop_server(server)
            row = {"round": index, "gate": variant == "gate", "variant": variant, **measured}
            rows.append(row)
            print(row, flush=True)
    summary = {}
    for variant in variants:
        mine = [r for r in rows if r["variant"] == variant]
        summary[variant] = {
            key + "_median": statistics.median(r[key] for r in mine)
            for key in ("throughput_rps", "p50_ms", "p99_ms", "gate_cpu_ms_per_request", "triton_cpu_ms_per_request")
        }
    direct = summary["direct"]["throughput_rps_median"]
    for variant in variants:
        summary[variant]["over_direct"] = round(summary[variant]["throughput_rps_median"] / direct, 3)
    return {
        "deployment": deployment,
        "model": model,
        "concurrency": concurrency,
        "rounds": rounds,
        "duration_s": duration_s,
        "warmup_s": warmup_s,
        "rows": rows,
        **summary,
        "throughput_cost_pct": round(100 * (1 - summary["gate"]["over_direct"]), 1),
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load_average_1m": round(psutil.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = target_parser(__doc__, "gate_cost.json", concurrency=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    args = parser.parse_args(argv)
    deployment, model = chosen_target(parser, args)
    report = run(deployment, model, args.concurrency, args.rounds, args.duration, args.warmup, args.workload)
    write_json(report, args.json)
    for variant in ("gate", "direct"):
        print(f"{variant}: {report[variant]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
