"""The sentences and the pre-built request bodies every server of a side-by-side run gets.

Two workloads: ``uniform``, the deployment's short sentences (``[peers] embedding`` pieces'
``sentences``), and ``mixed``, its mixed-length texts (the pieces' ``mixed``: short queries and long
passages in fixed proportions, seeded), one text a request by default.
"""

from __future__ import annotations

import json

UNIFORM, MIXED = "uniform", "mixed"
#: Bodies per workload: request i carries sentences starting at offset i (mixed: at i x batch, so
#: that the bodies hold the mix's proportions).
BODIES = {UNIFORM: 8, MIXED: 64}


def sentences(pool: list[str], count: int, offset: int = 0) -> list[str]:
    """``count`` of the deployment's sentences (its ``[peers] embedding`` pieces' ``sentences``) from ``offset``."""
    return [pool[(offset + i) % len(pool)] for i in range(count)]


def triton_text_body(texts: list[str], text_input: str, binary_output: str | None = None) -> bytes:
    """KServe v2 JSON: ``text_input`` BYTES ``[n, 1]`` (the model's one text input,
    ``harness_lab.text_models``); the vectors come back as JSON numbers, or only ``binary_output``
    as binary data after the JSON header."""
    body = {"inputs": [{"name": text_input, "shape": [len(texts), 1], "datatype": "BYTES", "data": texts}]}
    if binary_output:
        body["outputs"] = [{"name": binary_output, "parameters": {"binary_data": True}}]
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
    ``/v1/embeddings`` and infinity's ``/embeddings`` take alike."""
    body = {"input": texts, "model": model} | ({"encoding_format": encoding_format} if encoding_format else {})
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def texts_of(pieces, workload: str, batch: int) -> list[list[str]]:
    """The texts of each body of ``workload`` at ``batch`` texts a request."""
    if workload == MIXED:
        return [sentences(pieces.mixed, batch, i * batch) for i in range(BODIES[MIXED])]
    return [sentences(pieces.sentences, batch, offset) for offset in range(BODIES[UNIFORM])]


def bodies(make, pieces, workload: str, batch: int) -> list[bytes]:
    return [make(texts) for texts in texts_of(pieces, workload, batch)]
