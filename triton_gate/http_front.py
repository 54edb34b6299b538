"""HTTP side of the gate: which paths are inference, internal or loads, and the
aiohttp handlers that check a request before it is forwarded to tritonserver's private port.

``HttpFront`` is a part of ``triton_gate.server.Gate``: it uses the state and upstream
calls the gate sets up (admin token, upstream URLs and session, ``broken`` models, in-flight count).
"""

from __future__ import annotations

import asyncio
import re
from functools import partial
from urllib.parse import unquote

from aiohttp import web
from yarl import URL

from triton_gate import log
from triton_gate.auth import PROBE_PATHS, bearer_ok
from triton_gate.body import BodyRefused, read_limited
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
#: Request headers not forwarded: the gate has inflated a gzip/deflate request body (``body``: the
#: limits count inflated bytes), so the body goes on as plain bytes; the header length is
#: the gate's own, for the header it re-serialized.
REQUEST_ONLY_DROP = HOP_BY_HOP | {"content-encoding", "inference-header-content-length"}
#: Request encodings the gate inflates (Triton's own HTTP server accepts these two).
CONTENT_ENCODINGS = {"identity", "gzip", "deflate"}
#: Headers that frame the body: a second copy could be read by the gate and Triton differently.
FRAMING_HEADERS = ("Content-Length", "Transfer-Encoding", "Content-Encoding", "Inference-Header-Content-Length")
INFER_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?/infer$")
GENERATE_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?/generate(?:_stream)?$")
#: Bodies at least this large are checked off the event loop (health probes keep moving meanwhile).
OFF_LOOP_BYTES = 1 << 20
#: Seconds a client is told to wait after a 503 (``Retry-After``).
RETRY_AFTER_S = 1
#: Body limit of requests other than inference (metadata, statistics, ...; admin: repository loads).
OTHER_BODY_LIMIT, ADMIN_BODY_LIMIT = 1 << 20, 256 << 20
READY_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/[^/]+)?/ready$")
LOAD_PATH = re.compile(r"^/v2/repository/models/([^/]+)/(load|unload)$")


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


class HttpFront:
    """The gate's aiohttp handlers (public HTTP port and metrics port)."""

    def is_admin(self, headers) -> bool:
        return headers.get(self.cfg.admin_header) == self.cfg.admin_token

    def authorized(self, headers, path: str) -> bool:
        """No API key set, a health probe, the admin header, or ``Authorization: Bearer <key>`` (``auth``);
        ``headers``: HTTP headers, or a gRPC call's metadata (lower-case keys)."""
        if not self.cfg.api_keys or path in PROBE_PATHS or self.is_admin(headers):
            return True
        return bearer_ok(headers.get("authorization"), self.cfg.api_keys)

    async def handle(self, request):
        """Every request on the public HTTP port; a refusal is answered and logged (``refuse``)."""
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
            if openai:
                return await self.handle_openai(request, path)
            return await self.handle_triton(request, path)
        except GateError as exc:
            return self.refuse(request, exc, openai)

    def refuse(self, request, exc: GateError, openai: bool = False):
        """The refusal's response and its one log line; the connection is closed when a body
        may be left unread (``body.read_limited`` stopped, or never started)."""
        read = f" read={exc.received} inflated={exc.inflated}" if isinstance(exc, BodyRefused) else ""
        log(f"refused {exc.status} model={exc.model or '-'} client={request.remote}{read}: {exc.message}")
        body = openai_error(exc.status, exc.message, exc.param) if openai else {"error": exc.message}
        headers = {"WWW-Authenticate": 'Bearer realm="triton"'} if exc.status == 401 else {}
        if exc.status == 503:
            headers["Retry-After"] = str(RETRY_AFTER_S)
        response = web.json_response(body, status=exc.status, headers=headers)
        if request.can_read_body and not request.content.is_eof():
            response.force_close()
        return response

    async def handle_triton(self, request, path: str):
        """The /v2 routes: readiness, checked inference, loads; then forwarded (a restricted API reaches
        tritonserver with its internal token only for an admin)."""
        admin = self.is_admin(request.headers)
        self.check_load(bool(LOAD_PATH.match(path)))
        if path == "/v2/health/ready":
            reasons = await self.not_ready()
            return web.json_response({"error": "; ".join(reasons)}, status=503) if reasons else web.Response()
        ready = READY_PATH.match(path)
        if ready and ready.group(1) in self.broken:
            return web.Response(status=400)
        infer = INFER_PATH.match(path)
        if infer:
            return await self.handle_infer(request, infer.group(1), admin)
        generate = GENERATE_PATH.match(path)
        if generate:
            await self.check_inference(generate.group(1), admin)
        limit = ADMIN_BODY_LIMIT if admin else OTHER_BODY_LIMIT
        body = await read_limited(request, limit, "this endpoint") if request.can_read_body else None
        if body:
            check_json_body(body)
        load = LOAD_PATH.match(path)
        if not load:
            return await self.forward(request, body, admin)
        model = load.group(1)
        self.changing[model] = float("inf")
        old = (await asyncio.get_running_loop().run_in_executor(None, self.stubs)).get(model, set())
        try:
            return await self.forward(request, body, admin)
        finally:
            self.forget_configs()
            asyncio.create_task(self.settle(model, old))

    async def handle_infer(self, request, model: str, admin: bool):
        """An inference request: read within its limit and admitted within the model's bytes in
        flight (``body.Admission``: the worst case of the body reserved before it is read), checked, forwarded."""
        try:
            config = await self.check_inference(model, admin)
            limit = body_limit(config, self.cfg.max_body_bytes, self.policy.max_body_bytes.get(model))
            plain = (request.headers.get("Content-Encoding") or "identity").strip().lower() == "identity"
            reserve = min(request.content_length, limit) if plain and request.content_length is not None else limit
            async with self.admission.admit(model, reserve, limit):
                body = await read_limited(request, limit, f"model '{model}'")
                body, header_length = await self.checked_infer_body(request, model, config, body)
                return await self.forward(request, body, admin, header_length)
        except GateError as exc:
            exc.model = model
            raise

    async def checked_infer_body(self, request, model: str, config, body: bytes) -> tuple[bytes, int | None]:
        """The body to forward (validated header re-serialized + binary data) and its header length;
        a large one is checked off the event loop."""
        raw_length = request.headers.get("Inference-Header-Content-Length")
        if raw_length is not None and not re.fullmatch(r"[0-9]{1,12}", raw_length.strip()):
            raise GateError(400, f"Inference-Header-Content-Length {raw_length!r} is not a byte count")
        header_length = int(raw_length) if raw_length is not None else None
        check = partial(validate_infer, model, config, body, header_length, self.policy.max_dims.get(model))
        if len(body) < OFF_LOOP_BYTES:
            return check()
        return await asyncio.get_running_loop().run_in_executor(None, check)

    async def forward(self, request, body: bytes | None, admin: bool, header_length: int | None = None):
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() not in REQUEST_ONLY_DROP and k.lower() != self.cfg.admin_header
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
        except Exception as exc:  # noqa: BLE001 - upstream gone (stopping, crashed): 503 + Retry-After
            raise GateError(503, f"tritonserver unavailable: {type(exc).__name__}") from None
        finally:
            self.in_flight -= 1

    async def handle_metrics(self, request):
        async with self.session.get(self.upstream_metrics + request.path_qs) as resp:
            return web.Response(
                status=resp.status, body=await resp.read(), content_type=resp.content_type or "text/plain"
            )
