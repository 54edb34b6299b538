"""Config variants: a copy of a model repository with some ``config.pbtxt`` fields changed (as
``ModelConfig`` protobufs, never as text)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from tritonclient.grpc import model_config_pb2

from harness.manifest import ConfigOverrides
from harness.repository import derive, model_dirs


def apply_overrides(config: model_config_pb2.ModelConfig, overrides: ConfigOverrides) -> model_config_pb2.ModelConfig:
    """Change the fields ``overrides`` sets."""
    if overrides.instance_count is not None:
        if not config.instance_group:
            config.instance_group.add(kind=model_config_pb2.ModelInstanceGroup.KIND_CPU)
        for group in config.instance_group:
            group.count = overrides.instance_count
    if overrides.dynamic_batching is False:
        config.ClearField("dynamic_batching")
    elif overrides.dynamic_batching is True:
        config.dynamic_batching.SetInParent()
    if overrides.max_queue_delay_microseconds is not None:
        config.dynamic_batching.max_queue_delay_microseconds = overrides.max_queue_delay_microseconds
    if overrides.preferred_batch_size is not None:
        del config.dynamic_batching.preferred_batch_size[:]
        config.dynamic_batching.preferred_batch_size.extend(overrides.preferred_batch_size)
    if overrides.max_batch_size is not None:
        if overrides.max_batch_size == 0 and config.max_batch_size > 0:
            # No batching: the batch becomes the first dim of every tensor, and no batcher can run.
            for tensor in list(config.input) + list(config.output):
                tensor.dims.insert(0, -1)
            config.ClearField("dynamic_batching")
        config.max_batch_size = overrides.max_batch_size
    if overrides.backend is not None:
        config.ClearField("platform")
        config.backend = overrides.backend
    if overrides.default_model_filename is not None:
        config.default_model_filename = overrides.default_model_filename
    for key, value in (overrides.parameters or {}).items():
        config.parameters[key].string_value = value
    if overrides.version is not None:
        config.version_policy.specific.versions[:] = [overrides.version]
    return config


def variant_repository(
    source: Path,
    overrides: dict[str, ConfigOverrides],
    dest: Path | None = None,
    models: list[str] | tuple[str, ...] = (),
) -> Path:
    """A repository of links to ``source``'s files (only ``models`` when given), each model named in
    ``overrides`` with a rewritten ``config.pbtxt``."""
    missing = sorted(set(overrides) - {p.name for p in model_dirs(source)})  # derive checks ``models``
    if missing:
        raise ValueError(f"config overrides name models that {Path(source).resolve()} does not have: {missing}")

    def override(model: str, path: Path, config):
        if model in overrides and path == Path("config.pbtxt"):
            return apply_overrides(config, overrides[model])
        return None

    dest = dest or Path(tempfile.mkdtemp(prefix="triton-variant-"))
    return derive(source, dest, models=models or None, edit=override)


def describe(overrides: dict[str, ConfigOverrides]) -> str:
    """A short stable label of a set of overrides, for records and server keys."""
    fields = {model: spec.fields() for model, spec in overrides.items()}
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))
