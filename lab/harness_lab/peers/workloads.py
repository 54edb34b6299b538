"""The sentences and the pre-built request bodies every server of a side-by-side run gets."""

from __future__ import annotations

import json

#: Bodies per workload: request i carries sentences starting at offset i.
BODIES = 8


def sentences(pool: list[str], count: int, offset: int = 0) -> list[str]:
    """``count`` of the deployment's sentences (its ``[peers] embedding`` pieces' ``sentences``) from ``offset``."""
    return [pool[(offset + i) % len(pool)] for i in range(count)]


def triton_text_body(texts: list[str], text_input: str) -> bytes:
    """KServe v2 JSON: ``text_input`` BYTES ``[n, 1]`` (the model's one text input,
    ``harness_lab.text_models``); the vectors come back as JSON numbers."""
    body = {"inputs": [{"name": text_input, "shape": [len(texts), 1], "datatype": "BYTES", "data": texts}]}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def triton_tokens_body(texts: list[str], tokenize) -> bytes:
    """KServe v2 JSON of the client-tokenized contract (``input_ids``, ``attention_mask``, made by
    ``tokenize(texts)``); ``last_hidden_state`` asked for as binary data (a JSON float list of it
    would cost more than the model)."""
    tokens = tokenize(texts)
    shape = list(tokens["input_ids"].shape)
    body = {
        "inputs": [
            {"name": name, "shape": shape, "datatype": "INT64", "data": tokens[name].ravel().tolist()}
            for name in ("input_ids", "attention_mask")
        ],
        "outputs": [{"name": "last_hidden_state", "parameters": {"binary_data": True}}],
    }
    return json.dumps(body, separators=(",", ":")).encode()


def openai_body(texts: list[str], model: str, encoding_format: str | None = None) -> bytes:
    """OpenAI's embeddings body, ``{"input": [...], "model": ...}`` (+ ``encoding_format``): what our
    ``/v1/embeddings``, infinity's ``/embeddings`` and the naive server take alike."""
    body = {"input": texts, "model": model} | ({"encoding_format": encoding_format} if encoding_format else {})
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def bodies(make, pool: list[str], batch: int) -> list[bytes]:
    return [make(sentences(pool, batch, offset)) for offset in range(BODIES)]
