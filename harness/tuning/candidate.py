"""One candidate config: served on its own server (a derived repository, as ``--config-variant``
serves one), gated by the deployment's checks, then measured by the load generator."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pytest

from harness.context import DeploymentContext
from harness.deployments import Benchmark, Deployment
from harness.manifest import ConfigOverrides
from harness.measuring.bench import model_backends
from harness.measuring.loadgen import GENERATOR, _stats, run_load, server_split
from harness.measuring.records import append_record, scenario_fields
from harness.repository import dependencies

log = logging.getLogger(__name__)


class CandidateRejected(Exception):
    """A candidate whose server did not start or whose checks failed: recorded, never measured."""


@dataclass
class CheckOutcome:
    """The deployment's checks on one candidate: those that passed, those that do not apply (they
    skipped themselves, or fail on the shipped config too with only these models loaded), and each
    failure's reason."""

    passed: list[str] = field(default_factory=list)
    not_applicable: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        text = f"{len(self.passed)} passed"
        if self.failed:
            text += f", {len(self.failed)} failed"
        return text + (f", {len(self.not_applicable)} n/a" if self.not_applicable else "")

    def reason(self) -> str:
        name, why = next(iter(self.failed.items()))
        return f"check {name} failed: {' '.join(why.split())[:300]}"


def loaded_models(deployment: Deployment, models: list[str], benchmark: Benchmark | None = None) -> list[str]:
    """What a candidate's server loads: the tuned models, the benchmark's, and what they call."""
    return dependencies(deployment.model_repository, [*models, *(benchmark.models if benchmark else [])])


def run_checks(ctx: DeploymentContext, names: list[str] | None = None) -> CheckOutcome:
    """The deployment's checks (``names``: only those) against ``ctx``; one that skips itself is not applicable."""
    outcome = CheckOutcome()
    for name, check in ctx.deployment.checks().items():
        if names is not None and name not in names:
            continue
        try:
            check(ctx)
        except pytest.skip.Exception:
            outcome.not_applicable.append(name)
        except Exception as exc:  # noqa: BLE001 - a failing check is the outcome recorded
            outcome.failed[name] = f"{type(exc).__name__}: {exc}"
        else:
            outcome.passed.append(name)
    return outcome


def benchmark_for(ctx: DeploymentContext, loaded: list[str], target: str) -> Benchmark | None:
    """The first benchmark without config overrides whose workload calls a model this server loads."""
    for benchmark in ctx.deployment.benchmarks:
        if benchmark.config or (benchmark.targets and target not in benchmark.targets):
            continue
        try:
            workload = ctx.deployment.resolve(benchmark.workload)(ctx)
        except Exception as exc:  # noqa: BLE001 - a workload that needs more than this server: not this one
            log.debug("%s: its workload cannot run here: %s", benchmark.id, exc)
            continue
        if workload.model in loaded:
            return benchmark
    return None


def tuned_benchmark(benchmark: Benchmark, overrides: dict[str, dict]) -> Benchmark:
    """``benchmark`` with the candidate's overrides as its config (what its records carry)."""
    return benchmark.model_copy(update={"config": {m: ConfigOverrides(**o) for m, o in overrides.items()}})


def model_statistics(ctx: DeploymentContext, models: list[str]) -> dict[str, dict]:
    """Triton's cumulative per-model statistics (ns totals and counts) of ``models``."""
    return {model: _stats(ctx.server.http_url, model) for model in models}


def measure(
    ctx: DeploymentContext,
    benchmark: Benchmark,
    *,
    concurrency: int,
    duration_s: float,
    tuned_models: list[str],
    record_fields: dict,
) -> dict:
    """One load level on the candidate's server; appends and returns its record, with each tuned
    model's queue and compute times (ms per request) and batch size, and the engine that ran."""
    workload = ctx.deployment.resolve(benchmark.workload)(ctx)
    protocol = benchmark.protocol if ctx.server.grpc_url else "http"
    url = ctx.server.grpc_url if protocol == "grpc" else ctx.server.http_url
    before = model_statistics(ctx, tuned_models)
    level = run_load(
        workload,
        protocol=protocol,
        url=url,
        http_url=ctx.server.http_url,
        concurrency=concurrency,
        duration_s=duration_s,
        warmup_s=min(1.0, duration_s / 2),
    )
    after = model_statistics(ctx, tuned_models)
    backends = model_backends(ctx, workload.model)
    for model in tuned_models:
        if model not in backends:
            backends.update(model_backends(ctx, model))
    row = {
        **scenario_fields(
            ctx,
            benchmark,
            workload,
            protocol=protocol,
            generator=f"{GENERATOR} (tritonclient {protocol}.aio)",
            server=ctx.server.describe(),
            backends=backends,
        ),
        **level.metrics(workload.items_per_request),
        "tuned_model_statistics": {m: server_split(before[m], after[m]) for m in tuned_models},
        **record_fields,
    }
    append_record(row)
    return row
