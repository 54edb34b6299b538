"""Model repositories and their ``config.pbtxt`` files, as ``ModelConfig`` protobufs (tritonclient's
``model_config_pb2`` with protobuf ``text_format``); derived repositories are folders of links
to the original files with only the rewritten configs as new files."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

ModelConfig = model_config_pb2.ModelConfig


class RepositoryError(ValueError):
    """A repository or config that cannot be used as asked (names the file or model)."""


def read_config(path: str | Path) -> ModelConfig:
    """Parse one config.pbtxt; a syntax error names the file."""
    path = Path(path)
    try:
        return text_format.Parse(path.read_text(), ModelConfig())
    except text_format.ParseError as exc:
        raise RepositoryError(f"{path}: {exc}") from exc


def config_from_json(config: dict) -> ModelConfig:
    """A config as a server's model-config endpoint returns it (JSON), typed; fields this
    tritonclient does not know are left out."""
    return json_format.ParseDict(config, ModelConfig(), ignore_unknown_fields=True)


def write_config(config: ModelConfig, path: str | Path) -> None:
    """Write ``config`` as a new file at ``path`` (a link there is replaced, never written through)."""
    path = Path(path)
    if path.is_symlink() or path.exists():
        path.unlink()
    path.write_text(text_format.MessageToString(config))


def effective_config_path(model_dir: str | Path, model_config_name: str | None = None) -> Path | None:
    """The config Triton reads for ``model_dir`` given ``--model-config-name`` (None: no config)."""
    model_dir = Path(model_dir)
    if model_config_name:
        named = model_dir / "configs" / f"{model_config_name}.pbtxt"
        if named.exists():
            return named
    default = model_dir / "config.pbtxt"
    return default if default.exists() else None


def config_files(model_dir: str | Path) -> list[Path]:
    """Every config of a model folder: ``config.pbtxt`` and the named ``configs/*.pbtxt``."""
    model_dir = Path(model_dir)
    return [p for p in [model_dir / "config.pbtxt", *sorted((model_dir / "configs").glob("*.pbtxt"))] if p.exists()]


def model_dirs(repository: str | Path) -> list[Path]:
    """The model folders of a repository (those with a config.pbtxt), sorted by name."""
    return [p for p in sorted(Path(repository).iterdir()) if p.is_dir() and (p / "config.pbtxt").exists()]


def configs(repository: str | Path, model_config_name: str | None = None) -> dict[str, ModelConfig]:
    """``{model name: its effective config}`` of a repository."""
    found = {}
    for model_dir in sorted(Path(repository).iterdir()):
        path = effective_config_path(model_dir, model_config_name) if model_dir.is_dir() else None
        if path is not None:
            found[model_dir.name] = read_config(path)
    return found


def parameter(config: ModelConfig, key: str, default: str | None = None) -> str | None:
    """A ``parameters { key: ... value: { string_value: ... } }`` entry of a config."""
    return config.parameters[key].string_value if key in config.parameters else default


def set_parameter(config: ModelConfig, key: str, value: str) -> ModelConfig:
    config.parameters[key].string_value = str(value)
    return config


def python_models(repository: str | Path, model_config_name: str | None = None) -> list[str]:
    """Models served by the Python backend itself (``backend: "python"``)."""
    return [name for name, config in configs(repository, model_config_name).items() if config.backend == "python"]


def called_models(config: ModelConfig, available: Iterable[str]) -> set[str]:
    """Models a model needs loaded: its ensemble steps, and the models its parameters name (BLS targets)."""
    available = set(available)
    steps = {step.model_name for step in config.ensemble_scheduling.step}
    named = {value.string_value for value in config.parameters.values() if value.string_value in available}
    return (steps | named) - {config.name}


def dependencies(repository: str | Path, models: Iterable[str]) -> list[str]:
    """``models`` and, transitively, every model they call; sorted. Unknown names are refused."""
    found = configs(repository)
    wanted: set[str] = set()
    queue = list(models)
    while queue:
        name = queue.pop()
        if name in wanted:
            continue
        if name not in found:
            raise RepositoryError(f"{repository} has no model {name!r}")
        wanted.add(name)
        queue += sorted(called_models(found[name], found) - wanted)
    return sorted(wanted)


def link_or_copy(source: str, target: str) -> None:
    """A hard link to the file ``source`` names (through any symbolic link), or a copy across devices."""
    source = os.path.realpath(source)  # os.link may link the symlink itself, which dangles in a container
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def derive(
    source: str | Path,
    dest: str | Path,
    *,
    models: Iterable[str] | None = None,
    edit: Callable[[str, Path, ModelConfig], ModelConfig | None] | None = None,
    link: str = "symlink",
) -> Path:
    """A repository ``dest/model_repository``: ``source``'s model folders (only ``models`` when given)
    as folders of links to each file (``link="hard"``: hard links, copies across devices);
    ``edit(model, path, config)`` may return a changed config, written as a new file."""
    source = Path(source).resolve()
    keep = set(models) if models is not None else None
    missing = sorted(keep - {p.name for p in model_dirs(source)}) if keep is not None else []
    if missing:
        raise RepositoryError(f"{source} has no model(s) {missing}")
    copy = Path(dest) / "model_repository"
    if copy.exists():
        shutil.rmtree(copy)
    copy.mkdir(parents=True)
    for model_dir in model_dirs(source):
        if keep is not None and model_dir.name not in keep:
            continue
        target = copy / model_dir.name
        copy_function = os.symlink if link == "symlink" else link_or_copy
        shutil.copytree(
            model_dir, target, copy_function=copy_function, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
        for path in config_files(model_dir) if edit else []:
            relative = path.relative_to(model_dir)
            edited = edit(model_dir.name, relative, read_config(path))
            if edited is not None:
                write_config(edited, target / relative)
    return copy
