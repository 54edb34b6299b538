"""Soak: hold a fixed concurrency on one entry model for a set time, verifying every answer;
errors, wrong answers, latency drift (first third against last) and the RSS of every process of
the server over the run. How answers are checked: lab/docs/reliability.md.

    python -m harness soak --deployment <d>   # <d>'s [reliability] model and workload, 15 s, c=64
    python -m harness soak --deployment <d> --duration 600 --json results/reliability/soak.json
    python -m harness soak --deployment <d> --model <text model> --input TEXT --output EMBEDDING
    python -m harness soak --deployment <d> --model <entry model> --input IMAGE_BYTES \
        --output BOXES --images 'deployments/<d>/fixtures/images/*' --concurrency 8 --duration 1200

The checked workload: ``--images`` files (bytes in, ``--output`` compared), else ``--input`` /
``--output`` of a text -> vector model (unique sentences), else ``--workload`` or the
``[reliability]`` table's ``workload``.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import shlex
import sys
import time
from pathlib import Path

from harness.measuring.loadgen import LoadLog, Retry, Workload, percentiles, run_checked_load
from harness.testing.processes import process_memory
from harness.testing.servers import model_server, started, stop_server
from harness_lab.reliability.memory import memory_growth, memory_trend, rss_sample
from harness_lab.reliability.report import soak_section, write_json
from harness_lab.reliability.servers import checked_workload, chosen_target, target_parser
from harness_lab.reliability.workloads import bytes_workload, text_embedding_workload


def summarize_soak(log: LoadLog, warmup_s: float) -> dict:
    """Counts, throughput and the drift of p50/p99 between the first and the last third."""
    summary = log.steady(warmup_s)
    t0, span = log.began + warmup_s, max(log.ended - (log.began + warmup_s), 1e-9)
    thirds = [
        [
            (r.end - r.start) * 1e3
            for r in log.select("ok", started_from=t0 + k * span / 3, started_before=t0 + (k + 1) * span / 3)
        ]
        for k in range(3)
    ]
    first, last = percentiles(thirds[0]), percentiles(thirds[2])
    drift = {}
    for key in ("p50_ms", "p99_ms"):
        if first[key] and last[key]:
            drift[key.replace("_ms", "_ratio")] = round(last[key] / first[key], 3)
    return {**summary, "latency_first_third": first, "latency_last_third": last, "latency_drift": drift}


def run_soak(
    server,
    workload: Workload,
    *,
    concurrency: int = 64,
    duration_s: float = 15.0,
    warmup_s: float = 2.0,
    sample_every_s: float | None = None,
) -> dict:
    """Soak a running server; its RSS sampled every ``sample_every_s`` (default: 1/40 of the run, at
    least 1 s) into ``memory_series``."""
    pid = server.process.pid
    memory = {"before": process_memory(pid)}
    every = sample_every_s or max(1.0, duration_s / 40)
    series: list[dict] = []

    def sample_after_warmup(log: LoadLog) -> None:
        time.sleep(warmup_s)
        t0 = time.monotonic()
        memory["start"] = process_memory(pid)
        series.append(rss_sample(pid, t0))
        end = t0 + duration_s
        while time.monotonic() < end:
            time.sleep(min(every, max(0.0, end - time.monotonic())))
            series.append(rss_sample(pid, t0))
        memory["end"] = process_memory(pid)

    unpaused = dataclasses.replace(workload, retry=Retry())  # every failure counts, none waited out
    log = run_checked_load(unpaused, server.http_url, concurrency=concurrency, during=sample_after_warmup)
    report = {
        "scenario": "soak",
        "model": workload.model,
        "workload": workload.describe,
        "concurrency": concurrency,
        "duration_s": duration_s,
        "warmup_s": warmup_s,
        **summarize_soak(log, warmup_s),
        "memory": memory_growth(memory["start"], memory["end"]),
        "memory_before_load": memory["before"],
        "memory_series": series,
        "memory_trend": {k: memory_trend(series, k) for k in ("server", "gate", "total")},
        "gate": bool(getattr(server, "gate", False)),
    }
    report["stub_crashed"] = bool(report["memory"]["gone"])
    return report


def check_soak(report: dict, max_growth_mib: float, max_growth_pct: float) -> list[str]:
    """The soak's pass conditions; returns what failed (empty: passed)."""
    failed = []
    for key in ("errors", "timeouts", "wrong_answers"):
        if report[key]:
            failed.append(f"{report[key]} {key} (first: {report['first_problem']})")
    if not report["ok"]:
        failed.append("no request succeeded")
    growth = report["memory"]["total_growth_mib"]
    bound = max(max_growth_mib, report["memory"]["total_start_mib"] * max_growth_pct / 100)
    if growth > bound:
        failed.append(f"memory grew {growth} MiB, over the bound {bound:.0f} MiB")
    if report["memory"]["gone"]:
        failed.append(f"processes gone during the soak: {report['memory']['gone']}")
    report["bounds"] = {"max_growth_mib": round(bound, 1)}
    return failed


def soak_parser():
    parser = target_parser(__doc__, "soak.json", concurrency=64)
    parser.add_argument("--input", default=None, help="with --output: the input of a text -> vector model")
    parser.add_argument("--output", default=None)
    parser.add_argument("--duration", type=float, default=float(os.environ.get("SOAK_DURATION", 15)))
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--max-growth-mib", type=float, default=64.0)
    parser.add_argument("--max-growth-pct", type=float, default=10.0)
    parser.add_argument(
        "--images",
        nargs="+",
        default=None,
        metavar="GLOB",
        help="files (e.g. JPEGs) sent in turn to an entry model with a bytes input (--input), "
        "instead of sentences; each answer's --output checked against the file's answer alone",
    )
    parser.add_argument("--sample-every", type=float, default=None, help="RSS sampling period, s (default run/40)")
    return parser


def soak_workload(args, files: list[Path], http_url: str) -> Workload:
    """``--images`` files (bytes in, ``--output`` compared), else ``--input`` / ``--output`` of a text ->
    vector model, else the deployment's checked workload."""
    if files:
        names = [f.name for f in files]
        contents = [f.read_bytes() for f in files]
        return bytes_workload(http_url, args.model, contents, input_name=args.input, output=args.output, names=names)
    if args.input:
        return text_embedding_workload(http_url, args.model, input_name=args.input, output=args.output)
    return checked_workload(args.deployment, args.model, http_url, args.workload)


def main(argv: list[str] | None = None) -> int:
    parser = soak_parser()
    args = parser.parse_args(argv)

    files = sorted({Path(p) for pattern in args.images or [] for p in glob.glob(pattern)})
    if args.images and not files:
        parser.error(f"--images {args.images} matches no file")
    if (args.images or args.input) and not (args.input and args.output):
        parser.error("--images and --input need both --input and --output")
    args.deployment, args.model = chosen_target(parser, args)
    server = started(model_server(args.deployment, args.model))
    try:
        report = run_soak(
            server,
            soak_workload(args, files, server.http_url),
            concurrency=args.concurrency,
            duration_s=args.duration,
            warmup_s=args.warmup,
            sample_every_s=args.sample_every,
        )
    finally:
        stop_server(server)
    report["deployment"] = args.deployment
    report["command"] = "python -m harness soak " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)
    )
    report["machine"] = {"cpu_count": os.cpu_count(), "load_avg_at_end": [round(x, 2) for x in os.getloadavg()]}
    failed = check_soak(report, args.max_growth_mib, args.max_growth_pct)
    report["passed"], report["failed"] = not failed, failed
    write_json(report, args.json)
    print(format_soak(report))
    return 0 if not failed else 1


def format_soak(r: dict) -> str:
    """The soak's results section (``report.soak_section``), its memory trends and what failed."""
    trends = [(k, t) for k, t in (r.get("memory_trend") or {}).items() if t]
    lines = soak_section(r) + [
        f"{k}: growth per third {t['growth_per_third_mib']} MiB, levels off: {t['levelled']}" for k, t in trends
    ]
    return "\n".join(lines + (["FAILED: " + "; ".join(r["failed"])] if r.get("failed") else []))


if __name__ == "__main__":
    raise SystemExit(main())
