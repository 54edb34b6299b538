"""Embedding texts through an ONNX transformer model with BLS, in few large requests.

Used by the Python models that tokenize on the server: every text of a dynamic batch (or
every chunk of every file in it) is tokenized together, sorted by length so padding stays
small, cut into requests of at most the ONNX model's ``max_batch_size`` rows, sent with
``await async_exec`` concurrently, then mean-pooled (+ normalised) and put back in order.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from triton_helpers.text_embedding import pool, tokenize


def plan_batches(lengths: list[int], max_rows: int) -> list[list[int]]:
    """Indices grouped into batches of similar length, at most ``max_rows`` each."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    return [order[i:i + max_rows] for i in range(0, len(order), max_rows)]


async def embed_texts(pb_utils: Any, model_name: str, texts: list[str], *, max_rows: int, normalize: bool,
                      model_dir: str | None = None, max_length: int | None = None) -> np.ndarray:
    """Sentence embeddings of ``texts`` (FP32 ``[len(texts), dim]``) from ``model_name``."""
    if not texts:
        return np.zeros((0, 0), np.float32)
    tokens = tokenize(texts, model_dir, max_length)
    lengths = tokens["attention_mask"].sum(axis=1).tolist()
    batches = plan_batches(lengths, max_rows)

    async def run(indices: list[int]) -> np.ndarray:
        width = int(max(lengths[i] for i in indices))
        ids = np.ascontiguousarray(tokens["input_ids"][indices, :width])
        mask = np.ascontiguousarray(tokens["attention_mask"][indices, :width])
        request = pb_utils.InferenceRequest(
            model_name=model_name,
            requested_output_names=["last_hidden_state"],
            inputs=[pb_utils.Tensor("input_ids", ids), pb_utils.Tensor("attention_mask", mask)],
        )
        response = await request.async_exec()
        if response.has_error():
            raise RuntimeError(f"{model_name}: {response.error().message()}")
        hidden = pb_utils.get_output_tensor_by_name(response, "last_hidden_state").as_numpy()
        return pool(hidden, mask, normalize)

    pooled = await asyncio.gather(*(run(b) for b in batches))
    out = np.empty((len(texts), pooled[0].shape[1]), np.float32)
    for indices, vectors in zip(batches, pooled):
        out[indices] = vectors
    return out
