"""What a side-by-side run loads: each target (a served model, natively or through ``/v1/embeddings``,
or a peer server), the body it takes, the check of its answer and the fields its records carry."""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass

import requests

from harness.deployments import Deployment
from harness.manifest import ConfigOverrides
from harness_lab.manifest import PeersSpec, PeerVariant
from harness_lab.peers import workloads
from harness_lab.peers.ceiling import ENGINES, TORCH_KIND
from harness_lab.peers.infinity import InfinityServer, infinity_version
from harness_lab.text_models import text_tensors


@dataclass
class Target:
    """One thing wrk loads: a served model or a peer server."""

    name: str
    url: str
    make_body: Callable[[list[str]], bytes]
    ceiling: str
    describe: str
    #: What its records say about the server and the path (``path``, ``endpoint``, ``gate``, ...).
    server: dict
    check: Callable[[bytes, int], None]
    pid: int = 0


@dataclass
class ServedVariant:
    """A tritonserver with config overrides, serving ``models`` as targets ``<model>[<name>]``;
    ``declared``: its ``[peers.variants]`` entry (None: a ``--variant``)."""

    name: str
    config: dict[str, ConfigOverrides]
    models: list[str]
    declared: PeerVariant | None = None
    server: object = None


@dataclass
class TargetOptions:
    """How the run's requests look: behind the gate or not, the OpenAI bodies' ``encoding_format``,
    the native text models' reply (``binary`` / ``json``), and the CPU flags variants are served on."""

    gate: bool
    encoding_format: str | None
    native_reply: str
    cpu_flags: list[str]


def post(url: str, body: bytes, check: bool = True) -> requests.Response:
    reply = requests.post(url, data=body, headers={"Content-Type": "application/json"}, timeout=60)
    if check:
        reply.raise_for_status()
    return reply


def route_exists(url: str) -> bool:
    """Whether ``url`` is served (a 404 / 405 to an empty JSON object: not; any other answer: yes)."""
    return post(url, b"{}", check=False).status_code not in (404, 405)


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


def openai_calls(deployment: Deployment, models: list[str], spec: PeersSpec) -> list[str]:
    """The models the gate's ``/v1/embeddings`` calls for text under these models' OpenAI names (the
    deployment's ``[openai]`` table): the text model, else the token-in one, and the tokenizer."""
    table = deployment.manifest.openai
    mapped = [table.models.get(spec.openai_models[m]) for m in models] if table else []
    parts = [(entry.text or entry.tokens, entry.tokenizer) for entry in mapped if entry]
    return [part.model for pair in parts for part in pair if part]


def variant_ceiling(kind: str, declared: PeerVariant | None) -> str:
    """The ceiling of a variant's target: its model's ONNX kind on the declared ``engine`` where
    the ceiling runs that engine (``onnx-fp32@openvino``), else the model's own."""
    if declared is None or declared.engine not in ENGINES or kind == TORCH_KIND:
        return kind
    return f"{kind}@{declared.engine}"


def declared_variants(
    deployment: Deployment, spec: PeersSpec, models: list[str], chosen: list[str] | None, flags: list[str]
) -> tuple[list[ServedVariant], list[str]]:
    """The ``[peers.variants]`` a run of ``models`` serves (``chosen`` names, None: all): those that
    serve one of ``models`` on a CPU with one of their ``cpu_flags``; and a line for each left out
    for want of the flags."""
    benchmarks = {b.id: b for b in deployment.benchmarks}
    served, skipped = [], []
    for name, variant in spec.variants.items():
        wanted = [m for m in variant.models if m in models]
        if (chosen is not None and name not in chosen) or not wanted:
            continue
        if variant.cpu_flags and not set(variant.cpu_flags) & set(flags):
            skipped.append(f"variant {name} not served: this CPU has none of {', '.join(variant.cpu_flags)}")
            continue
        served.append(ServedVariant(name, benchmarks[variant.benchmark].config, wanted, variant))
    return served, skipped


def _native_request(deployment: Deployment, model: str, request: str, pieces, reply: str):
    """(body maker, answer check) of ``/v2/models/<model>/infer``: the client-tokenized contract, or
    the model's text input and vector output from its config."""
    if request == "tokens":
        make_body = functools.partial(workloads.triton_tokens_body, tokenize=pieces.tokenize)
        return make_body, functools.partial(check_triton_tokens, dimension=pieces.dimension)
    text_input, output = text_tensors(deployment.model_repository, model)
    binary = output if reply == "binary" else None
    make_body = functools.partial(workloads.triton_text_body, text_input=text_input, binary_output=binary)
    return make_body, functools.partial(check_triton_text, dimension=pieces.dimension, output=output)


def native_targets(
    deployment: Deployment,
    spec: PeersSpec,
    server,
    names: list[str],
    pieces,
    options: TargetOptions,
    variant: ServedVariant | None = None,
) -> list[Target]:
    """``/v2/models/<m>/infer`` of ``names`` on ``server`` (a variant's, its config overrides)."""
    found, version = [], server.describe()["server_version"]
    declared = variant.declared if variant else None
    for model in names:
        served, endpoint = spec.models[model], f"/v2/models/{model}/infer"
        make_body, check = _native_request(deployment, model, served.request, pieces, options.native_reply)
        record = {"server_mode": "local", "gate": options.gate, "server_version": version, "path": "native"}
        record |= {"endpoint": endpoint} | ({"reply": options.native_reply} if served.request == "text" else {})
        describe, suffix = served.describe, ""
        if variant is not None:
            overrides = {m: config.fields() for m, config in variant.config.items()}
            record["config_overrides"], suffix = overrides, f"[{variant.name}]"
            describe += f", config {json.dumps(overrides, sort_keys=True)}" if declared is None else ""
        if declared is not None:
            describe = declared.describe or describe
            record |= {"config_benchmark": declared.benchmark, "engine": declared.engine}
            record |= {"precision": declared.precision, "cpu_flags": options.cpu_flags}
        ceiling = variant_ceiling(served.ceiling, declared)
        url = f"http://{server.http_url}{endpoint}"
        found.append(Target(model + suffix, url, make_body, ceiling, describe, record, check, server.process.pid))
    return found


def openai_target(spec: PeersSpec, server, model: str, pieces, options: TargetOptions) -> Target:
    """``model`` through the gate's ``/v1/embeddings``, asked for by its OpenAI name."""
    served, name, encoding = spec.models[model], spec.openai_models.get(model, model), options.encoding_format
    record = {"server_mode": "local", "gate": options.gate, "server_version": server.describe()["server_version"]}
    record |= {"path": "openai", "endpoint": "/v1/embeddings", "openai_model": name}
    return Target(
        f"openai:{model}",
        f"http://{server.http_url}/v1/embeddings",
        functools.partial(workloads.openai_body, model=name, encoding_format=encoding),
        served.ceiling,
        f"{served.describe}, OpenAI-style request (model {name!r}"
        f"{', ' + encoding if encoding else ''}) through the front gate",
        record | {"encoding_format": encoding or "float"},
        functools.partial(check_openai, dimension=pieces.dimension),
        server.process.pid,
    )


def peer_target(peer: InfinityServer, spec: PeersSpec, pieces, options: TargetOptions) -> Target:
    """A peer server: an infinity-emb engine, compared with the ceiling its engine runs."""
    #: infinity's optimum engine runs the ONNX file of ``peer_onnx``, its torch engine sentence-transformers.
    ceiling = {"optimum": spec.peer_onnx}.get(peer.engine, TORCH_KIND)
    record = {"server_mode": "peer", "server_version": infinity_version()}
    record |= {"gate": None, "path": "peer", "peer": "infinity-emb", "endpoint": peer.route}
    return Target(
        peer.name,
        peer.url,
        functools.partial(peer.body, encoding_format=options.encoding_format),
        ceiling,
        peer.describe(),
        record | {"encoding_format": options.encoding_format or "float"},
        functools.partial(check_openai, dimension=pieces.dimension),
        peer.process.pid,
    )
