"""Side-by-side embedding run: Triton's embedding models (native and OpenAI-style requests), their
in-process ceilings and infinity-emb, one workload at a time, the servers alternating within it,
one wrk generator.

What is served, and compared with which ceiling: the deployment's ``[peers]`` table (docs/harness.md).
Each record's ``path``: ``native`` (``/v2/models/<m>/infer``), ``openai`` (``/v1/embeddings`` through
the front gate, which tritonserver runs behind unless ``--no-gate``) or ``peer`` (infinity-emb).
Servers and ceiling workers run on ``--server-cores``, wrk on ``--generator-cores``; every (batch,
concurrency) workload (``--batch``: sentences per request, or ``mixed``: one text a request of
the deployment's mixed lengths) runs ``--rounds`` rounds of ``--duration`` s per target, each round's ceiling
the better of the request's batch and ``min(batch x concurrency, 64)``; records go to
results/records.jsonl (``comparison: side-by-side``) with every round's sentences/s. The
``[peers.variants]`` (e.g. the text model on OpenVINO BF16) are served too, each on a tritonserver of
its own, where the CPU has the flags they need (``--declared-variants`` chooses).

    make bench-peers BENCH_DURATION=5 PEERS_ARGS="--rounds 2"
    python -m harness peers --deployment <d> --models <m1>,<m2> --batch 1,8 --concurrency 1,8
    python -m harness peers --models <m> --peers optimum --encoding-format base64
"""

from __future__ import annotations

import argparse
import json
import os
import uuid
from contextlib import ExitStack
from dataclasses import dataclass

from harness.deployments import Deployment, ManifestError
from harness.manifest import ConfigOverrides, overrides_table
from harness.measuring.engines import cpu_flags
from harness.measuring.pinning import cores_label
from harness.measuring.records import append_record
from harness.testing.servers import deployment_server, started, stop_server
from harness_lab.manifest import PeersSpec, chosen, resolve
from harness_lab.peers import workloads
from harness_lab.peers.infinity import InfinityServer
from harness_lab.peers.measure import CeilingWorker, Cell, measure_cell, side_by_side_record
from harness_lab.peers.targets import (
    ServedVariant,
    Target,
    TargetOptions,
    declared_variants,
    native_targets,
    openai_calls,
    openai_target,
    peer_target,
    post,
    route_exists,
)
from harness_lab.peers.wrk import WrkGenerator


def parser() -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = found.add_argument
    add("--deployment", default=None, help="default: the one with a [peers] table")
    add("--duration", type=float, default=5.0, help="seconds per target per round")
    add("--rounds", type=int, default=2)
    add("--batch", default="1,8,32,mixed", help="sentences per request; mixed: one text a request, mixed lengths")
    add("--concurrency", default="1,8,32")
    add("--models", default=None, help="comma-separated (default: [peers] default_models)")
    add("--peers", default="optimum,torch", help="infinity-emb engines ('' for none)")
    add("--openai-models", default=None, help="served through /v1/embeddings too (default: [peers] openai_models)")
    add(
        "--gate",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="tritonserver behind the front gate, as users run it (--no-gate: native requests only)",
    )
    add(
        "--encoding-format",
        choices=("float", "base64"),
        default=None,
        help="of every OpenAI-style body (default: float)",
    )
    add(
        "--native-reply",
        choices=("binary", "json"),
        default="binary",
        help="of the native text models: the vectors as binary data (what tritonclient asks for) or JSON numbers",
    )
    add("--server-cores", default=None, help="default: every core but 0")
    add("--generator-cores", default="0")
    add("--triton-config", default=None, help="JSON config overrides (harness.variants)")
    add(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=JSON",
        help="one more tritonserver (same cores) with these config overrides; its --variant-models are targets named MODEL[NAME]",
    )
    add("--variant-models", default=None, help="default: [peers] variant_models")
    add(
        "--declared-variants",
        default=None,
        help="comma-separated [peers.variants] names ('' for none; default: all where the CPU has their flags)",
    )
    add("--label", default="", help="appended to each variant (e.g. the lever tried)")
    return found


@dataclass
class RunPlan:
    """What one side-by-side run serves and loads, from the command line and the ``[peers]`` table."""

    deployment: Deployment
    spec: PeersSpec
    models: list[str]
    openai_models: list[str]
    variants: list[ServedVariant]
    #: infinity-emb engines served as peers
    engines: list[str]
    #: (workload, texts per request) in the order given
    batches: list[tuple[str, int]]
    concurrencies: list[int]
    server_cores: set[int]
    generator_cores: set[int]
    overrides: dict | None
    options: TargetOptions
    rounds: int
    duration_s: float
    label: str

    @property
    def threads(self) -> int:
        return len(self.server_cores)


def _names(given: str | None, default) -> list[str]:
    return [m for m in given.split(",") if m] if given is not None else list(default)


def _variants(parser, args, deployment: Deployment, spec: PeersSpec, models: list[str], flags) -> list[ServedVariant]:
    """The declared variants this run serves (a line for each left out) and the ``--variant`` ones."""
    declared = _names(args.declared_variants, spec.variants) if args.declared_variants is not None else None
    if declared and set(declared) - set(spec.variants):
        parser.error(f"--declared-variants: {deployment.name}'s [peers.variants] are {', '.join(spec.variants)}")
    variants, skipped = declared_variants(deployment, spec, models, declared, flags)
    for line in skipped:
        print(line, flush=True)
    variant_models = _names(args.variant_models, spec.variant_models)
    unknown = [m for m in variant_models if m not in spec.models]
    if unknown:
        parser.error(f"{unknown[0]!r} is not in {deployment.name}'s [peers.models] ({', '.join(spec.models)})")
    for variant in args.variant:
        name, _, config = variant.partition("=")
        variants.append(ServedVariant(name, overrides_table(json.loads(config)), variant_models))
    return variants


def _cores(args) -> tuple[set[int], set[int]]:
    """(server cores, generator cores): ``--server-cores``, else every core but the generator's."""
    all_cores = set(os.sched_getaffinity(0))
    generator = {int(c) for c in args.generator_cores.split(",")}
    server = {int(c) for c in args.server_cores.split(",")} if args.server_cores else all_cores - generator
    return server or all_cores, generator


def plan(parser, args) -> RunPlan:
    try:
        deployment, lab = chosen("peers", args.deployment)
    except ManifestError as exc:
        parser.error(str(exc))
    spec = lab.peers
    if spec is None:
        parser.error(f"{deployment.name} has no [peers] table in lab/deployments/{deployment.name}.toml")
    models = _names(args.models, spec.default_models)
    openai_models = _names(args.openai_models, spec.openai_models)
    if openai_models and not args.gate:
        print(f"--no-gate: no /v1/embeddings without the front gate; {openai_models} native only", flush=True)
        openai_models = []
    unknown = [m for m in models + openai_models if m not in spec.models]
    if unknown:
        parser.error(f"{unknown[0]!r} is not in {deployment.name}'s [peers.models] ({', '.join(spec.models)})")
    flags = cpu_flags()
    server_cores, generator_cores = _cores(args)
    return RunPlan(
        deployment,
        spec,
        models,
        openai_models,
        _variants(parser, args, deployment, spec, models, flags),
        engines=[p for p in args.peers.split(",") if p],
        batches=[
            (workloads.MIXED, 1) if b == workloads.MIXED else (workloads.UNIFORM, int(b)) for b in args.batch.split(",")
        ],
        concurrencies=[int(c) for c in args.concurrency.split(",")],
        server_cores=server_cores,
        generator_cores=generator_cores,
        overrides=json.loads(args.triton_config) if args.triton_config else None,
        options=TargetOptions(args.gate, args.encoding_format, args.native_reply, flags),
        rounds=args.rounds,
        duration_s=args.duration,
        label=args.label,
    )


def fitted_to_cores(
    deployment: Deployment, overrides: dict[str, ConfigOverrides] | None, cores: int
) -> dict[str, ConfigOverrides]:
    """``overrides`` with every CPU model's instance count capped at ``cores`` where they do not set
    it: as a user sizes the configs for the cores the server gets (instances beyond them only switch)."""
    from harness.repository import configs

    fitted = dict(overrides or {})
    for model, config in configs(deployment.model_repository).items():
        count = sum(group.count for group in config.instance_group)
        if count > cores and fitted.get(model, ConfigOverrides()).instance_count is None:
            fitted[model] = fitted.get(model, ConfigOverrides()).model_copy(update={"instance_count": cores})
    return fitted


def start_triton(deployment: Deployment, models: list[str], cores: set[int], overrides: dict | None, gate: bool):
    """As users serve it (``harness serve``): the deployment's cpu options and gate policy, on
    ``models`` and what they call, pinned to ``cores`` (no model with more instances than ``cores``:
    ``fitted_to_cores``)."""
    overrides = fitted_to_cores(deployment, overrides, len(cores))
    server = deployment_server(deployment, models, overrides=overrides, gate=gate)
    previous = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)  # tritonserver and its stubs inherit the mask
    try:
        return started(server)
    finally:
        os.sched_setaffinity(0, previous)


def start_servers(run: RunPlan, pieces, stack: ExitStack) -> list[Target]:
    """Every server of the run started (each stopped when ``stack`` closes) and its targets."""
    deployment, spec, cores, gate = run.deployment, run.spec, run.server_cores, run.options.gate
    targets = []
    served = list(dict.fromkeys(run.models + run.openai_models + openai_calls(deployment, run.openai_models, spec)))
    if served:
        triton = start_triton(deployment, served, cores, run.overrides, gate)
        stack.callback(stop_server, triton)
        targets += native_targets(deployment, spec, triton, run.models, pieces, run.options)
        targets += [openai_target(spec, triton, model, pieces, run.options) for model in run.openai_models]
    for variant in run.variants:
        variant.server = start_triton(deployment, variant.models, cores, variant.config, gate)
        stack.callback(stop_server, variant.server)
        targets += native_targets(deployment, spec, variant.server, variant.models, pieces, run.options, variant)
    peer_onnx = deployment.path / spec.ceiling_onnx[spec.peer_onnx]
    peers = [InfinityServer(e, pieces.model_dir, peer_onnx, cores=cores, threads=run.threads) for e in run.engines]
    for peer in peers:
        peer.start()
        stack.callback(peer.stop)
        targets.append(peer_target(peer, spec, pieces, run.options))
    missing = [t for t in targets if t.server.get("path") == "openai" and not route_exists(t.url)]
    if missing:
        print(f"no {missing[0].url} on this server: {', '.join(t.name for t in missing)} not measured", flush=True)
    return [t for t in targets if t not in missing]


def measure(run: RunPlan, pieces, targets: list[Target], workers: dict, generator, run_fields: dict) -> None:
    """Every workload of the run, then every concurrency: its rounds, a record per target."""
    for workload, batch in run.batches:
        bodies = {t.name: workloads.bodies(t.make_body, pieces, workload, batch) for t in targets}
        for target in targets:
            target.check(post(target.url, bodies[target.name][0]).content, batch)
        for concurrency in run.concurrencies:
            cell = Cell(workload, batch, concurrency, run.rounds, run.duration_s)
            measured, ceilings = measure_cell(generator, targets, workers, bodies, cell)
            for target in targets:
                rounds, ceiling = measured[target.name], ceilings[target.ceiling]
                record = side_by_side_record(
                    run_fields, target, cell, rounds, ceiling, workers[target.ceiling].precision
                )
                append_record(record.as_dict())
                print(record.line(cell), flush=True)


def main(argv: list[str] | None = None) -> int:
    arguments = parser()
    run = plan(arguments, arguments.parse_args(argv))
    pieces = resolve(run.deployment.name, run.spec.embedding)()
    if not hasattr(pieces, workloads.MIXED) and (workloads.MIXED, 1) in run.batches:
        print(f"{run.deployment.name}'s [peers] embedding gives no `mixed` texts: no mixed workload", flush=True)
        run.batches.remove((workloads.MIXED, 1))
    run_id, generator = uuid.uuid4().hex[:12], WrkGenerator(run.generator_cores)
    print(f"run {run_id}: servers on cores {cores_label(run.server_cores)}, {generator.describe()}", flush=True)
    run_fields = {
        "deployment": run.deployment.name,
        "run_id": run_id,
        "generator": generator.describe(),
        "server_cores": cores_label(run.server_cores),
        "generator_cores": cores_label(run.generator_cores),
        "config_overrides": run.overrides,
        "label": run.label,
    }
    with ExitStack() as stack:
        stack.callback(generator.close)
        targets = start_servers(run, pieces, stack)
        workers = {}
        for kind in sorted({t.ceiling for t in targets}):
            workers[kind] = CeilingWorker(run.deployment.name, kind, run.server_cores, run.threads)
            stack.callback(workers[kind].close)
        measure(run, pieces, targets, workers, generator, run_fields)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
