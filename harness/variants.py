"""Config variants: a copy of a model repository with some ``config.pbtxt`` fields changed.

Benchmarks use them to measure the tuning levers (instance count, threads, dynamic batching,
queue delay, batch size, graph version) side by side without keeping copies of repositories
in git. Configs are edited as ``ModelConfig`` protobufs (tritonclient's ``model_config_pb2``
with protobuf ``text_format``), never as text.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

KNOWN_KEYS = {"instance_count", "dynamic_batching", "max_queue_delay_microseconds", "preferred_batch_size",
              "max_batch_size", "parameters", "version"}


def read_config(path: Path) -> model_config_pb2.ModelConfig:
    """Parse a config.pbtxt."""
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def apply_overrides(config: model_config_pb2.ModelConfig, overrides: dict) -> model_config_pb2.ModelConfig:
    """Change the fields named in ``overrides`` (keys: see ``KNOWN_KEYS``)."""
    unknown = set(overrides) - KNOWN_KEYS
    if unknown:
        raise ValueError(f"unknown config override(s) {sorted(unknown)}; known: {sorted(KNOWN_KEYS)}")
    if "instance_count" in overrides:
        if not config.instance_group:
            config.instance_group.add(kind=model_config_pb2.ModelInstanceGroup.KIND_CPU)
        for group in config.instance_group:
            group.count = int(overrides["instance_count"])
    if overrides.get("dynamic_batching") is False:
        config.ClearField("dynamic_batching")
    elif overrides.get("dynamic_batching") is True:
        config.dynamic_batching.SetInParent()
    if "max_queue_delay_microseconds" in overrides:
        config.dynamic_batching.max_queue_delay_microseconds = int(overrides["max_queue_delay_microseconds"])
    if "preferred_batch_size" in overrides:
        del config.dynamic_batching.preferred_batch_size[:]
        config.dynamic_batching.preferred_batch_size.extend(int(b) for b in overrides["preferred_batch_size"])
    if "max_batch_size" in overrides:
        config.max_batch_size = int(overrides["max_batch_size"])
    for key, value in overrides.get("parameters", {}).items():
        config.parameters[key].string_value = str(value)
    if "version" in overrides:
        config.version_policy.specific.versions[:] = [int(overrides["version"])]
    return config


def variant_repository(source: Path, overrides: dict[str, dict], dest: Path | None = None,
                       models: list[str] | tuple[str, ...] = ()) -> Path:
    """A repository in ``dest`` (default: a new temp dir) whose models link to ``source``'s
    files, with each model named in ``overrides`` given a rewritten ``config.pbtxt``; only
    ``models`` when given (a variant server then loads just what the scenario needs)."""
    source = Path(source).resolve()
    missing = [m for m in list(overrides) + list(models) if not (source / m / "config.pbtxt").exists()]
    if missing:
        raise ValueError(f"config overrides name models that {source} does not have: {missing}")
    dest = Path(dest or tempfile.mkdtemp(prefix="triton-variant-")) / "model_repository"
    dest.mkdir(parents=True, exist_ok=True)
    for model in sorted(p for p in source.iterdir() if p.is_dir() and (not models or p.name in models)):
        target = dest / model.name
        target.mkdir()
        for item in model.iterdir():
            if item.name == "config.pbtxt" and model.name in overrides:
                config = apply_overrides(read_config(item), overrides[model.name])
                (target / item.name).write_text(text_format.MessageToString(config))
            else:
                os.symlink(item, target / item.name)
    return dest


def describe(overrides: dict[str, dict]) -> str:
    """A short stable label of a set of overrides, for records and server keys."""
    return json.dumps(overrides, sort_keys=True, separators=(",", ":"))
