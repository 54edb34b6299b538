"""The matrix as data: per deployment, one block of rows per benchmark scenario x target x
server mode its manifest declares, measured or "not measured", with runs and correctness."""

from __future__ import annotations

from collections import defaultdict

from harness.measuring.matrix.cells import generator_family, latest_records, stamp
from harness.measuring.matrix.correctness import correctness_by_deployment, row_correctness, summarize_checks
from harness.measuring.matrix.pairs import paired_records

#: Server modes that can serve each target (local = the pip tritonserver; docker = NGC / npu_ge images).
MODES_FOR_TARGET = {"cpu": ("local", "docker"), "gpu": ("local", "docker"), "npu": ("docker",)}
NOT_MEASURED = "not measured"


def expected_grid(deployment) -> list[tuple[str, str, str]]:
    """``(benchmark id, target, server mode)`` blocks the manifest declares, in table order."""
    grid = []
    for benchmark in deployment.benchmarks:
        for target in deployment.targets:
            if benchmark.targets and target not in benchmark.targets:
                continue
            for mode in MODES_FOR_TARGET.get(target, ("local", "docker")):
                grid.append((benchmark.id, target, mode))
    return grid


def _not_measured(benchmark_id: str, target: str, mode: str, concurrency, checks: dict) -> dict:
    return {
        "benchmark": benchmark_id,
        "target": target,
        "server_mode": mode,
        "concurrency": concurrency,
        "measured": False,
        "correctness": summarize_checks(checks),
    }


def _block_rows(benchmark, target: str, mode: str, cell: list[dict], checks: dict, models: set, used: set) -> list:
    """The rows of one block: each concurrency level of each generator that measured the cell
    (harness-asyncio always), the latest record of the level or "not measured"."""
    if not cell:
        return [_not_measured(benchmark.id, target, mode, ", ".join(map(str, benchmark.concurrency)), checks)]
    rows = []
    for generator in sorted({generator_family(r) for r in cell} | {"harness-asyncio"}):
        at = [r for r in cell if generator_family(r) == generator]
        for level in benchmark.concurrency:
            found = sorted((r for r in at if int(r.get("concurrency") or 0) == level), key=stamp)
            if not found:
                rows.append(_not_measured(benchmark.id, target, mode, level, checks))
                continue
            record = found[-1]
            used.add(id(record))
            # a config variant's checks all ran on the variant's server: all of them speak for its rows
            correctness = (
                summarize_checks(checks) if benchmark.config else row_correctness(checks, record.get("model"), models)
            )
            rows.append({**record, "measured": True, "correctness": correctness})
    return rows


def _where(target: str, mode: str, variant: str) -> str:
    return f"{target}/{mode}" + (f" --config-variant {variant}" if variant else "")


def build(records: list[dict], deployments, outcomes: list[dict]) -> dict:
    """The matrix as data: per deployment, the rows in table order, the runs and correctness."""
    # comparisons (processing pairs, the lab's side-by-side runs) have sections of their own
    latest = [r for r in latest_records(records) if not r.get("comparison")]
    by_deployment: dict[str, list[dict]] = defaultdict(list)
    for record in latest:
        by_deployment[record.get("deployment")].append(record)
    correctness = correctness_by_deployment(outcomes, [d.name for d in deployments])
    result = {}
    for deployment in deployments:
        mine = by_deployment.get(deployment.name, [])
        benchmarks = {b.id: b for b in deployment.benchmarks}
        models = {r.get("model") for r in mine if r.get("model")} | set(deployment.entry_models)
        checks_at = correctness.get(deployment.name, {})
        grid = expected_grid(deployment)
        # a server mode the manifest does not imply (external) gets its block when it has records
        for r in mine:
            key = (r.get("benchmark"), r.get("target"), r.get("server_mode"))
            if key[0] in benchmarks and key not in grid:
                grid.append(key)
        grid.sort(key=lambda k: list(benchmarks).index(k[0]))
        rows, used = [], set()
        for benchmark_id, target, mode in grid:
            cell = [
                r
                for r in mine
                if r.get("benchmark") == benchmark_id and r.get("target") == target and r.get("server_mode") == mode
            ]
            # a config variant's rows: the checks run with --config-variant <its id>, never the default's
            checks = checks_at.get((target, mode, benchmark_id if benchmarks[benchmark_id].config else ""), {})
            rows += _block_rows(benchmarks[benchmark_id], target, mode, cell, checks, models, used)
        variants: dict[str, dict] = {}
        for r in sorted(mine, key=stamp):
            variants[r.get("benchmark")] = {
                "variant": r.get("variant"),
                "model": r.get("model"),
                "backends": r.get("backend_implementation") or {},
            }
        result[deployment.name] = {
            "summary": deployment.summary,
            "targets": deployment.targets,
            "rows": rows,
            "extra": [r for r in mine if id(r) not in used],
            "history": [r for r in records if r.get("deployment") == deployment.name],
            "variants": {b: variants[b] for b in benchmarks if b in variants},
            "model_only": {b.id: b.model_only for b in deployment.benchmarks if b.model_only},
            "processing_pairs": paired_records(records, deployment.name),
            "correctness": {
                _where(t, m, v): {c: r["outcome"] for c, r in checks.items()} for (t, m, v), checks in checks_at.items()
            },
            "correctness_time": {
                _where(t, m, v): max(stamp(r) for r in checks.values())
                for (t, m, v), checks in checks_at.items()
                if checks
            },
        }
    return result
