"""Benchmark scenarios of one deployment measured in alternating rounds, every server up at once.

    python -m harness.measuring.alternate DEPLOYMENT BENCHMARK BENCHMARK [...] [--rounds 3] [--duration 3]

The order reverses every other round; prints per scenario and level the median items/s and the
median per-round ratio to the first scenario. Records carry ``comparison: "alternating-rounds"``,
which the results matrix leaves out of its cells."""

from __future__ import annotations

import argparse
import json
import statistics
import uuid

from harness.deployments import get_deployment
from harness.measuring.bench import run_benchmark
from harness.session import ServerPool

#: ``comparison`` of the records this module writes (never a matrix cell's latest record).
COMPARISON = "alternating-rounds"


def in_turn(items: list, round_index: int) -> list:
    """``items`` in order in even rounds, reversed in odd ones: no scenario always runs first
    (the one alternation of this module and of ``pair_bench``)."""
    return items if round_index % 2 == 0 else items[::-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("deployment")
    parser.add_argument("benchmarks", nargs="+", help="benchmark ids; ratios are to the first")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per level")
    parser.add_argument("--mode", default=None)
    args = parser.parse_args(argv)
    deployment = get_deployment(args.deployment)
    try:
        chosen = [deployment.benchmark(b) for b in args.benchmarks]
    except ValueError as exc:
        parser.error(str(exc))
    pool = ServerPool(mode=args.mode)
    rates: dict[tuple[str, int], list[float]] = {}
    backends: dict[str, dict] = {}
    run_id = uuid.uuid4().hex[:12]
    try:
        contexts = {b.id: pool.context(deployment, b.config or None, b.models if b.config else ()) for b in chosen}
        for r in range(args.rounds):
            for benchmark in in_turn(chosen, r):
                records = run_benchmark(
                    contexts[benchmark.id],
                    benchmark,
                    duration_s=args.duration,
                    warmup_s=1.0,
                    record_fields={"comparison": COMPARISON, "run_id": run_id, "round": r + 1},
                )
                for row in records:
                    rates.setdefault((benchmark.id, int(row["concurrency"])), []).append(row["items_per_second"])
                    backends[benchmark.id] = row.get("backend_implementation")
                    print(
                        f"round {r + 1} {benchmark.id} c={row['concurrency']}: {row['items_per_second']:.1f} items/s",
                        flush=True,
                    )
    finally:
        pool.close()
    base = chosen[0].id
    print(f"\n{'benchmark':<48} {'c':>3} {'items/s median [min-max]':<26} ratio to {base} median [min-max]")
    for (bench, level), values in rates.items():
        ratios = [v / b for v, b in zip(values, rates.get((base, level), []))]
        ratio = f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]" if ratios else "-"
        span = f"{statistics.median(values):.1f} [{min(values):.1f}-{max(values):.1f}]"
        print(f"{bench:<48} {level:>3} {span:<26} {ratio}")
    print(json.dumps({"backends": backends}, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
