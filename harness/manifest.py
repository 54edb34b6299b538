"""``deployment.toml``, typed: what a deployment declares, checked when it is read.

Every table and key of a manifest is a field below; a key the harness does not know is refused
with the file and the key's path in the message (a typo such as ``concurency`` would otherwise
be silently ignored), and so is a value of the wrong type. Per-target settings (config name,
image, devices, protocols, the Python of the image's backend stub) live in ``[target.<name>]``.
"""

from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path


class ManifestError(ValueError):
    """A deployment.toml that is missing something or names something that does not exist."""


@dataclass
class ExportSpec:
    """``[export]``: the command that writes the model files, and the files it must write."""

    command: list[str]
    outputs: list[str] = field(default_factory=list)
    #: Added to ``command`` by ``export --force`` for a script that skips outputs already present.
    force_args: list[str] = field(default_factory=list)


@dataclass
class TestsSpec:
    """``[tests]``: the deployment's checks module (``check_*`` functions, workloads)."""

    module: str | None = None


@dataclass
class TargetSettings:
    """``[target.<name>]``: what differs on one hardware target."""

    model_config_name: str | None = None
    backend_config: list[str] = field(default_factory=list)
    image: str | None = None
    device_ids: list[int] | None = None
    protocols: list[str] = field(default_factory=lambda: ["http", "grpc"])
    #: Python minor version of the image's Python-backend stub (packed envs must match it).
    stub_python: str | None = None


@dataclass
class Benchmark:
    """``[[benchmarks]]``: one benchmark scenario of a deployment."""

    id: str
    workload: str
    concurrency: tuple[int, ...] = (1,)
    protocol: str = "grpc"
    targets: tuple[str, ...] = ()
    #: Config overrides per model (harness.variants.KNOWN_KEYS), served from a derived repository.
    config: dict[str, dict] = field(default_factory=dict)
    #: Only these models (and what they call) are loaded for the scenario.
    models: tuple[str, ...] = ()
    #: The id of the benchmark that serves this one's model alone on client-made tensors: the matrix
    #: shows this (server-side processing) / that (model-only) throughput at each concurrency.
    model_only: str = ""
    #: Run by ``make bench-network`` (through each shaped link) unless it is given benchmark ids.
    network: bool = False


@dataclass
class ReliabilitySpec:
    """``[reliability]``: what ``python -m harness soak`` / ``faults`` / ``gate-cost`` load by default."""

    #: The entry model loaded (``--model`` overrides it).
    model: str
    #: ``"file.py:function"``: ``function(http_url, model)`` returns a
    #: ``harness.tools.reliability.load.CheckedWorkload``, requests whose every answer is known
    #: before the load (e.g. ``text_embedding_workload``: sentences, each embedded alone first).
    workload: str


@dataclass
class PeerModel:
    """``[peers.models.<model>]``: one served model of the side-by-side run."""

    #: The request: ``text`` (``TEXT`` BYTES in, ``EMBEDDING`` out) or ``tokens`` (client-tokenized
    #: ``input_ids`` + ``attention_mask`` in, ``last_hidden_state`` out).
    request: str
    #: The in-process ceiling it is compared with: a key of ``[peers] ceiling_onnx`` or ``sentence-transformers``.
    ceiling: str
    #: What it is (the records' ``variant``).
    describe: str = ""


@dataclass
class PeerRatio:
    """``[[peers.ratios]]``: one ratio of the results matrix's side-by-side table."""

    label: str
    #: A target (a model of ``[peers.models]``, ``infinity-<engine>``) or ``ceiling:<kind>``.
    top: str
    #: A target, ``ceiling`` (the top's own ceiling), ``best-peer`` (the faster peer, round by round) or
    #: ``ceiling:<kind>``.
    bottom: str
    goal: float
    #: A target: the goal holds only at workloads where it, too, is ahead of ``bottom`` (elsewhere
    #: the row reads ``n/a``), e.g. the OpenAI path ahead of a peer wherever the native path is.
    only_where_ahead: str = ""


@dataclass
class PeersSpec:
    """``[peers]``: ``python -m harness peers``, the served models next to their in-process ceilings
    and a peer server (infinity-emb) on the same embedding model."""

    models: dict[str, PeerModel]
    #: Served by default (``--models``).
    default_models: list[str]
    #: The ONNX file of each ceiling kind (``onnx-fp32`` ...), relative to the deployment folder.
    ceiling_onnx: dict[str, str]
    #: The served model whose config the ONNX ceiling follows (``onnx_max_batch_size``,
    #: ``tokenizer_parallelism``).
    ceiling_follows: str
    #: ``"file.py:function"``: ``function()`` returns the in-process pieces of the run: ``model_dir``
    #: (the sentence-transformers folder the peer and the torch ceiling load), ``dimension`` (of a
    #: vector), ``tokenize(texts)``
    #: (the client's ``input_ids`` / ``attention_mask``) and ``embed(run, texts, max_rows)`` (tokenize,
    #: an onnxruntime ``session.run``, pool: the ONNX ceiling's work).
    embedding: str
    #: Served by a ``--variant`` server by default (``--variant-models``).
    variant_models: list[str] = field(default_factory=list)
    #: The ceiling kind whose ONNX file the peer's ``optimum`` engine runs.
    peer_onnx: str = "onnx-fp32"
    #: What the results matrix's side-by-side section compares (its heading).
    title: str = ""
    ratios: list[PeerRatio] = field(default_factory=list)
    #: ``{ <[peers.models] model> = "<OpenAI model name>" }``: also served through the front gate's
    #: ``POST /v1/embeddings`` asking for that name (target ``openai:<model>``, the model's ceiling).
    openai_models: dict[str, str] = field(default_factory=dict)


@dataclass
class ScaleoutSpec:
    """``[scaleout]``: Kubernetes objects (``harness.tools.scaleout.k8s``; unset keys take its
    defaults) and the multi-replica run (``python -m harness scaleout run``)."""

    replicas: int | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    #: Mean queue wait per model execution (µs) the autoscaler holds the pods at.
    queue_target_us: int | None = None
    #: Requests of one replica, instead of its measured footprint.
    memory_mib: int | None = None
    cpu: float | None = None
    bundle_image: str | None = None
    storage_uri: str | None = None
    #: The entry model the multi-replica run calls (``TEXT`` in, ``EMBEDDING`` out); each replica
    #: loads it and the models it calls.
    model: str | None = None
    #: The models whose version 2 the run's roll brings.
    rolled_models: list[str] = field(default_factory=list)


@dataclass
class GateSpec:
    """``[gate]``: bounds the front gate enforces beyond what each config implies
    (``harness.serving.gate.policy``). Clients may call the entry models only."""

    #: Largest request body per model, in bytes (else computed from the config, else 64 MiB).
    max_body_bytes: dict[str, int] = field(default_factory=dict)
    #: Largest dims per input of a model, batch dim excluded: ``{ model = { input = [3, 1280, 1280] } }``.
    max_dims: dict[str, dict[str, list[int]]] = field(default_factory=dict)


@dataclass
class OpenAIText:
    """``[openai.models.<name>.text]``: a text-in entry model (BYTES in, one vector per text out)."""

    model: str
    input: str = "TEXT"
    output: str = "EMBEDDING"
    #: Its output of each text's token count (``[batch, 1]`` ints): ``usage`` sums it, with no
    #: ``tokenizer`` request for text input.
    tokens_output: str | None = None


@dataclass
class OpenAITokenizer:
    """``[openai.models.<name>.tokenizer]``: the server model that tokenizes as the text path does
    (``usage`` counts its non-padding tokens; without ``text`` it feeds ``tokens``)."""

    model: str
    ids: str
    input: str = "TEXT"
    #: Its attention-mask output; without one, tokens are the ids other than ``pad_id``.
    mask: str | None = None
    pad_id: int | None = None


@dataclass
class OpenAITokens:
    """``[openai.models.<name>.tokens]``: a token-in entry model for ``input`` given as token ids."""

    model: str
    output: str
    ids: str = "input_ids"
    mask: str | None = None
    #: ``mean`` (over the mask, for a ``[batch, tokens, dim]`` output) or ``none``.
    pooling: str = "mean"
    normalize: bool = False
    pad_id: int | None = None
    #: Ids outside ``0..vocab_size-1`` are refused with 400 before the model sees them.
    vocab_size: int | None = None


@dataclass
class OpenAIModel:
    """``[openai.models.<name>]``: what one OpenAI model name runs."""

    text: OpenAIText | None = None
    tokenizer: OpenAITokenizer | None = None
    tokens: OpenAITokens | None = None


@dataclass
class OpenAISpec:
    """``[openai]``: ``POST /v1/embeddings`` and ``GET /v1/models`` on the gate's HTTP port
    (``harness.serving.gate.openai_api``), by OpenAI model name."""

    models: dict[str, OpenAIModel]
    #: The model of a request that names none.
    default: str | None = None


@dataclass
class Manifest:
    """A whole ``deployment.toml``."""

    name: str
    entry_models: list[str]
    summary: str = ""
    model_repository: str = "model_repository"
    targets: list[str] = field(default_factory=lambda: ["cpu"])
    export: ExportSpec | None = None
    tests: TestsSpec = field(default_factory=TestsSpec)
    target: dict[str, TargetSettings] = field(default_factory=dict)
    benchmarks: list[Benchmark] = field(default_factory=list)
    scaleout: ScaleoutSpec = field(default_factory=ScaleoutSpec)
    reliability: ReliabilitySpec | None = None
    peers: PeersSpec | None = None
    gate: GateSpec = field(default_factory=GateSpec)
    openai: OpenAISpec | None = None


def _convert(kind, value, where: str, source: Path):
    """``value`` checked against the type annotation ``kind``; dataclasses built recursively."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        return _convert(next(a for a in args if a is not type(None)), value, where, source)
    if dataclasses.is_dataclass(kind):
        if not isinstance(value, dict):
            raise ManifestError(f"{source}: {where} must be a table, not {type(value).__name__}")
        return build(kind, value, where, source)
    if kind is typing.Any:
        return value
    if kind in (dict, list):
        if not isinstance(value, kind):
            raise ManifestError(f"{source}: {where} must be a {'table' if kind is dict else 'list'}, not {value!r}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise ManifestError(f"{source}: {where} must be a list, not {type(value).__name__}")
        items = [_convert(args[0], item, f"{where}[{i}]", source) for i, item in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ManifestError(f"{source}: {where} must be a table, not {type(value).__name__}")
        return {k: _convert(args[1], v, f"{where}.{k}", source) for k, v in value.items()}
    if kind is str and isinstance(value, str) or kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind is bool and isinstance(value, bool):
        return value
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise ManifestError(f"{source}: {where} must be {getattr(kind, '__name__', kind)}, not {value!r}")


def build(cls, table: dict, where: str, source: Path):
    """An instance of dataclass ``cls`` from a TOML table; unknown and missing keys named."""
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(table) - set(known))
    if unknown:
        prefix = f"{where}." if where else ""
        raise ManifestError(
            f"{source}: unknown key {prefix}{unknown[0]!r}"
            f"{f' (and {len(unknown) - 1} more)' if len(unknown) > 1 else ''}; "
            f"known keys{' of ' + where if where else ''}: {', '.join(known)}"
        )
    values = {}
    for name, spec in known.items():
        path = f"{where}.{name}" if where else name
        if name in table:
            values[name] = _convert(hints[name], table[name], path, source)
        elif spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
            raise ManifestError(f"{source}: missing required key {path!r}")
    return cls(**values)


def read_manifest(path: Path) -> Manifest:
    """Parse and type-check one ``deployment.toml``."""
    try:
        with path.open("rb") as handle:
            table = tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{path}: not valid TOML: {exc}") from None
    manifest = build(Manifest, table, "", path)
    undeclared = sorted(set(manifest.target) - set(manifest.targets))
    if undeclared:
        raise ManifestError(f"{path}: [target.{undeclared[0]}] is not in targets = {manifest.targets}")
    ids = [b.id for b in manifest.benchmarks]
    for benchmark in manifest.benchmarks:
        if benchmark.model_only and benchmark.model_only not in ids:
            raise ManifestError(
                f"{path}: benchmark {benchmark.id!r}: model_only = {benchmark.model_only!r} is no benchmark id "
                f"of this manifest ({', '.join(ids)})"
            )
    _check_tables(manifest, path)
    return manifest


def _check_tables(manifest: Manifest, path: Path) -> None:
    """The optional tables' names point at what the manifest declares."""
    if manifest.reliability and manifest.reliability.model not in manifest.entry_models:
        raise ManifestError(
            f"{path}: [reliability] model = {manifest.reliability.model!r} is no entry model ({manifest.entry_models})"
        )
    scaleout = manifest.scaleout
    if scaleout.model and scaleout.model not in manifest.entry_models:
        raise ManifestError(
            f"{path}: [scaleout] model = {scaleout.model!r} is no entry model ({manifest.entry_models})"
        )
    _check_openai(manifest, path)
    peers = manifest.peers
    if peers is None:
        return
    kinds = set(peers.ceiling_onnx) | {"sentence-transformers"}
    named = {
        "default_models": peers.default_models,
        "variant_models": peers.variant_models,
        "ceiling_follows": [peers.ceiling_follows],
    }
    for key, models in named.items():
        unknown = [m for m in models if m not in peers.models]
        if unknown:
            raise ManifestError(
                f"{path}: [peers] {key}: {unknown[0]!r} is not in [peers.models] ({list(peers.models)})"
            )
    unknown = [m for m in peers.openai_models if m not in peers.models]
    if unknown:
        raise ManifestError(
            f"{path}: [peers] openai_models: {unknown[0]!r} is not in [peers.models] ({list(peers.models)})"
        )
    for model, spec in peers.models.items():
        if spec.request not in ("text", "tokens"):
            raise ManifestError(f"{path}: [peers.models.{model}] request = {spec.request!r}: text or tokens")
        if spec.ceiling not in kinds:
            raise ManifestError(f"{path}: [peers.models.{model}] ceiling = {spec.ceiling!r}: one of {sorted(kinds)}")
    if peers.peer_onnx not in peers.ceiling_onnx:
        raise ManifestError(f"{path}: [peers] peer_onnx = {peers.peer_onnx!r} is not in ceiling_onnx")


def _check_openai(manifest: Manifest, path: Path) -> None:
    """``[openai]``: text and token models are entry models; each name has a text or a token path."""
    openai = manifest.openai
    if openai is None:
        return
    if openai.default is not None and openai.default not in openai.models:
        raise ManifestError(
            f"{path}: [openai] default = {openai.default!r} is not in [openai.models] ({list(openai.models)})"
        )
    for name, spec in openai.models.items():
        if spec.text is None and spec.tokens is None:
            raise ManifestError(f"{path}: [openai.models.{name}] maps neither text nor tokens")
        for part in (spec.text, spec.tokens):
            if part is not None and part.model not in manifest.entry_models:
                raise ManifestError(
                    f"{path}: [openai.models.{name}] model {part.model!r} is no entry model ({manifest.entry_models})"
                )
        if spec.tokens is not None and spec.tokens.pooling not in ("mean", "none"):
            raise ManifestError(
                f"{path}: [openai.models.{name}.tokens] pooling = {spec.tokens.pooling!r}: mean or none"
            )
