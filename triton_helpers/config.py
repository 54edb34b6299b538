"""Reading a model's config.pbtxt (as the JSON Triton hands to ``initialize``)."""

from __future__ import annotations

from typing import Any


def parameter(config: dict, key: str, default: Any = None, cast=str):
    """``parameters { key: ... value: { string_value: ... } }``, cast, or ``default`` if absent/empty."""
    value = config.get("parameters", {}).get(key, {}).get("string_value")
    return default if value in (None, "") else cast(value)
