"""Side-by-side ratios: an entry model vs its model-only path, per server variant, rounds alternating.

Each level reports infer/s and, per request, the CPU ms of each process (generator, front gate,
tritonserver, each model's stubs) read from /proc. The pairs are the manifests' (each benchmark naming
a ``model_only`` one); ``--record-results`` appends one ``processing-pair`` record per pair and
concurrency (``make bench-pairs``). Usage and findings: docs/tuning.md.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import uuid

from harness.deployments import discover, get_deployment
from harness.manifest import Benchmark
from harness.measuring.alternate import in_turn
from harness.measuring.loadgen import GENERATOR, _stats, endpoint, run_load
from harness.measuring.pinning import container_pids
from harness.measuring.records import append_record
from harness.session import ServerPool, variant_key

COMPARISON = "processing-pair"


def server_root_pid(server) -> int | None:
    """The root of the server's process tree on this machine: the launcher's process (local), the
    container's init (docker); None when it runs elsewhere."""
    process = getattr(server, "process", None)
    if process is not None:
        return process.pid
    try:
        return min(container_pids(int(server.http_url.rsplit(":", 1)[1])))
    except Exception:  # noqa: BLE001 - no container here (a remote server): no server CPU to read
        return None


def cpu_seconds(server_pid: int | None) -> dict[str, float]:
    """CPU seconds so far of this process and of each part of the server's process tree."""
    import psutil

    out: dict[str, float] = {}
    root = psutil.Process(server_pid) if server_pid else None
    for process in [root, *root.children(recursive=True)] if root else []:
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


def triton_cpu_ms(level: dict) -> float:
    """CPU ms per request of tritonserver and its stubs alone (no front gate, no generator)."""
    return sum(v for k, v in level["cpu_ms_per_request"].items() if k == "tritonserver" or k.startswith("stub:"))


def measure(ctx, workload, concurrency: int, duration: float, protocol: str = "grpc") -> dict:
    """One level: throughput, p50 and CPU-ms per request by process."""
    protocol, _ = endpoint(ctx.server, protocol)
    before = _stats(ctx.server.http_url, workload.model)
    root = server_root_pid(ctx.server)
    cpu0 = cpu_seconds(root)
    level = run_load(
        workload, ctx.server, protocol=protocol, concurrency=concurrency, duration_s=duration, warmup_s=1.0
    )
    cpu1 = cpu_seconds(root)
    done = max(_stats(ctx.server.http_url, workload.model)["success_count"] - before["success_count"], 1)
    cpu_ms = {k: round((cpu1[k] - cpu0.get(k, 0.0)) / done * 1e3, 2) for k in cpu1}
    metrics = level.metrics(workload.items_per_request)
    return {
        "infer_per_s": metrics["perf_throughput"],
        "items_per_s": metrics["items_per_second"],
        "protocol": protocol,
        "pinning": metrics["pinning"],
        "server_cpu_read": "tritonserver" in cpu1,
        "p50_ms": metrics["perf_latency_p50"],
        "errors": metrics["errors"],
        "cpu_ms_per_request": cpu_ms,
        "cpu_ms_total": round(sum(cpu_ms.values()), 2),
    }


def _show(round_index: int, concurrency: int, name: str, role: str, model: str, got: dict) -> None:
    cpu = " ".join(f"{k.removeprefix('stub:')}={v}" for k, v in got["cpu_ms_per_request"].items() if v >= 0.05)
    print(
        f"r{round_index} c={concurrency} {name:12} {role:10} {model:30} {got['infer_per_s']:7.1f}/s "
        f"p50 {got['p50_ms']:7.1f} ms errors {got['errors']} | cpu ms/req {got['cpu_ms_total']}: {cpu}",
        flush=True,
    )


def run_pair(ctx, name: str, pair: tuple[Benchmark, Benchmark], concurrency: int, round_index: int, args) -> dict:
    """Both benchmarks of a ``(model_only, entry)`` pair back to back, in turn (model-only first in
    even rounds)."""
    roles = dict(zip(["model-only", "entry"], pair))
    got = {}
    for role in in_turn(list(roles), round_index):
        workload = ctx.deployment.resolve(roles[role].workload)(ctx)
        got[role] = measure(ctx, workload, concurrency, args.duration, roles[role].protocol)
        got[role]["model"] = workload.model
        got[role]["variant"] = workload.variant
        got[role]["items_per_request"] = workload.items_per_request
        _show(round_index, concurrency, name, role, workload.model, got[role])
    ratio = got["entry"]["items_per_s"] / max(got["model-only"]["items_per_s"], 1e-9)
    cpu_ratio = got["model-only"]["cpu_ms_total"] / max(got["entry"]["cpu_ms_total"], 1e-9)
    triton_ratio = triton_cpu_ms(got["model-only"]) / max(triton_cpu_ms(got["entry"]), 1e-9)
    print(
        f"RATIO r{round_index} c={concurrency} {name:12} {roles['entry'].workload}: items/s {ratio:.3f}, "
        f"CPU per request (model-only / entry) {cpu_ratio:.3f}",
        flush=True,
    )
    return {
        "round": round_index,
        "concurrency": concurrency,
        "variant": name,
        "ratio": round(ratio, 3),
        "cpu_ratio": round(cpu_ratio, 3),
        "triton_cpu_ratio": round(triton_ratio, 3),
        **got,
    }


def manifest_pairs(deployment, target: str, only: list[str] | None = None) -> list[tuple[Benchmark, Benchmark]]:
    """``(model_only, entry)`` benchmarks of a manifest: every benchmark on ``target`` naming a ``model_only``."""
    return [  # the manifest's validation makes sure each model_only names a benchmark
        (deployment.benchmark(entry.model_only), entry)
        for entry in deployment.benchmarks
        if entry.model_only and (not entry.targets or target in entry.targets) and (not only or entry.id in only)
    ]


def pair_record(
    deployment, pair: tuple[Benchmark, Benchmark], concurrency: int, levels: list[dict], server, run_id: str
) -> dict:
    """One ``processing-pair`` record: every round of one pair at one concurrency."""
    alone, entry = pair
    ratios = [lv["ratio"] for lv in levels]
    here = all(lv["entry"]["server_cpu_read"] and lv["model-only"]["server_cpu_read"] for lv in levels)
    cpu_ratios = [lv["cpu_ratio"] for lv in levels] if here else []
    triton_ratios = [lv["triton_cpu_ratio"] for lv in levels] if here else []
    first = levels[0]["entry"]
    protocol = first["protocol"]
    return {
        "comparison": COMPARISON,
        "run_id": run_id,
        "deployment": deployment.name,
        "benchmark": f"pair:{entry.id}",
        "entry_benchmark": entry.id,
        "model_only_benchmark": alone.id,
        "model": first["model"],
        "model_only_model": levels[0]["model-only"]["model"],
        "variant": first["variant"] or entry.id,
        "target": server["target"],
        "server_mode": server["server_mode"],
        "server_version": server["server_version"],
        "protocol": protocol,
        "generator": f"{GENERATOR} (tritonclient {protocol}.aio)",
        "pinning": first["pinning"],
        "config_overrides": entry.overrides,
        "concurrency": concurrency,
        "items_per_request": first["items_per_request"],
        "rounds": len(levels),
        "items_per_second": round(statistics.median(lv["entry"]["items_per_s"] for lv in levels), 2),
        "rounds_items_per_second": [lv["entry"]["items_per_s"] for lv in levels],
        "model_only_items_per_second": round(statistics.median(lv["model-only"]["items_per_s"] for lv in levels), 2),
        "rounds_model_only_items_per_second": [lv["model-only"]["items_per_s"] for lv in levels],
        "rounds_ratio": ratios,
        "ratio": round(statistics.median(ratios), 3),
        "rounds_cpu_ratio": cpu_ratios,
        "cpu_ratio": round(statistics.median(cpu_ratios), 3) if cpu_ratios else None,
        "rounds_triton_cpu_ratio": triton_ratios,
        "triton_cpu_ratio": round(statistics.median(triton_ratios), 3) if triton_ratios else None,
        "errors": sum(lv["entry"]["errors"] + lv["model-only"]["errors"] for lv in levels),
    }


def run_manifest(args) -> int:
    """Every manifest pair of the chosen deployments, one server per config variant, rounds alternating."""
    deployments = [get_deployment(args.deployment)] if args.deployment else discover()
    pool = ServerPool(mode=args.mode, target=args.target)
    run_id = uuid.uuid4().hex[:12]
    failed = []
    try:
        for deployment in deployments:
            pairs = manifest_pairs(deployment, args.target) if args.target in deployment.targets else []
            variants: dict[str, list] = {}
            for pair in pairs:
                variants.setdefault(variant_key(deployment, pair[1].config), []).append(pair)
            for key, group in variants.items():
                config = group[0][1].config
                wanted = [set(b.models) for pair in group for b in pair]
                models = () if any(not m for m in wanted) else tuple(sorted(set().union(*wanted)))
                try:
                    ctx = pool.context(deployment, config, models)
                    server = {"target": args.target, **ctx.server.describe()}
                    levels: dict[tuple[int, int], list] = {}
                    for round_index in range(args.rounds):
                        for index, pair in enumerate(group):
                            for concurrency in args.concurrency or pair[1].concurrency:
                                level = run_pair(ctx, key, pair, concurrency, round_index, args)
                                levels.setdefault((index, concurrency), []).append(level)
                    for (index, concurrency), found in levels.items():
                        record = pair_record(deployment, group[index], concurrency, found, server, run_id)
                        print(
                            f"PAIR {deployment.name} {group[index][1].id} c={concurrency}: median {record['ratio']} "
                            f"rounds {record['rounds_ratio']} cpu {record['rounds_cpu_ratio']}",
                            flush=True,
                        )
                        if args.record_results:
                            append_record(record)
                except Exception as exc:  # noqa: BLE001 - one broken variant must not hide the others
                    failed.append(f"{key}: {type(exc).__name__}: {exc}")
                    print(f"FAILED {failed[-1]}", file=sys.stderr, flush=True)
                finally:
                    if config:
                        pool.release(key)
            pool.release(deployment.name)
    finally:
        pool.close()
    if failed:
        print(f"{len(failed)} pair variant(s) failed:\n  " + "\n  ".join(failed), file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness pair-bench", description=__doc__.splitlines()[0])
    parser.add_argument("deployment", nargs="?", help="a deployment (all when omitted)")
    parser.add_argument("--manifest", action="store_true", help="the manifests' pairs: the only mode (kept as a flag)")
    parser.add_argument("--record-results", action="store_true", help="append one record per pair and concurrency")
    parser.add_argument("--mode", help="server mode (local, docker; default TRITON_SERVER_MODE or local)")
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--concurrency", type=int, nargs="+", help="default: each benchmark's")
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=2)
    return run_manifest(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
