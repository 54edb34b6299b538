"""HTTP side of the gate: which paths are restricted, inference, internal or loads, and the
aiohttp handlers that check a request before it is forwarded to tritonserver's private port.

``HttpFront`` is a part of ``harness.serving.gate.server.Gate``: it uses the state and upstream
calls the gate sets up (admin token, upstream URLs and session, ``broken`` models, in-flight count).
"""

from __future__ import annotations

import asyncio
import json
import re

from yarl import URL

from harness.serving.gate.validate import GateError, body_limit, validate_infer

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
#: limits above count inflated bytes), so the body goes on as plain bytes.
REQUEST_ONLY_DROP = HOP_BY_HOP | {"content-encoding"}
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


def check_json_depth(body: bytes) -> None:
    """Refuse a JSON body nested deeper than the standard parser allows (Triton's recursive
    parser overflows its stack far above that); other bodies pass unchanged."""
    if body.lstrip()[:1] not in (b"{", b"["):
        return
    try:
        json.loads(body)
    except RecursionError:
        raise GateError(400, "request JSON is nested too deeply") from None
    except ValueError:
        pass  # Triton answers malformed JSON itself


async def read_limited(request, limit: int, what: str) -> bytes:
    """The request body, refused with 413 as soon as it is known to be over ``limit``."""
    if request.content_length is not None and request.content_length > limit:
        raise GateError(413, f"request body of {request.content_length} bytes is over the {limit}-byte limit of {what}")
    chunks, size = [], 0
    async for chunk in request.content.iter_chunked(1 << 20):
        size += len(chunk)
        if size > limit:
            raise GateError(413, f"request body over the {limit}-byte limit of {what}")
        chunks.append(chunk)
    return b"".join(chunks)


class HttpFront:
    """The gate's aiohttp handlers (public HTTP port and metrics port)."""

    def is_admin(self, headers) -> bool:
        return headers.get(self.admin_header) == self.admin_token

    async def handle(self, request):
        from aiohttp import web

        # Match what Triton matches: the raw path (Triton decodes a model name itself, the same
        # way for the config lookup below as for the request).
        path = request.raw_path.split("?", 1)[0]
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
            body = None
            if infer:
                config = await self.check_inference(infer.group(1), admin)
                body = await self.checked_infer_body(request, infer.group(1), config)
            else:
                if generate:
                    await self.check_inference(generate.group(1), admin)
                limit = ADMIN_BODY_LIMIT if admin else OTHER_BODY_LIMIT
                body = await read_limited(request, limit, "this endpoint") if request.can_read_body else None
                if body:
                    check_json_depth(body)
            load = LOAD_PATH.match(path)
            if load:
                model = load.group(1)
                self.changing[model] = float("inf")
                old = (await asyncio.get_running_loop().run_in_executor(None, self.stubs)).get(model, set())
            try:
                return await self.forward(request, body, admin)
            finally:
                if load:
                    self.configs.pop(model, None)
                    asyncio.create_task(self.settle(model, old))
        except GateError as exc:
            return web.json_response({"error": exc.message}, status=exc.status)

    async def checked_infer_body(self, request, model: str, config: dict) -> bytes:
        limit = body_limit(config, self.default_max_body)
        body = await read_limited(request, limit, f"model '{model}' (gate_max_body_bytes)")
        raw_length = request.headers.get("Inference-Header-Content-Length")
        try:
            header_length = int(raw_length) if raw_length is not None else None
        except ValueError:
            raise GateError(400, "Inference-Header-Content-Length is not an integer") from None
        validate_infer(model, config, body, header_length)
        return body

    async def forward(self, request, body: bytes | None, admin: bool):
        from aiohttp import web

        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() not in REQUEST_ONLY_DROP and k.lower() != self.admin_header
        }
        if admin:
            headers.update(self.internal_headers())
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
