"""Fixture files that stay small: JSON up to ``MAX_JSON_BYTES``, NPZ beyond (lists of numbers as
arrays); ``read_fixture`` reads whichever exists and gives back the same lists."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from harness.provenance import replace_atomically

__all__ = ["MAX_JSON_BYTES", "read_fixture", "write_fixture"]

MAX_JSON_BYTES = 1 << 20
_ARRAY = "__npz_array__"


def _numbers(value: Any) -> bool:
    """A non-empty rectangular list (of lists) of ints or floats."""
    try:
        array = np.asarray(value)
    except ValueError:
        return False
    return isinstance(value, list) and array.size > 0 and array.dtype.kind in "if"


def _split(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    if _numbers(value):
        array = np.asarray(value)
        key = f"a{len(arrays)}"
        arrays[key] = array.astype(np.float32 if array.dtype.kind == "f" else np.int64)
        return {_ARRAY: key}
    if isinstance(value, dict):
        return {k: _split(v, arrays) for k, v in value.items()}
    if isinstance(value, list):
        return [_split(v, arrays) for v in value]
    return value


def _join(value: Any, arrays) -> Any:
    if isinstance(value, dict):
        if set(value) == {_ARRAY}:
            return arrays[value[_ARRAY]].tolist()
        return {k: _join(v, arrays) for k, v in value.items()}
    if isinstance(value, list):
        return [_join(v, arrays) for v in value]
    return value


def write_fixture(path: str | Path, data: Any, max_json_bytes: int = MAX_JSON_BYTES) -> Path:
    """``data`` as ``path`` (JSON) or, when that is over ``max_json_bytes``, as ``path`` ``.npz``."""
    path = Path(path)
    text = json.dumps(data, ensure_ascii=False, indent=1) + "\n"
    if len(text.encode()) <= max_json_bytes:
        written, other = path, path.with_suffix(".npz")
        replace_atomically(written, lambda temporary: temporary.write_text(text, encoding="utf-8"))
    else:
        written, other = path.with_suffix(".npz"), path
        arrays: dict[str, np.ndarray] = {}
        skeleton = json.dumps(_split(data, arrays), ensure_ascii=False)
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **{"json": np.array(skeleton)}, **arrays)
        replace_atomically(written, lambda temporary: temporary.write_bytes(buffer.getvalue()))
    other.unlink(missing_ok=True)
    return written


def read_fixture(path: str | Path) -> Any:
    """What :func:`write_fixture` wrote for ``path``, from the JSON file or the NPZ one."""
    path = Path(path)
    if path.exists():
        return json.loads(path.read_text(encoding="utf-8"))
    npz = path.with_suffix(".npz")
    if not npz.exists():
        raise FileNotFoundError(f"{path} (or {npz.name}): no fixture; make_fixtures.py writes it")
    with np.load(npz, allow_pickle=False) as archive:
        return _join(json.loads(str(archive["json"])), archive)
