"""Text models answer a whole dynamic batch with one embedding call: gather, embed, scatter."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from triton_helpers.errors import InputError, input_error_response, utf8_texts

#: Defaults of the per-request limits (config parameters of the same names override them).
DEFAULT_MAX_TEXT_BYTES = 1 << 20
DEFAULT_MAX_REQUEST_BYTES = 2 << 20
DEFAULT_MAX_TEXTS = 64


@dataclass(frozen=True)
class TextLimits:
    """Per-text and per-request bounds of a text model (config parameters ``max_text_bytes``,
    ``max_request_bytes`` (all texts of one request together) and ``max_texts``)."""

    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_texts: int = DEFAULT_MAX_TEXTS

    @classmethod
    def from_config(cls, config: dict, max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES) -> TextLimits:
        parameters = config.get("parameters", {})

        def value(key: str, default: int) -> int:
            raw = (parameters.get(key) or {}).get("string_value")
            return int(raw) if raw not in (None, "") else default

        return cls(
            value("max_text_bytes", max_text_bytes),
            value("max_request_bytes", DEFAULT_MAX_REQUEST_BYTES),
            value("max_texts", DEFAULT_MAX_TEXTS),
        )


def request_texts(values: Any, name: str, limits: TextLimits) -> list[str]:
    """The texts of one request, refused as a whole when over ``limits`` (checked on the sizes
    before anything is decoded)."""
    import numpy as np

    array = np.asarray(values)
    if array.size > limits.max_texts:
        raise InputError(f"request has {array.size} {name} elements, over the limit of {limits.max_texts} (max_texts)")
    total = sum(len(v) for v in array.reshape(-1) if isinstance(v, (bytes, bytearray, str)))
    if total > limits.max_request_bytes:
        raise InputError(
            f"request has {total} bytes of {name}, over the limit of {limits.max_request_bytes} (max_request_bytes)"
        )
    return utf8_texts(array, name, limits.max_text_bytes)


@dataclass
class TextBatch:
    """The valid texts of a batch of requests, which request owns which, and early errors."""

    texts: list[str] = field(default_factory=list)
    owners: list[tuple[int, int]] = field(default_factory=list)
    responses: list = field(default_factory=list)
    requests: list = field(default_factory=list)

    @classmethod
    def gather(cls, pb_utils: Any, requests: list, name: str, max_bytes: int | TextLimits) -> TextBatch:
        """Validate every request's ``name`` input; invalid requests get their error response now.

        ``max_bytes``: the per-text limit, or ``TextLimits`` (per text and per request)."""
        limits = max_bytes if isinstance(max_bytes, TextLimits) else TextLimits(max_text_bytes=max_bytes)
        batch = cls(responses=[None] * len(requests), requests=list(requests))
        for index, request in enumerate(requests):
            try:
                tensor = pb_utils.get_input_tensor_by_name(request, name).as_numpy()
                texts = request_texts(tensor, name, limits)
            except InputError as exc:
                batch.responses[index] = input_error_response(pb_utils, str(exc))
                continue
            batch.texts.extend(texts)
            batch.owners.append((index, len(texts)))
        return batch

    def requested(self, output: str) -> bool:
        """Whether any valid request of the batch asks for ``output`` (Triton lists every output
        for a request that names none)."""
        return any(output in self.requests[index].requested_output_names() for index, _ in self.owners)

    def scatter(self, pb_utils: Any, vectors: np.ndarray, output: str, dtype, extra: dict | None = None) -> list:
        """Responses in request order: each valid request gets its rows of ``vectors``, and its
        rows of each ``extra`` output (``{name: (array, dtype)}``, one row per text) it asked for."""
        offset = 0
        for index, count in self.owners:
            rows = np.ascontiguousarray(vectors[offset : offset + count], dtype=dtype)
            tensors = [pb_utils.Tensor(output, rows)]
            if extra:
                asked = self.requests[index].requested_output_names()
                for name, (values, kind) in extra.items():
                    if name in asked:
                        part = np.asarray(values[offset : offset + count], dtype=kind).reshape(count, -1)
                        tensors.append(pb_utils.Tensor(name, part))
            self.responses[index] = pb_utils.InferenceResponse(tensors)
            offset += count
        return self.responses

    def fail(self, pb_utils: Any, message: str) -> list:
        """Every still-unanswered request gets ``message`` as its error."""
        for index, _ in self.owners:
            self.responses[index] = pb_utils.InferenceResponse(error=pb_utils.TritonError(message))
        return self.responses
