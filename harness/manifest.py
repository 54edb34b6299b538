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
class ServerSpec:
    """``[server]``: tritonserver arguments for every target."""

    args: list[str] = field(default_factory=list)


@dataclass
class TargetSettings:
    """``[target.<name>]``: what differs on one hardware target."""

    model_config_name: str | None = None
    backend_config: list[str] = field(default_factory=list)
    server_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
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


@dataclass
class Manifest:
    """A whole ``deployment.toml``."""

    name: str
    entry_models: list[str]
    summary: str = ""
    model_repository: str = "model_repository"
    fixtures: str = "fixtures"
    targets: list[str] = field(default_factory=lambda: ["cpu"])
    export: ExportSpec | None = None
    tests: TestsSpec = field(default_factory=TestsSpec)
    server: ServerSpec = field(default_factory=ServerSpec)
    target: dict[str, TargetSettings] = field(default_factory=dict)
    benchmarks: list[Benchmark] = field(default_factory=list)
    #: ``[scaleout]``: Kubernetes / multi-replica settings, read by ``harness.tools.scaleout``.
    scaleout: dict[str, typing.Any] = field(default_factory=dict)


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
    return manifest
