"""HTTP side of the gate: which paths are restricted, inference, internal or loads, and the
aiohttp handlers that check a request before it is forwarded to tritonserver's private port.

``HttpFront`` is a part of ``triton_gate.server.Gate``: it uses the state and upstream
calls the gate sets up (admin token, upstream URLs and session, ``broken`` models, in-flight count).
"""

from __future__ import annotations

import asyncio
import re
from urllib.parse import unquote

from yarl import URL

from triton_gate.auth import PROBE_PATHS, bearer_ok
from triton_gate.openai_api import error_body as openai_error
from triton_gate.validate import GateError, body_limit, parse_json, validate_infer

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "host",
}
#: Request headers not forwarded: aiohttp has already inflated a gzip/deflate request body (the
#: limits above count inflated bytes), so the body goes on as plain bytes; the header length is
#: the gate's own, for the header it re-serialized.
REQUEST_ONLY_DROP = HOP_BY_HOP | {"content-encoding", "inference-header-content-length"}
#: Request encodings the gate inflates (Triton's own HTTP server accepts these two).
CONTENT_ENCODINGS = {"identity", "gzip", "deflate"}
#: Headers that frame the body: a second copy could be read by the gate and Triton differently.
FRAMING_HEADERS = ("Content-Length", "Transfer-Encoding", "Content-Encoding", "Inference-Header-Content-Length")
INFER_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?/infer$")
GENERATE_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?/generate(?:_stream)?$")
#: Body limit of requests other than inference (metadata, statistics, ...; admin: repository loads).
OTHER_BODY_LIMIT, ADMIN_BODY_LIMIT = 1 << 20, 256 << 20
READY_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/[^/]+)?/ready$")
LOAD_PATH = re.compile(r"^/v2/repository/models/([^/]+)/(load|unload)$")


def restricted_api(path: str) -> str | None:
    """Which Triton restricted-API group an HTTP path belongs to (None: open)."""
    if path.startswith(("/v2/systemsharedmemory", "/v2/cudasharedmemory")):
        return "shared-memory"
    if path.startswith("/v2/trace") or re.match(r"^/v2/models/[^/]+(/versions/[^/]+)?/trace", path):
        return "trace"
    if path.startswith("/v2/logging"):
        return "logging"
    if path.startswith("/v2/repository"):
        return "model-repository"
    return None


def check_json_body(body: bytes) -> None:
    """A JSON body (of a call other than inference) parsed as strictly as an inference header:
    no key twice in one object, not nested deeper than the standard parser allows (Triton's
    recursive parser overflows its stack far above that). Other bodies pass unchanged."""
    if body.lstrip()[:1] in (b"{", b"["):
        parse_json(body)


def check_framing(headers) -> None:
    """One copy of each framing header, and a body encoding the gate can inflate."""
    for name in FRAMING_HEADERS:
        if len(headers.getall(name, ())) > 1:
            raise GateError(400, f"header {name} given more than once")
    encoding = headers.get("Content-Encoding")
    if encoding is not None and encoding.strip().lower() not in CONTENT_ENCODINGS:
        raise GateError(415, f"Content-Encoding {encoding!r} is not supported: send gzip, deflate or identity")


async def read_limited(request, limit: int, what: str) -> bytes:
    """The request body, refused with 413 as soon as it is known to be over ``limit``."""
    if request.content_length is not None and request.content_length > limit:
        raise GateError(413, f"request body of {request.content_length} bytes is over the {limit}-byte limit of {what}")
    from aiohttp import http_exceptions, web_protocol

    chunks, size = [], 0
    try:
        async for chunk in request.content.iter_chunked(1 << 20):
            size += len(chunk)
            if size > limit:
                raise GateError(413, f"request body over the {limit}-byte limit of {what}")
            chunks.append(chunk)
    except (http_exceptions.HttpProcessingError, web_protocol.RequestPayloadError) as exc:
        # e.g. a gzip body that does not inflate
        raise GateError(400, f"request body cannot be read: {str(exc).strip() or type(exc).__name__}") from None
    return b"".join(chunks)


class HttpFront:
    """The gate's aiohttp handlers (public HTTP port and metrics port)."""

    def is_admin(self, headers) -> bool:
        return headers.get(self.admin_header) == self.admin_token

    def authorized(self, headers, path: str) -> bool:
        """No API key set, a health probe, the admin header, or ``Authorization: Bearer <key>`` (``auth``)."""
        if not self.api_keys or path in PROBE_PATHS or self.is_admin(headers):
            return True
        return bearer_ok(headers.get("Authorization"), self.api_keys)

    async def handle(self, request):
        from aiohttp import web

        # Match what Triton matches: the raw path (Triton decodes a model name itself, the same
        # way for the config lookup below as for the request).
        raw = request.raw_path.split("?", 1)[0]
        # Classified as decoded too, so that an escaped path Triton would route as inference
        # (``/v2/models/m/inf%65r``) is checked as inference.
        path = unquote(raw) if "%" in raw else raw
        openai = path == "/v1" or path.startswith("/v1/")
        try:
            if not self.authorized(request.headers, path):
                raise GateError(401, "a valid API key is required: send 'Authorization: Bearer <key>'")
            check_framing(request.headers)
        except GateError as exc:
            body = openai_error(exc.status, exc.message) if openai else {"error": exc.message}
            headers = {"WWW-Authenticate": 'Bearer realm="triton"'} if exc.status == 401 else None
            return web.json_response(body, status=exc.status, headers=headers)
        if openai:
            return await self.handle_openai(request, path, read_limited)
        try:
            admin = self.is_admin(request.headers)
            self.check_restricted(restricted_api(path), bool(LOAD_PATH.match(path)), admin, self.admin_header)
            if path == "/v2/health/ready":
                return await self.readiness_response()
            ready = READY_PATH.match(path)
            if ready and ready.group(1) in self.broken:
                return web.Response(status=400)
            infer = INFER_PATH.match(path)
            generate = GENERATE_PATH.match(path)
            body, header_length = None, None
            if infer:
                config = await self.check_inference(infer.group(1), admin)
                body, header_length = await self.checked_infer_body(request, infer.group(1), config)
            else:
                if generate:
                    await self.check_inference(generate.group(1), admin)
                limit = ADMIN_BODY_LIMIT if admin else OTHER_BODY_LIMIT
                body = await read_limited(request, limit, "this endpoint") if request.can_read_body else None
                if body:
                    check_json_body(body)
            load = LOAD_PATH.match(path)
            if load:
                model = load.group(1)
                self.changing[model] = float("inf")
                old = (await asyncio.get_running_loop().run_in_executor(None, self.stubs)).get(model, set())
            try:
                return await self.forward(request, body, admin, header_length)
            finally:
                if load:
                    self.forget_configs()
                    asyncio.create_task(self.settle(model, old))
        except GateError as exc:
            return web.json_response({"error": exc.message}, status=exc.status)

    async def checked_infer_body(self, request, model: str, config: dict) -> tuple[bytes, int | None]:
        """The body to forward (validated header re-serialized + binary data) and its header length."""
        limit = body_limit(config, self.default_max_body, self.policy.max_body_bytes.get(model))
        body = await read_limited(request, limit, f"model '{model}'")
        raw_length = request.headers.get("Inference-Header-Content-Length")
        if raw_length is not None and not re.fullmatch(r"[0-9]{1,12}", raw_length.strip()):
            raise GateError(400, f"Inference-Header-Content-Length {raw_length!r} is not a byte count")
        header_length = int(raw_length) if raw_length is not None else None
        return validate_infer(model, config, body, header_length, self.policy.max_dims.get(model))

    async def forward(self, request, body: bytes | None, admin: bool, header_length: int | None = None):
        from aiohttp import web

        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() not in REQUEST_ONLY_DROP and k.lower() != self.admin_header
        }
        if admin:
            headers.update(self.internal_headers())
        if header_length is not None:
            headers["Inference-Header-Content-Length"] = str(header_length)
        self.in_flight += 1
        try:
            url = URL(self.upstream_http + request.raw_path, encoded=True)
            async with self.session.request(request.method, url, data=body, headers=headers) as resp:
                payload = await resp.read()
                out_headers = {k: v for k, v in resp.headers.items() if k.lower() not in HOP_BY_HOP}
                return web.Response(status=resp.status, body=payload, headers=out_headers)
        except Exception as exc:  # noqa: BLE001 - upstream gone (stopping, crashed)
            return web.json_response({"error": f"tritonserver unavailable: {type(exc).__name__}"}, status=503)
        finally:
            self.in_flight -= 1

    async def readiness_response(self):
        from aiohttp import web

        reasons = []
        if self.draining:
            reasons.append("shutting down")
        if self.broken:
            reasons.append(f"stub process died: {sorted(self.broken)} (reloading)")
        if not reasons and not await self.upstream_ready():
            reasons.append("tritonserver not ready")
        if reasons:
            return web.json_response({"error": "; ".join(reasons)}, status=503)
        return web.Response(status=200)

    async def handle_metrics(self, request):
        from aiohttp import web

        async with self.session.get(self.upstream_metrics + request.path_qs) as resp:
            return web.Response(
                status=resp.status, body=await resp.read(), content_type=resp.content_type or "text/plain"
            )
