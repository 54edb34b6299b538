"""``deployment.toml``, typed: every table and key is a field of a pydantic model below; an unknown
key or a value of the wrong type is refused with the file and the key's path."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

from pydantic import ValidationError, model_validator

from triton_gate.policy import GateBounds, OpenAIMapping, Strict


class ManifestError(ValueError):
    """A deployment.toml that is missing something or names something that does not exist."""


class ExportSpec(Strict):
    """``[export]``: the command that writes the model files, and the files it must write."""

    command: list[str]
    outputs: list[str] = []
    #: Added to ``command`` by ``export --force`` for a script that skips outputs already present.
    force_args: list[str] = []
    #: The command that makes the fixtures from the reference (``harness refresh``: after the export).
    fixtures: list[str] = []
    #: Commands that read the fixtures (quantization gates), run after ``command`` and by ``refresh``
    #: after ``fixtures``; one that fails wrote nothing (a missed gate), which is not an error.
    after_fixtures: list[list[str]] = []


class TestsSpec(Strict):
    """``[tests]``: the deployment's checks module (``check_*`` functions, workloads)."""

    module: str | None = None


class TargetSettings(Strict):
    """``[target.<name>]``: what differs on one hardware target."""

    model_config_name: str | None = None
    backend_config: list[str] = []
    image: str | None = None
    device_ids: list[int] | None = None
    protocols: list[str] = ["http", "grpc"]
    #: Python minor version of the image's Python-backend stub (packed envs must match it).
    stub_python: str | None = None


class ConfigOverrides(Strict):
    """The ``config.pbtxt`` fields a benchmark changes on one model (``harness.variants``); a
    ``[profiles.<name>]`` table has the same keys."""

    #: ``[profiles]`` applied first, in order (``parameters`` merged, other keys replaced); then this table's keys.
    profiles: list[str] = []
    instance_count: int | None = None
    dynamic_batching: bool | None = None
    max_queue_delay_microseconds: int | None = None
    preferred_batch_size: list[int] | None = None
    #: 0: no batching (the batch becomes the first dim of every tensor).
    max_batch_size: int | None = None
    parameters: dict[str, str] | None = None
    version: int | None = None
    #: The backend that runs the model file (``platform`` is cleared).
    backend: str | None = None
    default_model_filename: str | None = None

    def fields(self) -> dict:
        """The fields set, as ``harness.variants.apply_overrides`` takes them (profiles resolved)."""
        return self.model_dump(exclude_none=True, exclude={"profiles"})


class Benchmark(Strict):
    """``[[benchmarks]]``: one benchmark scenario of a deployment."""

    id: str
    workload: str
    concurrency: list[int] = [1]
    protocol: Literal["grpc", "http"] = "grpc"
    targets: list[str] = []
    #: Config overrides per model, served from a derived repository (``overrides``: profiles resolved).
    config: dict[str, ConfigOverrides] = {}
    #: Only these models (and what they call) are loaded for the scenario.
    models: list[str] = []
    #: The id of the benchmark that serves this one's model alone on client-made tensors: the matrix
    #: shows this (server-side processing) / that (model-only) throughput at each concurrency.
    model_only: str = ""
    #: Run by ``make bench-network`` (through each shaped link) unless it is given benchmark ids.
    network: bool = False

    @property
    def overrides(self) -> dict[str, dict]:
        """``{model: {field: value}}``: what the variant server's configs change (records keep it)."""
        return {model: spec.fields() for model, spec in self.config.items()}


class ReliabilitySpec(Strict):
    """``[reliability]``: what ``python -m harness soak`` / ``faults`` / ``gate-cost`` load by default."""

    #: The entry model loaded (``--model`` overrides it).
    model: str
    #: ``"file.py:function"``: ``function(http_url, model)`` returns a ``CheckedWorkload`` of the
    #: reliability tools, requests whose every answer is known before the load (e.g.
    #: ``text_embedding_workload``: sentences, each embedded alone first).
    workload: str


class PeerModel(Strict):
    """``[peers.models.<model>]``: one served model of the side-by-side run."""

    #: The request: ``text`` (``TEXT`` BYTES in, ``EMBEDDING`` out) or ``tokens`` (client-tokenized
    #: ``input_ids`` + ``attention_mask`` in, ``last_hidden_state`` out).
    request: Literal["text", "tokens"]
    #: The in-process ceiling it is compared with: a key of ``[peers] ceiling_onnx`` or ``sentence-transformers``.
    ceiling: str
    #: What it is (the records' ``variant``).
    describe: str = ""


class PeerRatio(Strict):
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


class PeerVariant(Strict):
    """``[peers.variants.<name>]``: a config variant ``python -m harness peers`` serves by default on
    a tritonserver of its own (targets ``<model>[<name>]``), where the CPU has what it needs."""

    #: The benchmark whose ``config`` the variant's server runs (its checks: ``--config-variant <id>``).
    benchmark: str
    #: The ``[peers.models]`` it serves, those of them the run serves (``--models``).
    models: list[str]
    #: Served only on a CPU with one of these flags (``/proc/cpuinfo``); empty: on every CPU.
    cpu_flags: list[str] = []
    #: Its records' ``engine`` and ``precision`` (e.g. ``openvino``, ``bf16``); on ``openvino`` its
    #: targets' ceiling is their ONNX kind on OpenVINO too (``onnx-fp32@openvino``).
    engine: str = ""
    precision: str = ""
    #: What it is (the records' ``variant``).
    describe: str = ""


class PeersSpec(Strict):
    """``[peers]``: ``python -m harness peers``, the served models next to their in-process ceilings
    and a peer server (infinity-emb) on the same embedding model."""

    models: dict[str, PeerModel]
    #: Served by default (``--models``).
    default_models: list[str]
    #: The ONNX file of each ceiling kind (``onnx-fp32`` ...), relative to the deployment folder
    #: (on onnxruntime; kind ``<kind>@openvino``: the same file on OpenVINO).
    ceiling_onnx: dict[str, str]
    #: The served model whose config the ONNX ceiling follows (``onnx_max_batch_size``,
    #: ``tokenizer_parallelism``).
    ceiling_follows: str
    #: ``"file.py:function"``: ``function()`` returns the in-process pieces of the run: ``model_dir``
    #: (the sentence-transformers folder the peer and the torch ceiling load), ``dimension`` (of a
    #: vector), ``tokenize(texts)`` (the client's ``input_ids`` / ``attention_mask``) and
    #: ``embed(run, texts, max_rows)`` (tokenize, an onnxruntime ``session.run``, pool: the ONNX ceiling's work)
    #: and ``sentences`` (the texts the run's requests carry); optionally ``mixed`` (texts of mixed
    #: lengths, for the ``mixed`` workload).
    embedding: str
    #: Served by a ``--variant`` server by default (``--variant-models``).
    variant_models: list[str] = []
    #: Config variants served by default, each on its own server (``--declared-variants``).
    variants: dict[str, PeerVariant] = {}
    #: The ceiling kind whose ONNX file the peer's ``optimum`` engine runs.
    peer_onnx: str = "onnx-fp32"
    #: What the results matrix's side-by-side section compares (its heading).
    title: str = ""
    ratios: list[PeerRatio] = []
    #: ``{ <[peers.models] model> = "<OpenAI model name>" }``: also served through the front gate's
    #: ``POST /v1/embeddings`` asking for that name (target ``openai:<model>``, the model's ceiling).
    openai_models: dict[str, str] = {}

    @model_validator(mode="after")
    def _names_exist(self):
        kinds = set(self.ceiling_onnx) | {"sentence-transformers"}
        named = {
            "default_models": self.default_models,
            "variant_models": self.variant_models,
            "ceiling_follows": [self.ceiling_follows],
            "openai_models": list(self.openai_models),
            **{f"variants.{name}.models": variant.models for name, variant in self.variants.items()},
        }
        for key, models in named.items():
            unknown = [m for m in models if m not in self.models]
            if unknown:
                raise ValueError(f"[peers] {key}: {unknown[0]!r} is not in [peers.models] ({list(self.models)})")
        for model, spec in self.models.items():
            if spec.ceiling not in kinds:
                raise ValueError(f"[peers.models.{model}] ceiling = {spec.ceiling!r}: one of {sorted(kinds)}")
        if self.peer_onnx not in self.ceiling_onnx:
            raise ValueError(f"[peers] peer_onnx = {self.peer_onnx!r} is not in ceiling_onnx")
        return self


class ScaleoutSpec(Strict):
    """``[scaleout]``: Kubernetes objects (unset keys take the scale-out tools' defaults) and the
    multi-replica run (``python -m harness scaleout run``)."""

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
    rolled_models: list[str] = []


class Manifest(Strict):
    """A whole ``deployment.toml``."""

    name: str
    entry_models: list[str]
    summary: str = ""
    model_repository: str = "model_repository"
    targets: list[str] = ["cpu"]
    export: ExportSpec | None = None
    tests: TestsSpec = TestsSpec()
    target: dict[str, TargetSettings] = {}
    #: Tuning levers declared once, applied by name in a benchmark's ``config`` (``profiles = [...]``).
    profiles: dict[str, ConfigOverrides] = {}
    benchmarks: list[Benchmark] = []
    scaleout: ScaleoutSpec = ScaleoutSpec()
    reliability: ReliabilitySpec | None = None
    peers: PeersSpec | None = None
    #: ``[gate]``: bounds the front gate enforces beyond what each config implies
    #: (``triton_gate.policy``). Clients may call the entry models only.
    gate: GateBounds = GateBounds()
    #: ``[openai]``: the gate's ``/v1`` routes (``triton_gate.openai_api``).
    openai: OpenAIMapping | None = None

    @model_validator(mode="after")
    def _names_exist(self):
        undeclared = sorted(set(self.target) - set(self.targets))
        if undeclared:
            raise ValueError(f"[target.{undeclared[0]}] is not in targets = {self.targets}")
        ids = [b.id for b in self.benchmarks]
        for benchmark in self.benchmarks:
            if benchmark.model_only and benchmark.model_only not in ids:
                raise ValueError(
                    f"benchmark {benchmark.id!r}: model_only = {benchmark.model_only!r} is no benchmark id "
                    f"of this manifest ({', '.join(ids)})"
                )
        entry = {
            "[reliability] model": self.reliability and self.reliability.model,
            "[scaleout] model": self.scaleout.model,
        }
        for name, spec in (self.openai.models if self.openai else {}).items():
            entry |= {f"[openai.models.{name}] {part}.model": getattr(spec, part).model for part in spec.entry_parts()}
        for key, model in entry.items():
            if model and model not in self.entry_models:
                raise ValueError(f"{key} = {model!r} is no entry model ({self.entry_models})")
        configured = {b.id for b in self.benchmarks if b.config}
        for name, variant in (self.peers.variants if self.peers else {}).items():
            if variant.benchmark not in configured:
                raise ValueError(
                    f"[peers.variants.{name}] benchmark = {variant.benchmark!r} is no benchmark with a config"
                )
        nested = [name for name, profile in self.profiles.items() if profile.profiles]
        if nested:
            raise ValueError(f"[profiles.{nested[0]}] names profiles: a profile lists its fields only")
        for benchmark in self.benchmarks:
            benchmark.config = {model: self._resolve(benchmark.id, spec) for model, spec in benchmark.config.items()}
        return self

    def _resolve(self, benchmark: str, spec: ConfigOverrides) -> ConfigOverrides:
        """``spec`` with its profiles applied in order, then its own keys (``parameters`` merged)."""
        unknown = [name for name in spec.profiles if name not in self.profiles]
        if unknown:
            raise ValueError(f"benchmark {benchmark!r}: no [profiles.{unknown[0]}] (profiles: {list(self.profiles)})")
        fields, parameters = {}, {}
        for layer in [*(self.profiles[name] for name in spec.profiles), spec]:
            layer = layer.fields()
            parameters |= layer.pop("parameters", {})
            fields |= layer
        return ConfigOverrides(**fields, **({"parameters": parameters} if parameters else {}))


def _where(location: tuple) -> str:
    """A pydantic error location as the key's path: ``benchmarks[3].concurrency``."""
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in location).lstrip(".")


def _describe(error: dict) -> str:
    where = _where(error["loc"])
    if error["type"] == "extra_forbidden":
        what = "unknown key"
    elif error["type"] == "missing":
        what = "missing required key"
    elif error["type"] == "value_error":
        what = error["msg"].removeprefix("Value error, ")
    else:
        what = f"{error['msg'].lower()}, not {error['input']!r}"
    return f"{where}: {what}" if where else what


def describe_errors(exc: ValidationError) -> str:
    """Every error of ``exc`` as ``key.path: what``, unknown keys first (a misspelt key is also a missing one)."""
    errors = sorted(exc.errors(include_url=False), key=lambda error: error["type"] != "extra_forbidden")
    return "; ".join(_describe(error) for error in errors)


def read_manifest(path: Path) -> Manifest:
    """Parse and type-check one ``deployment.toml``."""
    try:
        with path.open("rb") as handle:
            table = tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{path}: not valid TOML: {exc}") from None
    try:
        return Manifest.model_validate(table)
    except ValidationError as exc:
        raise ManifestError(f"{path}: {describe_errors(exc)}") from None
