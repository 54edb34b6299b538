"""OpenAI-compatible embeddings on the gate's public HTTP port: ``POST /v1/embeddings``, ``GET /v1/models``.

Answered from the deployment's own models as the gate policy's ``openai`` mapping names them
(``policy.OpenAIModel``: a ``text`` model, a ``tokenizer``, a ``tokens`` model with its pooling);
requests parsed as OpenAI documents them, errors in OpenAI's error object. What is accepted and
refused, and where ``usage`` comes from: docs/harness.md, "OpenAI-compatible embeddings".
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Literal

import aiohttp
import numpy as np
import orjson  # float32 vectors straight to JSON (shortest float32 digits), ~20x the stdlib's speed
from aiohttp import web
from pydantic import BaseModel, ConfigDict, PositiveInt, ValidationError
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInput
from tritonclient.utils import serialize_byte_tensor, triton_to_np_dtype

from triton_gate import LOGGER
from triton_gate.body import read_limited
from triton_gate.policy import OpenAIMapping, OpenAIModel, OpenAITokenizer, OpenAITokens
from triton_gate.validate import GateError, parse_json, triton_datatype

#: OpenAI's bound on the number of inputs of one embeddings request.
MAX_INPUTS = 2048
ERROR_TYPES = {401: "invalid_request_error", 404: "invalid_request_error", 503: "server_error"}
ERROR_CODES = {401: "invalid_api_key", 404: "model_not_found", 413: "request_too_large", 503: "service_unavailable"}
CREATED = int(time.time())


def error_body(status: int, message: str, param: str | None = None) -> dict:
    """OpenAI's error object."""
    kind = ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": ERROR_CODES.get(status)}}


#: The message of a request field of the wrong type (OpenAI's wording: what the field must be).
FIELD_ERRORS = {
    "input": "'input' must be a string, a list of strings, a list of ints or a list of lists of ints",
    "model": "'model' must be a string",
    "encoding_format": "'encoding_format' must be 'float' or 'base64'",
    "dimensions": "'dimensions' must be a positive integer",
    "user": "'user' must be a string",
}


class EmbeddingsRequest(BaseModel):
    """OpenAI's embeddings request; ``user`` is accepted and ignored, any other field refused."""

    model_config = ConfigDict(extra="forbid", strict=True)

    input: str | list[str] | list[int] | list[list[int]]
    model: str | None = None
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: PositiveInt | None = None
    user: str | None = None


def parse_request(body: bytes, mapping: OpenAIMapping) -> dict:
    """The checked fields of an embeddings request (``GateError`` 400/404); ``kind`` is ``"text"``
    (items: strings) or ``"tokens"`` (items: lists of token ids)."""
    try:
        request = EmbeddingsRequest.model_validate(parse_json(body))
    except ValidationError as exc:
        error = min(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")  # as OpenAI: unknown first
        field = str(error["loc"][0]) if error["loc"] else None
        if error["type"] == "extra_forbidden":
            raise GateError(400, f"Unrecognized request argument supplied: {field}", field) from None
        if error["type"] == "missing":
            raise GateError(400, f"'{field}' is a required property", field) from None
        if field is None:
            raise GateError(400, "the request body must be a JSON object") from None
        sent = "" if field == "input" else f", not {json.dumps(error['input'])}"
        raise GateError(400, FIELD_ERRORS[field] + sent, field) from None
    name = request.model or mapping.default
    if name not in mapping.models:
        raise GateError(404, f"The model '{name}' does not exist; this server has {sorted(mapping.models)}", "model")
    items = request.input
    if isinstance(items, str) or (items and isinstance(items[0], int)):
        items = [items]  # one text, or one text as token ids
    if not items:
        raise GateError(400, "'input' is an empty list: give at least one text", "input")
    if len(items) > MAX_INPUTS:
        raise GateError(400, f"'input' has {len(items)} items, more than the {MAX_INPUTS} allowed", "input")
    for i, item in enumerate(items):
        if not item:
            what = "string" if isinstance(item, str) else "list of token ids"
            raise GateError(400, f"'input[{i}]' is an empty {what}", "input")
        if isinstance(item, str) and not item.isascii():
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise GateError(400, f"'input[{i}]' holds an unpaired UTF-16 surrogate escape", "input") from None
    kind = "text" if isinstance(items[0], str) else "tokens"
    encoding = request.encoding_format or "float"
    return {"model": name, "kind": kind, "items": items, "encoding": encoding, "dimensions": request.dimensions}


def infer_body(inputs: list[tuple[str, str, list[int], bytes]], outputs: list[str]) -> tuple[bytes, int]:
    """A binary-data inference request: (body, its JSON header's length)."""
    header = {
        "inputs": [
            {"name": name, "datatype": datatype, "shape": shape, "parameters": {"binary_data_size": len(data)}}
            for name, datatype, shape, data in inputs
        ],
        "outputs": [{"name": name, "parameters": {"binary_data": True}} for name in outputs],
    }
    text = json.dumps(header, separators=(",", ":")).encode()
    return text + b"".join(data for *_, data in inputs), len(text)


def parse_infer_response(payload: bytes, header_length: int | None) -> dict[str, np.ndarray]:
    """The outputs of a (binary-data) inference response as arrays."""
    header = json.loads(payload[:header_length] if header_length is not None else payload)
    offset = header_length or len(payload)
    out = {}
    for item in header.get("outputs") or []:
        dtype = np.dtype(triton_to_np_dtype(item["datatype"]))
        size = (item.get("parameters") or {}).get("binary_data_size")
        if size is None:
            array = np.asarray(item["data"], dtype=dtype)
        else:
            array = np.frombuffer(payload, dtype=dtype, count=size // dtype.itemsize, offset=offset)
            offset += size
        out[item["name"]] = array.reshape(item["shape"])
    return out


def _last_dim(config: ModelConfig, output: str) -> int | None:
    for spec in config.output:
        if spec.name == output:
            return spec.dims[-1] if spec.dims and spec.dims[-1] > 0 else None
    return None


def _input_spec(config: ModelConfig, name: str) -> ModelInput:
    for spec in config.input:
        if spec.name == name:
            return spec
    raise GateError(503, f"model '{config.name}' has no input '{name}' (the deployment's [openai] table)")


def model_entry(name: str) -> dict:
    return {"id": name, "object": "model", "created": CREATED, "owned_by": "triton"}


def dump(answer: dict) -> bytes:
    """The response's JSON; ``float`` embeddings are float32 arrays (orjson writes each as the
    shortest digits that read back as the same float32)."""
    return orjson.dumps(answer, option=orjson.OPT_SERIALIZE_NUMPY)


class OpenAIFront:
    """The /v1 handlers; a part of ``triton_gate.server.Gate`` (its session, configs, limits)."""

    @property
    def openai(self) -> OpenAIMapping | None:
        return self.policy.openai

    def openai_limit(self) -> int:
        """Body limit of ``/v1/embeddings``: the largest of the mapped models' (else the gate's default)."""
        limits = self.policy.max_body_bytes
        models = {getattr(spec, part).model for spec in self.openai.models.values() for part in spec.entry_parts()}
        found = [limits[model] for model in models if model in limits]
        return max(found) if found else self.cfg.max_body_bytes

    async def handle_openai(self, request, path: str):
        """The /v1 routes; a refusal is raised as ``GateError`` (answered in OpenAI's error shape by ``HttpFront``)."""
        if self.openai is None:
            raise GateError(404, "this server maps no model to the OpenAI API (the deployment has no [openai] table)")
        if path == "/v1/models":
            if request.method != "GET":
                raise GateError(405, f"{request.method} {path}: use GET")
            return web.json_response({"object": "list", "data": [model_entry(name) for name in self.openai.models]})
        if path.startswith("/v1/models/"):
            name = path[len("/v1/models/") :]
            if name not in self.openai.models:
                raise GateError(404, f"The model '{name}' does not exist", "model")
            return web.json_response(model_entry(name))
        if path != "/v1/embeddings":
            raise GateError(404, f"{path}: this server answers /v1/embeddings and /v1/models only")
        if request.method != "POST":
            raise GateError(405, f"{request.method} {path}: use POST")
        if self.draining:
            raise GateError(503, "server is shutting down")
        limit = self.openai_limit()
        async with self.admission.admit(path, limit, limit):
            parsed = parse_request(await read_limited(request, limit, path), self.openai)
            self.in_flight += 1
            try:
                answer = await self.embeddings(parsed)
            except GateError:
                raise
            except Exception as exc:  # a bug here: logged with its traceback, answered in OpenAI's shape
                LOGGER.exception(f"/v1 handler failed: {type(exc).__name__}")
                return web.json_response(error_body(500, f"internal error: {type(exc).__name__}"), status=500)
            finally:
                self.in_flight -= 1
        return web.Response(body=dump(answer), content_type="application/json")

    # -- upstream ---------------------------------------------------------------------------
    async def _config(self, model: str) -> ModelConfig:
        """A mapped model's config (it may be internal); 503 where it is not loaded."""
        return await self.check_inference(model, admin=True, missing_status=503)

    async def _infer(self, model: str, inputs: list, outputs: list[str]) -> dict[str, np.ndarray]:
        body, header_length = infer_body(inputs, outputs)
        url = f"{self.upstream_http}/v2/models/{model}/infer"
        headers = {
            "Inference-Header-Content-Length": str(header_length),
            "Content-Type": "application/octet-stream",
            "Accept-Encoding": "identity",  # the session does not inflate; Triton would gzip
        }
        try:
            async with self.session.post(url, data=body, headers=headers) as resp:
                payload = await resp.read()
                if resp.status != 200:
                    try:
                        message = json.loads(payload).get("error") or payload.decode(errors="replace")
                    except (ValueError, AttributeError):
                        message = payload[:500].decode(errors="replace")
                    # 404: a mapped model that is not loaded
                    status = {400: 400, 404: 503, 413: 413, 503: 503}.get(resp.status, 500)
                    raise GateError(status, f"model '{model}': {message}", "input" if status == 400 else None)
                length = resp.headers.get("Inference-Header-Content-Length")
                return parse_infer_response(payload, int(length) if length else None)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:  # upstream gone (stopping, crashed)
            raise GateError(503, f"tritonserver unavailable: {type(exc).__name__}") from None

    def _text_input(self, config: ModelConfig, name: str, texts: list[str]) -> tuple:
        spec = _input_spec(config, name)
        data = serialize_byte_tensor(np.array(texts, dtype=object)).item()  # parse_request refused surrogates
        return (name, triton_datatype(spec.data_type), [len(texts)] + [1] * len(spec.dims), data)

    async def _tokenize(self, spec: OpenAITokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(ids, mask) of ``texts`` from the tokenizer model (mask: ids != pad where it has none)."""
        config = await self._config(spec.model)
        outputs = [spec.ids] + ([spec.mask] if spec.mask else [])
        out = await self._infer(spec.model, [self._text_input(config, spec.input, texts)], outputs)
        ids = out[spec.ids]
        mask = out[spec.mask] if spec.mask else (ids != (spec.pad_id or 0)).astype(np.int64)
        return ids, mask

    async def _tokens_model(self, spec: OpenAITokens, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        config = await self._config(spec.model)
        ids_spec = _input_spec(config, spec.ids)
        inputs = [(spec.ids, triton_datatype(ids_spec.data_type), list(ids.shape), ids.astype("<i8").tobytes())]
        if spec.mask:
            inputs.append((spec.mask, "INT64", list(mask.shape), mask.astype("<i8").tobytes()))
        hidden = (await self._infer(spec.model, inputs, [spec.output]))[spec.output]
        if spec.pooling == "mean" and hidden.ndim == 3:
            weights = mask[..., None].astype(np.float32)
            vectors = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        elif spec.pooling == "cls" and hidden.ndim == 3:
            vectors = hidden[:, 0]
        elif spec.pooling == "lasttoken" and hidden.ndim == 3:  # ids are padded on the right
            vectors = hidden[np.arange(len(hidden)), np.clip(mask.sum(axis=1) - 1, 0, None)]
        else:
            vectors = hidden.reshape(hidden.shape[0], -1)
        if spec.normalize:
            vectors = vectors / np.clip(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12, None)
        return vectors.astype(np.float32)

    async def _pad_ids(self, spec: OpenAITokens, rows: list[list[int]], offset: int) -> tuple[np.ndarray, np.ndarray]:
        """Client token ids as a padded INT64 batch and its mask (400 for ids the model cannot take)."""
        config = await self._config(spec.model)
        dims = list(_input_spec(config, spec.ids).dims)
        fixed = dims[-1] if dims and dims[-1] > 0 else None
        bound = (self.policy.max_dims.get(spec.model, {}).get(spec.ids) or [None])[-1]
        longest = max(len(r) for r in rows)
        limit = fixed or bound
        if limit and longest > limit:
            i = next(i for i, r in enumerate(rows) if len(r) > limit)
            raise GateError(
                400, f"'input[{offset + i}]' has {len(rows[i])} tokens, more than the model's {limit}", "input"
            )
        vocab = spec.vocab_size or 1 << 63  # else any INT64 id
        for i, row in enumerate(rows):
            if min(row) < 0 or max(row) >= vocab:
                raise GateError(400, f"'input[{offset + i}]' holds a token id outside 0..{vocab - 1}", "input")
        width = fixed or longest
        ids = np.full((len(rows), width), spec.pad_id or 0, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        return ids, mask

    async def _chunk(self, spec: OpenAIModel, kind: str, items: list, offset: int) -> tuple[np.ndarray, int]:
        """(vectors, prompt tokens) of one Triton-sized chunk of inputs."""
        if kind == "tokens":
            ids, mask = await self._pad_ids(spec.tokens, items, offset)
            return await self._tokens_model(spec.tokens, ids, mask), sum(len(r) for r in items)
        tokenizer = spec.tokenizer
        if spec.text is not None:
            text = spec.text
            config = await self._config(text.model)
            counted = text.tokens_output
            outputs = [text.output] + ([counted] if counted else [])
            run = self._infer(text.model, [self._text_input(config, text.input, items)], outputs)
            if counted:
                out = await run
                tokens = int(out[counted].astype(np.int64).sum())
            elif tokenizer:
                out, (_, mask) = await asyncio.gather(run, self._tokenize(tokenizer, items))
                tokens = int(mask.sum())
            else:
                out, tokens = await run, 0
            return out[text.output].reshape(len(items), -1).astype(np.float32, copy=False), tokens
        ids, mask = await self._tokenize(tokenizer, items)
        return await self._tokens_model(spec.tokens, ids, mask), int(mask.sum())

    async def _batch_size(self, spec: OpenAIModel, kind: str) -> int:
        if kind == "tokens":
            parts = [spec.tokens]
        elif spec.text is not None:
            parts = [spec.text] if spec.text.tokens_output else [spec.text, spec.tokenizer]
        else:
            parts = [spec.tokenizer, spec.tokens]
        sizes = [(await self._config(part.model)).max_batch_size or 1 for part in parts if part is not None]
        return min(sizes)

    async def _dimension(self, spec: OpenAIModel, kind: str) -> int | None:
        part = spec.text if kind == "text" and spec.text is not None else spec.tokens
        return _last_dim(await self._config(part.model), part.output)

    async def embeddings(self, parsed: dict) -> dict:
        name, kind, items = parsed["model"], parsed["kind"], parsed["items"]
        spec = self.openai.models[name]
        if kind == "tokens" and spec.tokens is None:
            raise GateError(400, f"model '{name}' takes text only: it maps no token-in model for token ids", "input")
        if kind == "text" and spec.text is None and not (spec.tokenizer and spec.tokens):
            raise GateError(400, f"model '{name}' takes token ids only: it maps no text-in model", "input")
        dimension = await self._dimension(spec, kind)
        if parsed["dimensions"] is not None and parsed["dimensions"] != dimension:
            raise GateError(
                400,
                f"model '{name}' gives {dimension}-dimensional vectors; 'dimensions' = {parsed['dimensions']} "
                "is not supported (no shortening)",
                "dimensions",
            )
        size = await self._batch_size(spec, kind)
        chunks = [items[i : i + size] for i in range(0, len(items), size)]
        results = await asyncio.gather(*(self._chunk(spec, kind, c, i * size) for i, c in enumerate(chunks)))
        data, index, tokens = [], 0, 0
        as_base64 = parsed["encoding"] == "base64"
        for vectors, count in results:
            tokens += count
            for row in vectors:
                embedding = base64.b64encode(row.astype("<f4").tobytes()).decode() if as_base64 else row
                data.append({"object": "embedding", "index": index, "embedding": embedding})
                index += 1
        return {
            "object": "list",
            "data": data,
            "model": name,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
