"""Replicas for N requests/s at a p99 target: ``ceil(N / (per_replica_infer_s * utilisation))`` from the
best measured one-server level that met the target (docs/results.json; lab/docs/scaling.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from tabulate import tabulate

from harness import PROJECT_ROOT

SOURCE = PROJECT_ROOT / "docs" / "results.json"


def per_replica(rows: list[dict], p99_target_ms: float) -> dict | None:
    """The row of highest throughput whose p99 met the target (None when none did)."""
    met = [
        r
        for r in rows
        if r.get("perf_latency_p99") is not None and r["perf_latency_p99"] <= p99_target_ms and r.get("perf_throughput")
    ]
    return max(met, key=lambda r: r["perf_throughput"]) if met else None


def default_rows(rows: list[dict], server_mode: str, target: str) -> list[dict]:
    """The rows of one server mode and target that ran the repository as shipped, through the gate."""
    return [
        r
        for r in rows
        if r.get("server_mode") == server_mode
        and r.get("target") == target
        and not r.get("config_overrides")
        and r.get("gate") is not False
    ]


def replicas_for(rate: float, infer_s: float, utilisation: float) -> int:
    return max(1, math.ceil(rate / (infer_s * utilisation)))


def model(
    source: Path = SOURCE,
    server_mode: str = "local",
    target: str = "cpu",
    p99_targets_ms=(100, 300, 1000),
    rates=(100, 1000),
    utilisation: float = 0.7,
    scenarios_wanted=None,
) -> list[dict]:
    """One line per deployment x scenario x p99 target."""
    matrix = json.loads(Path(source).read_text())
    lines = []
    for name, deployment in sorted(matrix["deployments"].items()):
        scenarios: dict[str, list[dict]] = {}
        for row in default_rows(deployment.get("rows", []), server_mode, target):
            scenarios.setdefault(row["benchmark"], []).append(row)
        for benchmark, rows in sorted(scenarios.items()):
            if scenarios_wanted and benchmark not in scenarios_wanted:
                continue
            for p99 in p99_targets_ms:
                best = per_replica(rows, p99)
                line = {
                    "deployment": name,
                    "scenario": benchmark,
                    "p99_target_ms": p99,
                    "per_replica_infer_s": best["perf_throughput"] if best else None,
                    "at_concurrency": best["concurrency"] if best else None,
                    "measured_p99_ms": best["perf_latency_p99"] if best else None,
                }
                for rate in rates:
                    line[f"replicas_for_{rate}_per_s"] = (
                        replicas_for(rate, best["perf_throughput"], utilisation) if best else None
                    )
                lines.append(line)
    return lines


def markdown(lines: list[dict], rates=(100, 1000)) -> str:
    headers = ["deployment", "scenario", "p99 target ms", "per replica infer/s (c, p99 ms)"] + [
        f"replicas for {r}/s" for r in rates
    ]
    table = []
    for line in lines:
        measured = (
            f"{line['per_replica_infer_s']:.1f} (c={line['at_concurrency']}, {line['measured_p99_ms']:.0f})"
            if line["per_replica_infer_s"]
            else "no measured level met it"
        )
        table.append(
            [line["deployment"], line["scenario"], line["p99_target_ms"], measured]
            + [line[f"replicas_for_{r}_per_s"] or "–" for r in rates]
        )
    return tabulate(table, headers=headers, tablefmt="github")


def predicted_throughput(
    deployment: str,
    model_name: str,
    replicas: int,
    p99_target_ms: float = 300,
    source: Path = SOURCE,
    server_mode: str = "local",
    target: str = "cpu",
) -> dict | None:
    """``replicas`` x the per-replica figure (as ``model``) of the scenario with the smallest requests of
    ``model_name`` (nearest a one-sentence load); linear: each replica has cores of its own. None: no row fits."""
    rows = json.loads(Path(source).read_text())["deployments"].get(deployment, {}).get("rows", [])
    rows = [r for r in default_rows(rows, server_mode, target) if r.get("model") == model_name]
    if not rows:
        return None
    smallest = min(rows, key=lambda r: r.get("bytes_sent_per_request") or math.inf)["benchmark"]
    best = per_replica([r for r in rows if r["benchmark"] == smallest], p99_target_ms)
    if best is None:
        return None
    return {
        "scenario": smallest,
        "p99_target_ms": p99_target_ms,
        "per_replica_infer_s": best["perf_throughput"],
        "at_concurrency": best["concurrency"],
        "measured_at": best.get("timestamp"),
        "predicted_infer_s": round(replicas * best["perf_throughput"], 1),
    }
