"""``deployment.toml``, typed: every table and key is a field of a pydantic model below; an unknown
key or a value of the wrong type is refused with the file and the key's path."""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import TypeAdapter, ValidationError, model_validator

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
    #: Environment of tritonserver and its stubs on this target (e.g. glibc's malloc settings).
    env: dict[str, str] = {}


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
        """The fields set (profiles resolved), as records and server keys show them."""
        return self.model_dump(exclude_none=True, exclude={"profiles"})

    def under(self, layer: ConfigOverrides) -> ConfigOverrides:
        """These overrides with ``layer``'s set fields over them (``parameters`` merged), no profiles."""
        parameters = {**(self.parameters or {}), **(layer.parameters or {})} or None
        return self.model_copy(update={**layer.fields(), "parameters": parameters, "profiles": []})


def overrides_table(raw: dict | None) -> dict[str, ConfigOverrides]:
    """``{model: ConfigOverrides}`` of ``{model: {field: value}}`` (JSON on a command line); a
    ValueError names the model and the key."""
    try:
        return TypeAdapter(dict[str, ConfigOverrides]).validate_python(raw or {})
    except ValidationError as exc:
        raise ValueError(f"config overrides: {describe_errors(exc)}") from None


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

    @property
    def overrides(self) -> dict[str, dict]:
        """``{model: {field: value}}``: what the variant server's configs change (records keep it)."""
        return {model: spec.fields() for model, spec in self.config.items()}


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
            f"[openai.models.{name}] {part}.model": getattr(spec, part).model
            for name, spec in (self.openai.models if self.openai else {}).items()
            for part in spec.entry_parts()
        }
        for key, model in entry.items():
            if model and model not in self.entry_models:
                raise ValueError(f"{key} = {model!r} is no entry model ({self.entry_models})")
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
        layers = [*(self.profiles[name] for name in spec.profiles), spec]
        return functools.reduce(ConfigOverrides.under, layers, ConfigOverrides())


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


def read_typed(path: Path, model: type[Strict], context: dict | None = None):
    """Parse one TOML file into ``model`` (validators get ``context``); ManifestError naming the file
    and each key that is wrong."""
    try:
        with path.open("rb") as handle:
            table = tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{path}: not valid TOML: {exc}") from None
    try:
        return model.model_validate(table, context=context)
    except ValidationError as exc:
        raise ManifestError(f"{path}: {describe_errors(exc)}") from None


def read_manifest(path: Path) -> Manifest:
    """Parse and type-check one ``deployment.toml``."""
    return read_typed(path, Manifest)
