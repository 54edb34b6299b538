"""Side-by-side ratios on a busy machine: an entry model vs its model-only path, per server variant.

Every server variant (config overrides, as in a manifest's ``[benchmarks.config.*]``) is started
once and kept up; then, round after round, each concurrency level runs the model-only workload
and the entry workload back to back on each variant. Besides infer/s it reports, per request,
the CPU time each process spent (the generator, the front gate, tritonserver, each model's
stubs) read from /proc around the level: on 2 cores shared with other jobs, wall-clock ratios
swing with the neighbours' load, CPU-ms per request much less.

    .venv/bin/python -m harness.measuring.pair_bench resnet_npu \\
        --pair checks.py:workload_efficientnet_lite0_b1 checks.py:workload_classify_efficientnet_lite0_jpeg \\
        --variant before '{"efficientnet_lite0": {"parameters": {"session.intra_op.allow_spinning": "1"}}}' \\
        --variant now '{}' --concurrency 1 4 --duration 4 --rounds 2

Results are printed (one line per level, one RATIO line per pair); nothing is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

from harness.deployments import get_deployment
from harness.measuring.loadgen import _stats, run_load, server_split
from harness.session import ServerPool


def cpu_seconds(server_pid: int) -> dict[str, float]:
    """CPU seconds so far of this process and of each part of the server's process tree."""
    import psutil

    root = psutil.Process(server_pid)
    out: dict[str, float] = {}
    for process in [root, *root.children(recursive=True)]:
        try:
            times, command = process.cpu_times(), process.cmdline()
        except psutil.Error:
            continue
        program = os.path.basename(command[0]) if command else ""
        if program == "triton_python_backend_stub":
            key = "stub:" + re.sub(r"_\d+_\d+$", "", command[-2])
        elif program == "tritonserver":
            key = "tritonserver"
        else:
            key = "gate" if process.pid == server_pid else program
        out[key] = out.get(key, 0.0) + times.user + times.system
    mine = psutil.Process(os.getpid()).cpu_times()
    out["generator"] = mine.user + mine.system
    return out


def measure(ctx, workload, concurrency: int, duration: float, steps: list[str]) -> dict:
    """One level: throughput, p50, per-step Triton stats and CPU-ms per request by process."""
    http = ctx.server.http_url
    models = [workload.model] + [s for s in steps if s != workload.model]
    before = {m: _stats(http, m) for m in models}
    cpu0 = cpu_seconds(ctx.server.process.pid)
    level = run_load(
        workload,
        protocol="grpc" if ctx.server.grpc_url else "http",
        url=ctx.server.grpc_url or http,
        http_url=http,
        concurrency=concurrency,
        duration_s=duration,
        warmup_s=1.0,
    )
    cpu1 = cpu_seconds(ctx.server.process.pid)
    after = {m: _stats(http, m) for m in models}
    done = max(after[workload.model]["success_count"] - before[workload.model]["success_count"], 1)
    cpu_ms = {k: round((cpu1[k] - cpu0.get(k, 0.0)) / done * 1e3, 2) for k in cpu1}
    metrics = level.metrics(workload.items_per_request)
    return {
        "infer_per_s": metrics["perf_throughput"],
        "p50_ms": metrics["perf_latency_p50"],
        "errors": metrics["errors"],
        "cpu_ms_per_request": cpu_ms,
        "cpu_ms_total": round(sum(cpu_ms.values()), 2),
        "steps": {m: server_split(before[m], after[m]) for m in models},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness pair-bench", description=__doc__.splitlines()[0])
    parser.add_argument("deployment")
    parser.add_argument(
        "--pair",
        nargs=2,
        action="append",
        required=True,
        metavar=("MODEL_ONLY", "ENTRY"),
        help="two workloads ('file.py:function' of the deployment); repeatable",
    )
    parser.add_argument(
        "--variant",
        nargs=2,
        action="append",
        metavar=("NAME", "OVERRIDES_JSON"),
        help="a server variant: config overrides as JSON ({} = the repository as it is)",
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", nargs="*", default=[], help="more models whose Triton stats to print")
    parser.add_argument("--json", help="also write every level here")
    args = parser.parse_args(argv)
    deployment = get_deployment(args.deployment)
    variants = {name: json.loads(text) or None for name, text in (args.variant or [["as-is", "{}"]])}
    pool = ServerPool()
    levels = []
    try:
        contexts = {name: pool.context(deployment, config) for name, config in variants.items()}
        for round_index in range(args.rounds):
            for concurrency in args.concurrency:
                for name, ctx in contexts.items():
                    for model_only, entry in args.pair:
                        got = {}
                        for role, reference in (("model-only", model_only), ("entry", entry)):
                            workload = deployment.resolve(reference)(ctx)
                            got[role] = measure(ctx, workload, concurrency, args.duration, args.steps)
                            cpu = " ".join(
                                f"{k.removeprefix('stub:')}={v}"
                                for k, v in got[role]["cpu_ms_per_request"].items()
                                if v >= 0.05
                            )
                            print(
                                f"r{round_index} c={concurrency} {name:12} {role:10} {workload.model:30} "
                                f"{got[role]['infer_per_s']:7.1f}/s p50 {got[role]['p50_ms']:7.1f} ms "
                                f"errors {got[role]['errors']} | cpu ms/req {got[role]['cpu_ms_total']}: {cpu}",
                                flush=True,
                            )
                        ratio = got["entry"]["infer_per_s"] / max(got["model-only"]["infer_per_s"], 1e-9)
                        cpu_ratio = got["model-only"]["cpu_ms_total"] / max(got["entry"]["cpu_ms_total"], 1e-9)
                        print(
                            f"RATIO r{round_index} c={concurrency} {name:12} {entry}: infer/s {ratio:.3f}, "
                            f"CPU per request (model-only / entry) {cpu_ratio:.3f}",
                            flush=True,
                        )
                        levels.append(
                            {
                                "round": round_index,
                                "concurrency": concurrency,
                                "variant": name,
                                "pair": [model_only, entry],
                                "ratio": round(ratio, 3),
                                "cpu_ratio": round(cpu_ratio, 3),
                                **got,
                            }
                        )
    finally:
        pool.close()
        if args.json:
            with open(args.json, "w") as handle:
                json.dump(levels, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
