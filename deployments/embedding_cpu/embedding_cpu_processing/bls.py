"""Embedding texts through an ONNX transformer, in few large length-bucketed runs.

Used by the Python models that tokenize on the server: every text of a dynamic batch (or
every chunk of every file in it) is tokenized together, sorted by length and cut into
length buckets of at most ``max_rows`` rows and ``max_tokens`` padded tokens (rows x longest:
``plan_batches``), so concurrent requests of different token lengths share runs without padding
short texts to the longest, and no run holds more activations than the token budget allows. Each bucket
runs either through BLS on the ONNX model (``await async_exec``, all buckets in flight
together: ``embed_texts``) or on an onnxruntime session in the calling process
(``embed_texts_local``); the hidden states are then pooled (the model folder's mode, + normalised)
and put back in order. ``encode_in_buckets`` does the same bucketing for a sentence-transformers model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np

from embedding_cpu_processing.text_embedding import pool, tokenize

#: A bucket is closed when padding would make it this much larger than its real tokens.
MAX_PADDING_RATIO = 1.5


def plan_batches(
    lengths: list[int],
    max_rows: int,
    max_tokens: int | None = None,
    max_padding_ratio: float = MAX_PADDING_RATIO,
) -> list[list[int]]:
    """Indices grouped into batches of similar length: sorted by length, a batch is closed at
    ``max_rows`` rows, when its padded tokens (rows x the next length) would pass ``max_tokens``
    (a text longer than that runs alone), or when padding every row to the next length would cost
    more than ``max_padding_ratio`` times the batch's real tokens."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    batches: list[list[int]] = []
    current: list[int] = []
    tokens = 0
    for index in order:
        length = max(int(lengths[index]), 1)
        if current and (
            len(current) >= max_rows
            or (max_tokens and (len(current) + 1) * length > max_tokens)
            or (len(current) + 1) * length > max_padding_ratio * (tokens + length)
        ):
            batches.append(current)
            current, tokens = [], 0
        current.append(index)
        tokens += length
    if current:
        batches.append(current)
    return batches


def _buckets(texts: list[str], max_rows: int, max_tokens: int | None, model_dir: str | None, max_length: int | None):
    """(token count per text, [(indices, ids, mask) per length bucket])."""
    tokens = tokenize(texts, model_dir, max_length)
    lengths = tokens["attention_mask"].sum(axis=1)
    buckets = []
    for indices in plan_batches(lengths.tolist(), max_rows, max_tokens):
        width = int(lengths[indices].max())
        buckets.append(
            (
                indices,
                np.ascontiguousarray(tokens["input_ids"][indices, :width]),
                np.ascontiguousarray(tokens["attention_mask"][indices, :width]),
            )
        )
    return lengths, buckets


def _assemble(count: int, parts: list[tuple[list[int], np.ndarray]]) -> np.ndarray:
    out = np.empty((count, parts[0][1].shape[1]), np.float32)
    for indices, vectors in parts:
        out[indices] = vectors
    return out


async def embed_texts(
    pb_utils: Any,
    model_name: str,
    texts: list[str],
    *,
    max_rows: int,
    normalize: bool,
    max_tokens: int | None = None,
    pooling: str = "mean",
    model_dir: str | None = None,
    max_length: int | None = None,
    token_counts: bool = False,
):
    """Sentence embeddings of ``texts`` (FP32 ``[len(texts), dim]``) from ``model_name`` (BLS), in
    buckets of at most ``max_rows`` rows and ``max_tokens`` padded tokens; with ``token_counts``, (embeddings, non-padding tokens per text after truncation)."""
    if not texts:
        empty = np.zeros((0, 0), np.float32)
        return (empty, np.zeros(0, np.int64)) if token_counts else empty

    async def run(indices: list[int], ids: np.ndarray, mask: np.ndarray):
        request = pb_utils.InferenceRequest(
            model_name=model_name,
            requested_output_names=["last_hidden_state"],
            inputs=[pb_utils.Tensor("input_ids", ids), pb_utils.Tensor("attention_mask", mask)],
        )
        response = await request.async_exec()
        if response.has_error():
            raise RuntimeError(f"{model_name}: {response.error().message()}")
        hidden = pb_utils.get_output_tensor_by_name(response, "last_hidden_state").as_numpy()
        return indices, pool(hidden, mask, normalize, pooling)

    lengths, buckets = _buckets(texts, max_rows, max_tokens, model_dir, max_length)
    parts = await asyncio.gather(*(run(*bucket) for bucket in buckets))
    vectors = _assemble(len(texts), parts)
    return (vectors, lengths) if token_counts else vectors


def embed_texts_local(
    run: Callable,
    texts: list[str],
    *,
    max_rows: int,
    normalize: bool,
    max_tokens: int | None = None,
    pooling: str = "mean",
    model_dir: str | None = None,
    max_length: int | None = None,
    token_counts: bool = False,
):
    """The same as ``embed_texts`` with ``run`` = an onnxruntime ``InferenceSession.run`` in this process."""
    if not texts:
        empty = np.zeros((0, 0), np.float32)
        return (empty, np.zeros(0, np.int64)) if token_counts else empty
    parts = []
    lengths, buckets = _buckets(texts, max_rows, max_tokens, model_dir, max_length)
    for indices, ids, mask in buckets:
        hidden = run(["last_hidden_state"], {"input_ids": ids, "attention_mask": mask})[0]
        parts.append((indices, pool(hidden, mask, normalize, pooling)))
    vectors = _assemble(len(texts), parts)
    return (vectors, lengths) if token_counts else vectors


def openvino_run(path, threads: int, precision: str = ""):
    """``(run(names, feed), precision that runs)``: the ONNX file ``path`` compiled by OpenVINO for
    the CPU, ``threads`` threads, one stream, the latency hint and ``precision`` (f32 / bf16; empty:
    the engine's default, BF16 on a CPU with AVX512-BF16 or AMX). ``run`` is what
    ``embed_texts_local`` takes."""
    import openvino as ov

    properties = {"INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY"}
    if precision:
        properties["INFERENCE_PRECISION_HINT"] = precision
    compiled = ov.Core().compile_model(str(path), "CPU", properties)
    request = compiled.create_infer_request()

    def run(names, feed):
        result = request.infer(feed)
        return [result[compiled.output(name)] for name in names]

    return run, compiled.get_property("INFERENCE_PRECISION_HINT").to_string()


def encode_in_buckets(model: Any, texts: list[str], *, max_rows: int, max_tokens: int | None, model_dir: str | None):
    """sentence-transformers ``model.encode`` of ``texts`` in ``plan_batches`` buckets (one encode
    call each, rows x longest within ``max_tokens``), vectors back in text order."""
    lengths = tokenize(texts, model_dir, model.max_seq_length)["attention_mask"].sum(axis=1)
    parts = [
        (indices, model.encode([texts[i] for i in indices], batch_size=len(indices), convert_to_numpy=True))
        for indices in plan_batches(lengths.tolist(), max_rows, max_tokens)
    ]
    return _assemble(len(texts), parts)
