"""Text models answer a whole dynamic batch with one embedding call: gather, embed, scatter."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from triton_helpers.errors import InputError, input_error_response, utf8_texts


@dataclass
class TextBatch:
    """The valid texts of a batch of requests, which request owns which, and early errors."""

    texts: list[str] = field(default_factory=list)
    owners: list[tuple[int, int]] = field(default_factory=list)
    responses: list = field(default_factory=list)

    @classmethod
    def gather(cls, pb_utils: Any, requests: list, name: str, max_bytes: int) -> "TextBatch":
        """Validate every request's ``name`` input; invalid requests get their error response now."""
        batch = cls(responses=[None] * len(requests))
        for index, request in enumerate(requests):
            try:
                tensor = pb_utils.get_input_tensor_by_name(request, name).as_numpy()
                texts = utf8_texts(tensor, name, max_bytes)
            except InputError as exc:
                batch.responses[index] = input_error_response(pb_utils, str(exc))
                continue
            batch.texts.extend(texts)
            batch.owners.append((index, len(texts)))
        return batch

    def scatter(self, pb_utils: Any, vectors: np.ndarray, output: str, dtype) -> list:
        """Responses in request order: each valid request gets its rows of ``vectors``."""
        offset = 0
        for index, count in self.owners:
            rows = np.ascontiguousarray(vectors[offset:offset + count], dtype=dtype)
            self.responses[index] = pb_utils.InferenceResponse([pb_utils.Tensor(output, rows)])
            offset += count
        return self.responses

    def fail(self, pb_utils: Any, message: str) -> list:
        """Every still-unanswered request gets ``message`` as its error."""
        for index, _ in self.owners:
            self.responses[index] = pb_utils.InferenceResponse(error=pb_utils.TritonError(message))
        return self.responses
