"""Per-request error handling: bad input fails its own request, never the batch or the stub."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


class InputError(ValueError):
    """A client sent something this model cannot process; the message is sent back verbatim."""


def input_error_response(pb_utils: Any, message: str):
    """An error response for bad input: INVALID_ARG (HTTP 400 / gRPC INVALID_ARGUMENT)."""
    code = getattr(pb_utils.TritonError, "INVALID_ARG", None)
    error = pb_utils.TritonError(message, code) if code is not None else pb_utils.TritonError(message)
    return pb_utils.InferenceResponse(error=error)


def error_response(pb_utils: Any, exc: Exception):
    """The error response for an exception raised while answering one request: an ``InputError``
    is the client's (INVALID_ARG, its message verbatim), anything else an internal error."""
    if isinstance(exc, InputError):
        return input_error_response(pb_utils, str(exc))
    message = f"internal error: {type(exc).__name__}: {exc}"
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message))


def respond_each(pb_utils: Any, requests: Sequence[Any], handle: Callable[[Any], Any]) -> list:
    """Run ``handle(request) -> InferenceResponse`` for every request, one response each.

    An ``InputError`` (or any other exception) becomes an error response for that request
    only, so the other requests of the same dynamic batch are still answered.
    """
    responses = []
    for request in requests:
        try:
            responses.append(handle(request))
        except Exception as exc:  # noqa: BLE001 - a bug must not take the stub down
            responses.append(error_response(pb_utils, exc))
    return responses


def single_bytes_items(values: Any, name: str) -> list[bytes]:
    """Flatten a BYTES input into a list of ``bytes`` items, rejecting an empty tensor."""
    import numpy as np

    array = np.asarray(values)
    if array.size == 0:
        raise InputError(f"input '{name}' is empty: send at least one element")
    items = []
    for value in array.reshape(-1):
        if isinstance(value, str):
            value = value.encode("utf-8")
        if not isinstance(value, (bytes, bytearray)):
            raise InputError(f"input '{name}' must be BYTES, got {type(value).__name__}")
        items.append(bytes(value))
    return items


def request_bytes_items(pb_utils: Any, request: Any, name: str, max_request_bytes: int) -> list[bytes]:
    """The items of one request's BYTES input ``name``: present, non-empty, at most ``max_request_bytes`` in all."""
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        raise InputError(f"input '{name}' is missing")
    items = single_bytes_items(tensor.as_numpy(), name)
    check_request_bytes(items, name, max_request_bytes)
    return items


def decode_utf8(data: bytes, name: str) -> str:
    """Decode UTF-8 text or fail with a message naming the input and the bad byte offset."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"input '{name}' is not valid UTF-8 (byte {exc.start}: {data[exc.start : exc.start + 1]!r})"
        ) from None


def utf8_texts(values: Any, name: str, max_bytes: int) -> list[str]:
    """A BYTES input as UTF-8 strings, each at most ``max_bytes`` long."""
    texts = []
    for item in single_bytes_items(values, name):
        if len(item) > max_bytes:
            raise InputError(f"{name} element is {len(item)} bytes, over the limit of {max_bytes}")
        texts.append(decode_utf8(item, name))
    return texts


#: Default bound on the bytes of all items of one request (config parameter ``max_request_bytes``).
DEFAULT_MAX_REQUEST_BYTES = 64 * 1024 * 1024


def check_request_bytes(items: Sequence[bytes], name: str, limit: int) -> None:
    """Refuse a request whose ``name`` items add up to more than ``limit`` bytes (named in the error)."""
    total = sum(len(item) for item in items)
    if total > limit:
        raise InputError(f"request has {total} bytes of {name}, over the limit of {limit} (max_request_bytes)")
