"""Request bodies within bounds: each read only up to its limit, and admitted to tritonserver
within a budget of bytes in flight per model.

aiohttp inflates a gzip or deflate body itself in bounded steps (``web.Server``'s
``auto_decompress``: at most a buffer's worth per step, and no more read from the socket while
the inflated bytes wait), so the gate counts what comes out. Past the limit it stops: no more is
read or inflated, the 413 goes out and the connection is closed (``http_front``), so a small body
that inflates to gigabytes costs the gate about its limit, and other requests keep moving meanwhile.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from contextlib import asynccontextmanager

from aiohttp import http_exceptions, web_protocol

from triton_gate.validate import GateError

#: Budget of a model with none of its own, in bodies of its largest size.
BODIES_IN_FLIGHT = 4


class BodyRefused(GateError):
    """A refusal while the body was read: what had been read and inflated by then (for the log)."""

    def __init__(self, status: int, message: str, received: int, inflated: int):
        super().__init__(status, message)
        self.received, self.inflated = received, inflated


async def read_limited(request, limit: int, what: str) -> bytes:
    """The request body, inflated; ``BodyRefused`` 413 as soon as it (or its inflated bytes) is over ``limit``."""
    encoding = (request.headers.get("Content-Encoding") or "identity").strip().lower()
    if encoding == "identity" and (request.content_length or 0) > limit:
        raise BodyRefused(
            413, f"request body of {request.content_length} bytes is over the {limit}-byte limit of {what}", 0, 0
        )
    stream, body = request.content, bytearray()

    def received() -> int:  # bytes off the wire (aiohttp counts them as it inflates)
        return stream.total_compressed_bytes or len(body)

    try:
        async for chunk in stream.iter_chunked(1 << 16):
            body += chunk
            if len(body) > limit or received() > limit:
                raise BodyRefused(413, f"request body over the {limit}-byte limit of {what}", received(), len(body))
    except (http_exceptions.HttpProcessingError, web_protocol.RequestPayloadError) as exc:
        cause = exc.__cause__ or exc  # RequestPayloadError wraps the parser's error (e.g. a gzip that does not inflate)
        reason = getattr(cause, "message", None) or str(exc).strip() or type(exc).__name__
        raise BodyRefused(400, f"request body cannot be read: {reason}", received(), len(body)) from None
    return bytes(body)


class Admission:
    """Bytes of request bodies in flight to tritonserver, per model, within a budget: a request
    waits up to ``wait_s`` for room, then gets 503 with ``Retry-After``. One request is always
    admitted when nothing else of its model is in flight (a budget never blocks a lone request)."""

    def __init__(self, budgets: dict[str, int], default_budget: int | None, wait_s: float):
        self.budgets, self.default_budget, self.wait_s = budgets, default_budget, wait_s
        self.used: dict[str, int] = defaultdict(int)
        self.freed = asyncio.Condition()

    def budget(self, model: str, body_limit: int) -> int:
        return self.budgets.get(model) or self.default_budget or BODIES_IN_FLIGHT * body_limit

    @asynccontextmanager
    async def admit(self, model: str, nbytes: int, body_limit: int):
        budget = self.budget(model, body_limit)
        async with self.freed:
            try:
                await asyncio.wait_for(
                    self.freed.wait_for(lambda: not self.used[model] or self.used[model] + nbytes <= budget),
                    self.wait_s,
                )
            except TimeoutError:
                raise GateError(
                    503,
                    f"model '{model}' has {self.used[model]} request bytes in flight, its budget is {budget}; retry",
                ) from None
            self.used[model] += nbytes
        try:
            yield
        finally:
            async with self.freed:
                self.used[model] -= nbytes
                self.freed.notify_all()
