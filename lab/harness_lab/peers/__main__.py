"""Side-by-side embedding run: Triton's embedding models (native and OpenAI-style requests), their
in-process ceilings, infinity-emb and a naive FastAPI server, one workload at a time, the servers
alternating within it, one wrk generator.

What is served, and compared with which ceiling: the deployment's ``[peers]`` table (docs/harness.md).
Each record's ``path``: ``native`` (``/v2/models/<m>/infer``), ``openai`` (``/v1/embeddings`` through
the front gate, which tritonserver runs behind unless ``--no-gate``) or ``peer`` (infinity-emb, naive).
Servers and ceiling workers run on ``--server-cores``, wrk on ``--generator-cores``; every (batch,
concurrency) workload (``--batch``: sentences per request, or ``mixed``: one text a request of
the deployment's mixed lengths) runs ``--rounds`` rounds of ``--duration`` s per target, each round's ceiling
the better of the request's batch and ``min(batch x concurrency, 64)``; records go to
results/records.jsonl (``comparison: side-by-side``) with every round's sentences/s. The
``[peers.variants]`` (e.g. the text model on OpenVINO BF16) are served too, each on a tritonserver of
its own, where the CPU has the flags they need (``--declared-variants`` chooses).

    make bench-peers BENCH_DURATION=5 PEERS_ARGS="--rounds 2"
    python -m harness peers --deployment <d> --models <m1>,<m2> --batch 1,8 --concurrency 1,8
    python -m harness peers --models <m> --peers optimum,naive --encoding-format base64
"""

from __future__ import annotations

import argparse
import base64
import functools
import json
import os
import statistics
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import requests

from harness import PROJECT_ROOT
from harness.deployments import Deployment, ManifestError, declaring, get_deployment
from harness.manifest import PeerVariant
from harness.measuring.engines import cpu_flags
from harness.measuring.generators.wrk import WrkGenerator, cores_label
from harness.measuring.records import append_record
from harness.testing.servers import deployment_server, started, stop_server
from harness_lab.peers import workloads
from harness_lab.peers.ceiling import ENGINES, TORCH_KIND
from harness_lab.peers.infinity import InfinityServer, infinity_version
from harness_lab.peers.naive import NaiveServer
from harness_lab.peers.processes import tree_cpu_parts, wait_idle
from harness_lab.text_models import text_tensors
from triton_gate.policy import GatePolicy

#: Named where the record is INT8: the ops onnxruntime runs and the kernels MLAS dispatches to here.
INT8_KERNEL_PATH = "onnxruntime dynamic INT8, QOperator (DynamicQuantizeMatMul + QAttention), MLAS u8s8 GEMM, {isa}"


def int8_kernel_path() -> str:
    flags = cpu_flags()
    isa = (
        "AVX512-VNNI kernels (avx512_vnni)"
        if "avx512_vnni" in flags
        else "AVX-VNNI kernels (avx_vnni)"
        if "avx_vnni" in flags
        else "AVX2 u8s8 kernels without VNNI (int16 pair sums)"
    )
    return INT8_KERNEL_PATH.format(isa=isa)


@dataclass
class Target:
    """One thing wrk loads: a served model or a peer server."""

    name: str
    url: str
    make_body: Callable[[list[str]], bytes]
    ceiling: str
    describe: str
    server: dict
    check: Callable[[bytes, int], None]
    pid: int = 0
    rounds: dict = field(default_factory=dict)


class CeilingWorker:
    """``harness_lab.peers.ceiling --serve`` pinned to the server's cores; ``precision``: the one
    its OpenVINO engine runs (empty on onnxruntime and torch)."""

    def __init__(self, deployment: str, kind: str, cores: set[int], threads: int):
        options = f"--deployment {deployment} --kind {kind} --threads {threads} --serve"
        command = [sys.executable, "-m", "harness_lab.peers.ceiling", *options.split()]
        self.process = subprocess.Popen(
            ["taskset", "-c", cores_label(cores)] + command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=PROJECT_ROOT,
        )
        ready = self.process.stdout.readline()
        if not ready:
            raise RuntimeError(f"ceiling worker {kind} did not start")
        self.precision = json.loads(ready).get("precision", "")

    def measure(self, batch: int, duration_s: float, workload: str) -> tuple[float, float]:
        """Sentences/s and the worker's CPU ms per sentence at ``batch`` texts of ``workload``."""
        self.process.stdin.write(f"{batch} {duration_s} {workload}\n")
        self.process.stdin.flush()
        answer = json.loads(self.process.stdout.readline())
        return answer["items_per_second"], answer["cpu_ms_per_item"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


def _post(url: str, body: bytes, check: bool = True) -> requests.Response:
    reply = requests.post(url, data=body, headers={"Content-Type": "application/json"}, timeout=60)
    if check:
        reply.raise_for_status()
    return reply


def _route_exists(url: str) -> bool:
    """Whether ``url`` is served (a 404 / 405 to an empty JSON object: not; any other answer: yes)."""
    return _post(url, b"{}", check=False).status_code not in (404, 405)


def check_triton_text(reply: bytes, count: int, dimension: int, output: str) -> None:
    """The model's vector ``output`` (named by its config) has one row of ``dimension`` per sentence,
    as JSON numbers or as FP32 binary data after the JSON header."""
    header, _ = json.JSONDecoder().raw_decode(reply.decode("latin-1"))
    outputs = header["outputs"]
    found = next((o for o in outputs if o["name"] == output), None)
    if found is None:
        raise AssertionError(f"no {output} in {[o['name'] for o in outputs]}")
    if found["shape"] != [count, dimension]:
        raise AssertionError(f"{output} shape {found['shape']}, expected [{count}, {dimension}]")
    size = found.get("parameters", {}).get("binary_data_size", 4 * len(found.get("data", [])))
    if size != 4 * count * dimension:
        raise AssertionError(f"{output}: {size} bytes of vectors, expected {4 * count * dimension}")


def check_triton_tokens(reply: bytes, count: int, dimension: int) -> None:
    if b'"last_hidden_state"' not in reply[:2000]:
        raise AssertionError(f"no last_hidden_state in {reply[:200]!r}")


def check_openai(reply: bytes, count: int, dimension: int) -> None:
    """OpenAI's reply shape: ``count`` embeddings of ``dimension`` (floats, or base64 of float32)."""
    data = json.loads(reply)["data"]
    if [d["index"] for d in data] != list(range(count)):
        raise AssertionError(f"indexes {[d['index'] for d in data]}, expected 0..{count - 1}")
    for item in data:
        embedding = item["embedding"]
        size = len(base64.b64decode(embedding)) // 4 if isinstance(embedding, str) else len(embedding)
        if size != dimension:
            raise AssertionError(f"an embedding of {size} values, expected {dimension}")


def fitted_to_cores(deployment: Deployment, overrides: dict | None, cores: int) -> dict:
    """``overrides`` with every CPU model's instance count capped at ``cores`` where they do not set
    it: as a user sizes the configs for the cores the server gets (instances beyond them only switch)."""
    from harness.repository import configs

    fitted = {model: dict(config) for model, config in (overrides or {}).items()}
    for model, config in configs(deployment.model_repository).items():
        count = sum(group.count for group in config.instance_group)
        if count > cores and "instance_count" not in fitted.get(model, {}):
            fitted.setdefault(model, {})["instance_count"] = cores
    return fitted


def start_triton(
    deployment: Deployment,
    models: list[str],
    cores: set[int],
    overrides: dict | None,
    gate: bool,
    gate_policy: GatePolicy | None = None,
):
    """As users serve it (``harness serve``): the deployment's cpu options and gate policy (or
    ``gate_policy``), on ``models`` and what they call, pinned to ``cores`` (no model with more
    instances than ``cores``: ``fitted_to_cores``)."""
    overrides = fitted_to_cores(deployment, overrides, len(cores))
    server = deployment_server(deployment, models, overrides=overrides, gate=gate, gate_policy=gate_policy)
    previous = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)  # tritonserver and its stubs inherit the mask
    try:
        return started(server)
    finally:
        os.sched_setaffinity(0, previous)


def openai_calls(deployment: Deployment, models: list[str], spec) -> list[str]:
    """The models the gate's ``/v1/embeddings`` calls for text under these models' OpenAI names (the
    deployment's ``[openai]`` table): the text model, else the token-in one, and the tokenizer."""
    table = deployment.manifest.openai
    mapped = [table.models.get(spec.openai_models[m]) for m in models] if table else []
    parts = [(entry.text or entry.tokens, entry.tokenizer) for entry in mapped if entry]
    return [part.model for pair in parts for part in pair if part]


@dataclass
class ServedVariant:
    """A tritonserver with config overrides, serving ``models`` as targets ``<model>[<name>]``;
    ``declared``: its ``[peers.variants]`` entry (None: a ``--variant``)."""

    name: str
    config: dict
    models: list[str]
    declared: PeerVariant | None = None
    server: object = None


def variant_ceiling(kind: str, declared: PeerVariant | None) -> str:
    """The ceiling of a variant's target: its model's ONNX kind on the declared ``engine`` where
    the ceiling runs that engine (``onnx-fp32@openvino``), else the model's own."""
    if declared is None or declared.engine not in ENGINES or kind == TORCH_KIND:
        return kind
    return f"{kind}@{declared.engine}"


def declared_variants(
    deployment: Deployment, models: list[str], chosen: list[str] | None, flags: list[str]
) -> tuple[list[ServedVariant], list[str]]:
    """The ``[peers.variants]`` a run of ``models`` serves (``chosen`` names, None: all): those that
    serve one of ``models`` on a CPU with one of their ``cpu_flags``; and a line for each left out
    for want of the flags."""
    benchmarks = {b.id: b for b in deployment.benchmarks}
    served, skipped = [], []
    for name, variant in deployment.manifest.peers.variants.items():
        wanted = [m for m in variant.models if m in models]
        if (chosen is not None and name not in chosen) or not wanted:
            continue
        if variant.cpu_flags and not set(variant.cpu_flags) & set(flags):
            skipped.append(f"variant {name} not served: this CPU has none of {', '.join(variant.cpu_flags)}")
            continue
        served.append(ServedVariant(name, benchmarks[variant.benchmark].overrides, wanted, variant))
    return served, skipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployment", default=None, help="default: the one with a [peers] table")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per target per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--batch", default="1,8,32,mixed", help="sentences per request; mixed: one text a request, mixed lengths"
    )
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--models", default=None, help="comma-separated (default: [peers] default_models)")
    parser.add_argument(
        "--peers", default="optimum,torch,naive", help="infinity-emb engines and/or naive (FastAPI; '' for none)"
    )
    parser.add_argument(
        "--openai-models", default=None, help="served through /v1/embeddings too (default: [peers] openai_models)"
    )
    parser.add_argument(
        "--gate",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="tritonserver behind the front gate, as users run it (--no-gate: native requests only)",
    )
    parser.add_argument(
        "--encoding-format",
        choices=("float", "base64"),
        default=None,
        help="of every OpenAI-style body (default: none: float)",
    )
    parser.add_argument(
        "--native-reply",
        choices=("binary", "json"),
        default="binary",
        help="of the native text models: the vectors as binary data (what tritonclient asks for) or JSON numbers",
    )
    parser.add_argument("--server-cores", default=None, help="default: every core but 0")
    parser.add_argument("--generator-cores", default="0")
    parser.add_argument("--triton-config", default=None, help="JSON config overrides (harness.variants)")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=JSON",
        help="one more tritonserver (same cores) with these config overrides; its "
        "--variant-models are targets named MODEL[NAME]",
    )
    parser.add_argument("--variant-models", default=None, help="default: [peers] variant_models")
    parser.add_argument(
        "--declared-variants",
        default=None,
        help="comma-separated [peers.variants] names ('' for none; default: all where the CPU has their flags)",
    )
    parser.add_argument("--label", default="", help="appended to each variant (e.g. the lever tried)")
    args = parser.parse_args(argv)
    try:
        deployment = get_deployment(args.deployment) if args.deployment else declaring("peers")
    except ManifestError as exc:
        parser.error(str(exc))
    spec = deployment.manifest.peers
    if spec is None:
        parser.error(f"{deployment.name} has no [peers] table in its deployment.toml")

    def names(given: str | None, default) -> list[str]:
        return [m for m in given.split(",") if m] if given is not None else list(default)

    models = names(args.models, spec.default_models)
    variant_models = names(args.variant_models, spec.variant_models)
    openai_models = names(args.openai_models, spec.openai_models)
    if openai_models and not args.gate:
        print(f"--no-gate: no /v1/embeddings without the front gate; {openai_models} native only", flush=True)
        openai_models = []
    unknown = [m for m in models + variant_models + openai_models if m not in spec.models]
    if unknown:
        parser.error(f"{unknown[0]!r} is not in {deployment.name}'s [peers.models] ({', '.join(spec.models)})")
    chosen = names(args.declared_variants, spec.variants) if args.declared_variants is not None else None
    if chosen and set(chosen) - set(spec.variants):
        parser.error(f"--declared-variants: {deployment.name}'s [peers.variants] are {', '.join(spec.variants)}")
    flags = cpu_flags()
    variants, skipped = declared_variants(deployment, models, chosen, flags)
    for line in skipped:
        print(line, flush=True)
    for variant in args.variant:
        name, _, config = variant.partition("=")
        variants.append(ServedVariant(name, json.loads(config), variant_models))
    peer_onnx = deployment.path / spec.ceiling_onnx[spec.peer_onnx]

    all_cores = sorted(os.sched_getaffinity(0))
    generator_cores = {int(c) for c in args.generator_cores.split(",")}
    server_cores = (
        {int(c) for c in args.server_cores.split(",")} if args.server_cores else set(all_cores) - generator_cores
    ) or set(all_cores)
    threads = len(server_cores)
    #: (workload, texts per request) in the order given
    batches = [
        (workloads.MIXED, 1) if b == workloads.MIXED else (workloads.UNIFORM, int(b)) for b in args.batch.split(",")
    ]
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    engines = [e for e in args.peers.split(",") if e and e != "naive"]
    naive = "naive" in args.peers.split(",")
    overrides = json.loads(args.triton_config) if args.triton_config else None
    run_id = uuid.uuid4().hex[:12]
    generator = WrkGenerator(generator_cores)
    print(f"run {run_id}: servers on cores {cores_label(server_cores)}, {generator.describe()}", flush=True)

    pieces = deployment.resolve(spec.embedding)()
    if not hasattr(pieces, workloads.MIXED) and (workloads.MIXED, 1) in batches:
        print(f"{deployment.name}'s [peers] embedding gives no `mixed` texts: no mixed workload", flush=True)
        batches.remove((workloads.MIXED, 1))

    #: What a record of our server says about it (``gate``: behind the front gate).
    ours = {"server_mode": "local", "gate": args.gate}

    def native_targets(server, names: list[str], variant: ServedVariant | None = None) -> list[Target]:
        """``/v2/models/<m>/infer`` of ``names`` on ``server`` (a variant's, its config overrides)."""
        found, version = [], server.describe()["server_version"]
        for model in names:
            served, endpoint = spec.models[model], f"/v2/models/{model}/infer"
            if served.request == "tokens":  # the client-tokenized contract
                make_body = functools.partial(workloads.triton_tokens_body, tokenize=pieces.tokenize)
                check = functools.partial(check_triton_tokens, dimension=pieces.dimension)
            else:  # the model's text input and vector output, from its config
                text_input, output = text_tensors(deployment.model_repository, model)
                binary = output if args.native_reply == "binary" else None
                make_body = functools.partial(workloads.triton_text_body, text_input=text_input, binary_output=binary)
                check = functools.partial(check_triton_text, dimension=pieces.dimension, output=output)
            record = {**ours, "server_version": version, "path": "native", "endpoint": endpoint}
            if served.request == "text":
                record["reply"] = args.native_reply
            describe, suffix = served.describe, ""
            ceiling = variant_ceiling(served.ceiling, variant.declared if variant else None)
            if variant is not None:
                record["config_overrides"], suffix = variant.config, f"[{variant.name}]"
                declared = variant.declared
                if declared is None:
                    describe += f", config {json.dumps(variant.config, sort_keys=True)}"
                else:
                    describe = declared.describe or describe
                    record |= {"config_benchmark": declared.benchmark, "engine": declared.engine}
                    record |= {"precision": declared.precision, "cpu_flags": flags}
            url = f"http://{server.http_url}{endpoint}"
            found.append(Target(model + suffix, url, make_body, ceiling, describe, record, check, server.process.pid))
        return found

    #: The ceiling each infinity engine is compared with: its optimum engine runs the ONNX file of ``peer_onnx``.
    peer_ceiling = {"optimum": spec.peer_onnx, "torch": TORCH_KIND}
    served_models = list(dict.fromkeys(models + openai_models + openai_calls(deployment, openai_models, spec)))
    triton = start_triton(deployment, served_models, server_cores, overrides, args.gate) if served_models else None
    peers = []
    workers: dict[str, CeilingWorker] = {}
    try:
        for variant in variants:
            variant.server = start_triton(deployment, variant.models, server_cores, variant.config, args.gate)
        for engine in engines:
            peer = InfinityServer(engine, pieces.model_dir, peer_onnx, cores=server_cores, threads=threads)
            peer.start()
            peers.append(peer)
        if naive:
            peer = NaiveServer(pieces.model_dir, cores=server_cores, threads=threads)
            peer.start()
            peers.append(peer)
        targets = []
        if triton:
            version = triton.describe()["server_version"]
            targets += native_targets(triton, models)
            for model in openai_models:
                served = spec.models[model]
                name = spec.openai_models.get(model, model)
                targets.append(
                    Target(
                        f"openai:{model}",
                        f"http://{triton.http_url}/v1/embeddings",
                        functools.partial(workloads.openai_body, model=name, encoding_format=args.encoding_format),
                        served.ceiling,
                        f"{served.describe}, OpenAI-style request (model {name!r}"
                        f"{', ' + args.encoding_format if args.encoding_format else ''}) through the front gate",
                        {
                            **ours,
                            "server_version": version,
                            "path": "openai",
                            "endpoint": "/v1/embeddings",
                            "openai_model": name,
                            "encoding_format": args.encoding_format or "float",
                        },
                        functools.partial(check_openai, dimension=pieces.dimension),
                        triton.process.pid,
                    )
                )
        for variant in variants:
            targets += native_targets(variant.server, variant.models, variant)
        for peer in peers:
            infinity = isinstance(peer, InfinityServer)
            targets.append(
                Target(
                    peer.name,
                    peer.url,
                    functools.partial(peer.body, encoding_format=args.encoding_format),
                    peer_ceiling[peer.engine] if infinity else TORCH_KIND,
                    peer.describe(),
                    {
                        "server_mode": "peer",
                        "server_version": infinity_version() if infinity else peer.describe(),
                        "gate": None,
                        "path": "peer",
                        "peer": "infinity-emb" if infinity else "naive",
                        "endpoint": peer.route,
                        "encoding_format": args.encoding_format or "float",
                    },
                    functools.partial(check_openai, dimension=pieces.dimension),
                    peer.process.pid,
                )
            )
        missing = [t for t in targets if t.server.get("path") == "openai" and not _route_exists(t.url)]
        if missing:
            print(f"no {missing[0].url} on this server: {', '.join(t.name for t in missing)} not measured", flush=True)
            targets = [t for t in targets if t not in missing]
        for kind in sorted({t.ceiling for t in targets}):
            workers[kind] = CeilingWorker(deployment.name, kind, server_cores, threads)
        for workload, batch in batches:
            bodies = {t.name: workloads.bodies(t.make_body, pieces, workload, batch) for t in targets}
            for target in targets:
                target.check(_post(target.url, bodies[target.name][0]).content, batch)
            for concurrency in concurrencies:
                ceiling_batch = min(batch * concurrency, 64)
                results = {t.name: [] for t in targets}
                cpu_ms = {t.name: [] for t in targets}
                cpu_parts = {t.name: [] for t in targets}
                ceilings = {k: [] for k in workers}
                ceiling_cpu = {k: [] for k in workers}
                for round_index in range(args.rounds):
                    for kind, worker in workers.items():
                        # the best of the request's batch and the largest the server could form (a
                        # 64-row batch can be slower per sentence than 8 rows on a small-cache core)
                        measured = [
                            worker.measure(size, min(args.duration, 2.0), workload)
                            for size in sorted({batch, ceiling_batch})
                        ]
                        ceilings[kind].append(max(rate for rate, _ in measured))
                        ceiling_cpu[kind].append(min(cpu for _, cpu in measured))
                    order = targets if round_index % 2 == 0 else targets[::-1]
                    for target in order:
                        # long enough for every connection to complete a few requests at the ceiling's pace
                        pace = ceilings[target.ceiling][-1] or 1.0
                        cycle = batch * concurrency / pace
                        warm = generator.run(target.url, bodies[target.name], concurrency, max(1.0, cycle))
                        # a target far below its ceiling: its own warm-up pace (none done: slower than
                        # one round of requests per half the warm-up), so no window ends before a request
                        pace = min(
                            pace,
                            warm.requests_per_second * batch or batch * concurrency / (2 * max(warm.duration_s, 1e-3)),
                        )
                        duration = min(max(args.duration, 3 * batch * concurrency / pace), 120.0)
                        cycle = batch * concurrency / pace
                        wait_idle(target.pid, 10 * cycle + 10)
                        root = "peer" if target.server["path"] == "peer" else "gate"
                        cpu_before = tree_cpu_parts(target.pid, root)
                        run = generator.run(target.url, bodies[target.name], concurrency, duration)
                        results[target.name].append(run)
                        wait_idle(target.pid, 10 * cycle + 10)
                        # the server also finishes the (at most ``concurrency``) requests in flight at the end
                        items = (run.requests + concurrency) * batch
                        cpu_after = tree_cpu_parts(target.pid, root)
                        by_part = {k: 1e3 * (v - cpu_before.get(k, 0.0)) / max(items, 1) for k, v in cpu_after.items()}
                        cpu_ms[target.name].append(sum(by_part.values()))
                        cpu_parts[target.name].append({k: round(v, 4) for k, v in by_part.items()})
                for target in targets:
                    runs = results[target.name]
                    rates = [r.requests_per_second * batch for r in runs]
                    median_run = sorted(runs, key=lambda r: r.requests_per_second)[len(runs) // 2]
                    ceiling = statistics.median(ceilings[target.ceiling])
                    served = statistics.median(rates)
                    # CPU per sentence: the server tree's (counted up to idle after the window) against
                    # the ceiling worker's; steadier than rates on a core shared with other jobs
                    cpu_ratios = [c / s for c, s in zip(ceiling_cpu[target.ceiling], cpu_ms[target.name]) if s]
                    record = {
                        "deployment": deployment.name,
                        "benchmark": "side-by-side-" + (workload if workload == workloads.MIXED else f"b{batch}"),
                        "workload": workload,
                        "comparison": "side-by-side",
                        "run_id": run_id,
                        "model": target.name,
                        "variant": f"{target.name}: {target.describe}{args.label}",
                        "target": "cpu",
                        "protocol": "http",
                        "generator": generator.describe(),
                        "server_cores": cores_label(server_cores),
                        "generator_cores": cores_label(generator_cores),
                        "items_per_request": batch,
                        "config_overrides": overrides,
                        "label": args.label,
                        "base_model": target.name.split("[")[0].removeprefix("openai:"),
                        **target.server,
                        **median_run.metrics(batch),
                        "items_per_second": round(served, 2),
                        "rounds_items_per_second": [round(r, 2) for r in rates],
                        "errors": sum(r.errors for r in runs),
                        "ceiling_kind": target.ceiling,
                        "ceiling_precision": workers[target.ceiling].precision or None,
                        "ceiling_batch_size": ceiling_batch,
                        "ceiling_rule": "max(in-process at batch, at min(batch x c, 64))",
                        "ceiling_items_per_second": round(ceiling, 2),
                        "rounds_ceiling_items_per_second": [round(c, 2) for c in ceilings[target.ceiling]],
                        "served_over_ceiling": round(served / ceiling, 3) if ceiling else None,
                        "rounds_cpu_ms_per_item": [round(c, 4) for c in cpu_ms[target.name]],
                        # the same by process (gate, tritonserver, each stub; a peer's own programs)
                        "rounds_cpu_ms_per_item_by_process": cpu_parts[target.name],
                        "rounds_ceiling_cpu_ms_per_item": [round(c, 4) for c in ceiling_cpu[target.ceiling]],
                        "cpu_ceiling_over_served": round(statistics.median(cpu_ratios), 3) if cpu_ratios else None,
                    }
                    if "int8" in target.name or target.ceiling == "onnx-int8":
                        record["kernel_path"] = int8_kernel_path()
                    append_record(record)
                    print(
                        f"{'mixed' if workload == workloads.MIXED else f'b={batch}':<5} c={concurrency:<2} {target.name:28s} {served:8.1f} sent/s "
                        f"rounds {record['rounds_items_per_second']} errors {record['errors']} "
                        f"/ceiling({target.ceiling}@{ceiling_batch}) {record['served_over_ceiling']} "
                        f"cpu ms/sent {record['rounds_cpu_ms_per_item']} ceiling {record['rounds_ceiling_cpu_ms_per_item']} "
                        f"-> {record['cpu_ceiling_over_served']}",
                        flush=True,
                    )
    finally:
        for worker in workers.values():
            worker.close()
        for peer in peers:
            peer.stop()
        for variant in variants:
            if variant.server is not None:
                stop_server(variant.server)
        if triton:
            stop_server(triton)
        generator.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
