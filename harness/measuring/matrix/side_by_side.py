"""Ratios of a side-by-side run (``python -m harness.tools.peers``), taken round by round.

Each record of a run carries every round's sentences/s; targets of one workload ran in the
same rounds, alternating, so a ratio is the median over rounds of the per-round quotients
(``served / ceiling`` likewise, against the ceiling worker's measurement of that round). Which
ratios, and their goals, are the measured deployment's ``[[peers.ratios]]`` (deployment.toml).
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from tabulate import tabulate

from harness.manifest import PeersSpec


def side_by_side_records(records: list[dict]) -> list[dict]:
    return [r for r in records if r.get("comparison") == "side-by-side"]


def peers_spec(records: list[dict]) -> PeersSpec | None:
    """The ``[peers]`` table of the deployment the records measured (None when it has none)."""
    from harness.deployments import ManifestError, get_deployment

    name = next((r["deployment"] for r in records if r.get("deployment")), None)
    try:
        return get_deployment(name).manifest.peers if name else None
    except ManifestError:
        return None


def latest_run(records: list[dict]) -> list[dict]:
    """The records of the latest side-by-side run that measured one of its deployment's
    ``[peers.models]`` (not only peers or config variants)."""
    runs: dict[str, list[dict]] = defaultdict(list)
    for record in side_by_side_records(records):
        runs[record.get("run_id")].append(record)

    def served(run: list[dict]) -> bool:
        spec = peers_spec(run)
        return spec is not None and any(r.get("model") in spec.models for r in run)

    full = [rs for rs in runs.values() if served(rs)]
    if not full:
        return []
    return max(full, key=lambda rs: max(str(r.get("timestamp", "")) for r in rs))


#: Per-round speeds a ratio is taken from: sentences/s (wall clock) of a target and of its ceiling,
#: and (records since the CPU fields) sentences per CPU second, which a busy shared core disturbs less.
RATE_KEYS = ("rounds_items_per_second", "rounds_ceiling_items_per_second")
CPU_KEYS = ("rounds_cpu_ms_per_item", "rounds_ceiling_cpu_ms_per_item")


def _per_round(record: dict, key: str = "rounds_items_per_second") -> list[float]:
    values = [float(v) for v in record.get(key) or []]
    return [1e3 / v if v else 0.0 for v in values] if "cpu_ms" in key else values


def ratios(run: list[dict]) -> list[dict]:
    """Per workload (batch, concurrency): each ratio of the deployment's ``[[peers.ratios]]`` with
    its per-round values."""
    spec = peers_spec(run)
    if spec is None:
        return []
    workloads: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for record in run:
        workloads[(int(record["items_per_request"]), int(record["concurrency"]))][record["model"]] = record
    rows = []
    for (batch, concurrency), targets in sorted(workloads.items()):

        def series(name: str, keys: tuple[str, str]) -> list[float] | None:
            served, ceiling = keys
            if name.startswith("ceiling:"):
                kind = name.split(":", 1)[1]
                found = next((r for r in targets.values() if r.get("ceiling_kind") == kind), None)
                return _per_round(found, ceiling) if found else None
            if name == "best-peer":
                peers = [_per_round(r, served) for n, r in targets.items() if n.startswith("infinity-")]
                return [max(values) for values in zip(*peers)] if all(peers) and peers else None
            return _per_round(targets[name], served) if name in targets else None

        def quotients(top: str, bottom: str, keys: tuple[str, str]) -> list[float]:
            numerator = series(top, keys)
            if bottom == "ceiling":
                denominator = _per_round(targets[top], keys[1]) if top in targets else None
            else:
                denominator = series(bottom, keys)
            return [a / b for a, b in zip(numerator or [], denominator or []) if b]

        for ratio in spec.ratios:
            values = quotients(ratio.top, ratio.bottom, RATE_KEYS)
            if not values:
                continue
            cpu = quotients(ratio.top, ratio.bottom, CPU_KEYS)
            rows.append(
                {
                    "batch": batch,
                    "concurrency": concurrency,
                    "ratio": ratio.label,
                    "goal": ratio.goal,
                    "value": statistics.median(values),
                    "rounds": values,
                    "cpu_value": statistics.median(cpu) if cpu else None,
                    "generator": next(iter(targets.values())).get("generator"),
                }
            )
    return rows


def render(records: list[dict]) -> list[str]:
    """Markdown lines: the side-by-side table and its ratios (empty when no such run exists)."""
    run = latest_run(records)
    if not run:
        return []
    first = min(run, key=lambda r: str(r.get("timestamp", "")))
    spec = peers_spec(run)
    machine = first.get("machine") or {}
    loads = [r["load_average_1m"] for r in run if r.get("load_average_1m") is not None]
    load = f"1-minute load average {min(loads):.1f}-{max(loads):.1f}" if loads else "machine load not recorded"
    lines = [
        "",
        f"## {first.get('deployment')} side by side: {spec.title}",
        "",
        f"One run (`make bench-peers`, run `{first.get('run_id')}`, {first.get('timestamp')}, "
        f"{machine.get('cpu_model')}, {machine.get('cpu_cores')} cores, {load}). Generator: "
        f"{first.get('generator')}; servers (tritonserver without the front gate, its stubs, infinity-emb) and the "
        f"in-process ceiling on cores {first.get('server_cores')}. Every workload ran its targets in turn, "
        "alternating order, for several rounds; a ratio is the median of the per-round quotients (the rounds "
        "column). Ceiling: the same work (tokenize + model + pool) in one process on the server's cores, at "
        "the batch the server could form (`min(batch x c, 64)`; runs whose records carry `ceiling_rule` take the "
        "better of that and the request's own batch; runs whose records carry `rounds_cpu_ms_per_item` run the "
        f"ONNX ceiling in `{spec.ceiling_follows}`'s length buckets of `onnx_max_batch_size` rows).",
        "",
    ]
    table = []
    for r in sorted(run, key=lambda r: (int(r["items_per_request"]), int(r["concurrency"]), r["model"])):
        table.append(
            [
                r["items_per_request"],
                r["concurrency"],
                r["model"],
                f"{r['items_per_second']:.1f}",
                ", ".join(f"{v:.0f}" for v in _per_round(r)),
                f"{r.get('perf_latency_p50', 0):.1f}",
                f"{r.get('perf_latency_p99', 0):.1f}",
                r.get("errors", 0),
                f"{r.get('ceiling_kind')}@{r.get('ceiling_batch_size')}",
                f"{r.get('served_over_ceiling') or 0:.2f}",
                r.get("kernel_path", ""),
            ]
        )
    lines.append(
        tabulate(
            table,
            headers=[
                "batch",
                "c",
                "target",
                "sentences/s",
                "rounds",
                "p50 ms",
                "p99 ms",
                "errors",
                "ceiling",
                "served / ceiling",
                "INT8 kernel path",
            ],
            tablefmt="github",
            disable_numparse=True,
        )
    )
    lines += [
        "",
        "Ratios (goal from issue 17; `met` when the median reaches it). CPU-time ratio: the same quotient "
        "from CPU seconds per sentence (the server's process tree, counted until idle after each window, "
        "against the ceiling worker's), steadier than wall-clock rates when other jobs share the core:",
        "",
    ]
    table = [
        [
            r["batch"],
            r["concurrency"],
            r["ratio"],
            f"{r['value']:.2f}",
            ", ".join(f"{v:.2f}" for v in r["rounds"]),
            f"{r['cpu_value']:.2f}" if r.get("cpu_value") else "–",
            f">= {r['goal']:g}",
            "met" if r["value"] >= r["goal"] else "NOT met",
        ]
        for r in ratios(run)
    ]
    lines.append(
        tabulate(
            table,
            headers=["batch", "c", "ratio", "median", "rounds", "CPU-time ratio", "goal", ""],
            tablefmt="github",
            disable_numparse=True,
        )
    )
    variants = sorted({(r["model"], r.get("variant") or "") for r in run})
    lines += ["", "Targets: " + "; ".join(f"`{m}`: {(v or '').split(': ', 1)[-1]}" for m, v in variants), ""]
    return lines
