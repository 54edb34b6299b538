"""Benchmark scenarios from the manifests, run by the load generator, written as records."""

from __future__ import annotations

import re
from collections.abc import Callable

from harness.context import DeploymentContext
from harness.deployments import Benchmark
from harness.measuring.loadgen import GENERATOR, LoadResult, Workload, endpoint, measure_in_process, run_load
from harness.measuring.records import append_record, scenario_fields

#: What the harness's openvino backend logs at load: the precision that ran and the CPU's flags.
ENGINE_RAN = re.compile(r'(?P<model>[^\s"]+): served by \S+,.* (?P<ran>precision=\S+) .*(?P<flags>cpu_flags=[^\s"]+)')


def engine_ran(logs: str, model: str) -> str:
    """``precision=<p> cpu_flags=<flags>`` from the last load line of ``model`` in the server's
    log ('' when the backend logged none, as the native backends do not)."""
    found = ""
    for match in ENGINE_RAN.finditer(logs or ""):
        if match["model"] == model:
            found = f"{match['ran']} {match['flags']}"
    return found


def model_backends(ctx: DeploymentContext, model: str) -> dict[str, str]:
    """``{model: backend implementation}`` for a model and, for an ensemble, its steps; for a model
    on the harness's openvino backend, with the precision that ran and the CPU's flags."""
    logs = None
    with ctx.http_client() as client:
        config = client.get_model_config(model)
        found = {}
        steps = config.get("ensemble_scheduling", {}).get("step", [])
        for name in [model] + [s["model_name"] for s in steps]:
            cfg = config if name == model else client.get_model_config(name)
            backend = cfg.get("backend") or cfg.get("platform") or "unknown"
            found[name] = ctx.server.backend_implementation(backend)
            if backend == "openvino":
                logs = ctx.server.logs() if logs is None else logs
                ran = engine_ran(logs, name)
                found[name] += f" {ran}" if ran else ""
    return found


def ceiling_fields(workload: Workload, level: LoadResult, duration_s: float) -> dict:
    """The in-process ceiling at the batch the server could form at this level, and served / ceiling
    ({} when the workload defines no ceiling)."""
    if workload.ceiling is None:
        return {}
    batch = level.concurrency * workload.items_per_request
    measured = measure_in_process(workload.ceiling(batch), batch, duration_s=min(duration_s, 3.0))
    served = level.metrics(workload.items_per_request)["items_per_second"]
    return {
        "ceiling_items_per_second": measured["items_per_second"],
        "ceiling_batch_size": batch,
        "served_over_ceiling": round(served / measured["items_per_second"], 3),
    }


def run_benchmark(
    ctx: DeploymentContext,
    benchmark: Benchmark,
    *,
    duration_s: float,
    warmup_s: float = 1.0,
    concurrencies: list[int] | None = None,
    protocol: str | None = None,
    on_level: Callable[[LoadResult], None] | None = None,
    record_fields: dict | None = None,
    backends_of: tuple[str, ...] = (),
    ceiling: bool = True,
) -> list[dict]:
    """Run one scenario at each concurrency and append a record per level (with ``record_fields``,
    e.g. a comparison run's ``comparison``; the backends of ``backends_of`` too; the in-process
    ceiling unless ``ceiling`` is False); returns them."""
    workload: Workload = ctx.deployment.resolve(benchmark.workload)(ctx)
    protocol, _ = endpoint(ctx.server, protocol or benchmark.protocol)
    scenario = scenario_fields(
        ctx,
        benchmark,
        workload,
        protocol=protocol,
        generator=f"{GENERATOR} (tritonclient {protocol}.aio)",
        server=ctx.server.describe(),
        backends=model_backends(ctx, workload.model),
    )
    for model in backends_of:
        if model not in scenario["backend_implementation"]:
            scenario["backend_implementation"].update(model_backends(ctx, model))
    records = []
    for concurrency in concurrencies or benchmark.concurrency:
        level = run_load(
            workload, ctx.server, protocol=protocol, concurrency=concurrency, duration_s=duration_s, warmup_s=warmup_s
        )
        limit = ceiling_fields(workload, level, duration_s) if ceiling else {}
        records.append({**scenario, **level.metrics(workload.items_per_request), **limit, **(record_fields or {})})
        append_record(records[-1])
        if on_level:
            on_level(level)
    return records
