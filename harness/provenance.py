"""Weights provenance: which weights a served model was made from, proved equal to the fixtures'.

``export.py`` stamps each ONNX file (:func:`stamp_onnx`), ``make_fixtures.py`` records the same
identity (:func:`fixtures_record`), ``checks.py`` compares them (:func:`assert_served_weights`);
docs/adding-a-deployment.md. ``weights_sha256`` is :func:`file_sha256` for a file a library opens
itself, :func:`tensors_sha256` for tensors this project's code builds or loads."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

FIXTURES_KEY = "weights"
STAMP_KEYS = ("weights_sha256", "weights_source", "exported_by")


@dataclass(frozen=True)
class WeightsIdentity:
    """The identity of a set of weights; only ``sha256`` decides whether two are the same."""

    sha256: str
    source: str
    exported_by: str = ""
    regenerate: str = ""

    def describe(self) -> str:
        by = f", exported by {self.exported_by}" if self.exported_by else ""
        return f"sha256 {self.sha256} ({self.source}{by})"


def file_sha256(path: str | Path) -> str:
    """sha256 of a weights file's bytes (the definition for files a library opens itself)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _as_array(tensor: Any):
    import numpy as np

    if hasattr(tensor, "detach"):  # a torch tensor, without importing torch here
        tensor = tensor.detach().cpu().contiguous()
        if str(tensor.dtype) == "torch.bfloat16":
            import torch

            return "bfloat16", tuple(tensor.shape), tensor.view(torch.int16).numpy()
        array = tensor.numpy()
    else:
        array = np.asarray(tensor)
    return str(array.dtype), tuple(array.shape), np.ascontiguousarray(array)


def tensors_sha256(tensors: Mapping[str, Any]) -> str:
    """sha256 over named tensors (a torch state_dict or numpy arrays): sorted names, each
    ``name|dtype|shape|`` then its raw C-order bytes."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        dtype, shape, array = _as_array(tensors[name])
        digest.update(f"{name}|{dtype}|{shape}|".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def file_identity(path: str | Path, source: str) -> WeightsIdentity:
    return WeightsIdentity(file_sha256(path), source)


def tensors_identity(tensors: Mapping[str, Any], source: str) -> WeightsIdentity:
    return WeightsIdentity(tensors_sha256(tensors), source)


# --- ONNX stamps ---------------------------------------------------------------------------


def replace_atomically(path: str | Path, write) -> Path:
    """``write(temporary path)`` beside ``path``, then rename it over ``path``: a reader never
    sees half a file, and a file linked elsewhere (a copy's hard link) is replaced, not written into."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        write(temporary)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path


def stamp_onnx(path: str | Path, identity: WeightsIdentity, exported_by: str) -> None:
    """Write ``identity`` into the ONNX file's ``metadata_props`` (replacing an older stamp);
    the file is replaced atomically (:func:`replace_atomically`)."""
    import onnx

    model = onnx.load(str(path))
    kept = [(p.key, p.value) for p in model.metadata_props if p.key not in STAMP_KEYS]
    del model.metadata_props[:]
    for key, value in kept + list(zip(STAMP_KEYS, (identity.sha256, identity.source, exported_by))):
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    replace_atomically(path, lambda temporary: onnx.save(model, str(temporary)))


@lru_cache(maxsize=64)
def _read_stamp(path: str, mtime_ns: int, size: int) -> WeightsIdentity | None:
    import onnx

    props = {p.key: p.value for p in onnx.load(path, load_external_data=False).metadata_props}
    if "weights_sha256" not in props:
        return None
    return WeightsIdentity(props["weights_sha256"], props.get("weights_source", ""), props.get("exported_by", ""))


def read_stamp(path: str | Path) -> WeightsIdentity | None:
    """The identity stamped into an ONNX file, None when it carries no stamp."""
    stat = Path(path).stat()
    return _read_stamp(str(path), stat.st_mtime_ns, stat.st_size)


def served_onnx_files(repository: str | Path, model: str) -> list[Path]:
    """Every ONNX file in the numbered version folders of ``model``."""
    folder = Path(repository) / model
    return sorted(p for p in folder.glob("*/*.onnx") if p.parent.name.isdigit())


# --- fixtures ------------------------------------------------------------------------------


def fixtures_record(identities: Mapping[str, WeightsIdentity], regenerate: str) -> dict:
    """The value of a fixtures file's ``"weights"`` key: served model -> identity, and the command
    that regenerates the exports and the fixtures together."""
    return {
        "regenerate": regenerate,
        "models": {
            model: {"weights_sha256": identity.sha256, "weights_source": identity.source}
            for model, identity in identities.items()
        },
    }


def fixtures_identity(fixtures: Mapping, model: str) -> WeightsIdentity:
    """The identity a fixtures file (its parsed JSON) records for ``model``."""
    record = fixtures.get(FIXTURES_KEY)
    if not isinstance(record, Mapping) or model not in record.get("models", {}):
        raise AssertionError(
            f"the fixtures record no weights identity for {model!r} under {FIXTURES_KEY!r}: regenerate them"
        )
    entry = record["models"][model]
    return WeightsIdentity(entry["weights_sha256"], entry["weights_source"], regenerate=record.get("regenerate", ""))


def _repository(ctx_or_repository) -> Path:
    deployment = getattr(ctx_or_repository, "deployment", None)
    return Path(deployment.model_repository if deployment is not None else ctx_or_repository)


def assert_served_weights(
    ctx_or_repository, model: str, fixtures_identity: WeightsIdentity, served: WeightsIdentity | None = None
) -> None:
    """Fail unless the weights ``model`` serves (the stamp of each of its ONNX files, or ``served``
    for a model served without one) are those the fixtures were made from."""
    regenerate = fixtures_identity.regenerate or "the deployment's export.py --force, then its make_fixtures.py"
    if served is not None:
        found = [(f"{model} (installed files)", served)]
    else:
        files = served_onnx_files(_repository(ctx_or_repository), model)
        assert files, f"{model}: no ONNX file in {_repository(ctx_or_repository) / model}/<version>/; run: {regenerate}"
        found = [(str(path), read_stamp(path)) for path in files]
    for where, identity in found:
        assert identity is not None, (
            f"{where} carries no weights stamp (weights_sha256 in its ONNX metadata_props): "
            f"it was not exported by the deployment's export.py; run: {regenerate}"
        )
        assert identity.sha256 == fixtures_identity.sha256, (
            f"{model}: the served weights are not the weights of the fixtures.\n"
            f"  served   {where}: {identity.describe()}\n"
            f"  fixtures: {fixtures_identity.describe()}\n"
            f"export and fixtures must come from the same weights; regenerate both: {regenerate}"
        )


# --- which code a benchmark measured ---------------------------------------------------------


@lru_cache(maxsize=64)
def repository_commit(path: str | Path) -> str | None:
    """The short hash of the last git commit that changed ``path``, ``+dirty`` when files under it
    differ from it (or are new, not ignored); None outside git."""
    path = Path(path)
    try:
        commit = subprocess.run(
            ["git", "log", "-1", "--format=%h", "--", "."], cwd=path, capture_output=True, text=True, timeout=20
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "."], cwd=path, capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if commit.returncode != 0 or not commit.stdout.strip():
        return None
    return commit.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
