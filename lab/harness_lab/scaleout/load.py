"""Checked load on the stack's balancer: ``concurrency`` HTTP/JSON requests in flight (aiohttp), every
answer checked, with the client retry policy ``RETRY``; a request is lost when all its tries fail."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass

import numpy as np

from harness_lab.text_models import text_tensors

RETRY = {
    "tries": 3,
    "retry_on": ["connection error", "HTTP 502", "HTTP 503", "HTTP 504"],
    "backoff_s": 0.05,
    "timeout_s": 30,
}
SENTENCE = "Triton serves this sentence from one of several replicas behind a balancer."


@dataclass
class Outcome:
    """One client request (all its tries)."""

    began: float
    ended: float
    ok: bool
    tries: int
    status: int | None = None
    upstream: str = ""
    version: str | None = None
    error: str | None = None
    #: Why the first try failed, when the request needed another.
    first_try_error: str | None = None


def infer_body(text_input: str, vector_output: str, text: str = SENTENCE) -> bytes:
    return json.dumps(
        {
            "inputs": [{"name": text_input, "shape": [1, 1], "datatype": "BYTES", "data": [text]}],
            "outputs": [{"name": vector_output}],
        }
    ).encode()


def stack_load(stack, concurrency: int) -> Load:
    """A Load on the stack's balancer and its entry model (``stack.models[0]``), tensors from its config."""
    model = stack.models[0]
    return Load(stack.url, model, concurrency, text_tensors(stack.deployment.model_repository, model))


class Load:
    """``concurrency`` requests in flight against ``url`` in a background thread until ``stop()``: one
    sentence in ``tensors[0]``, the vector of ``tensors[1]`` checked."""

    def __init__(self, url: str, model: str, concurrency: int, tensors: tuple[str, str]):
        self.url = f"{url}/v2/models/{model}/infer"
        self.concurrency = concurrency
        self.output = tensors[1]
        self.body = infer_body(*tensors)
        #: The vector size every answer must have: the first answer's.
        self.dims: int | None = None
        self.outcomes: list[Outcome] = []
        self.reference: np.ndarray | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def check(self, payload: dict) -> str | None:
        """None when the response is a correct vector, else what is wrong."""
        outputs = {o["name"]: o for o in payload.get("outputs", [])}
        if self.output not in outputs:
            return f"no {self.output} in {list(outputs)}"
        vector = np.asarray(outputs[self.output]["data"], dtype=np.float32)
        if not vector.size:
            return f"{self.output} is empty"
        if self.dims is None:
            self.dims = vector.size
        if vector.shape != (self.dims,) or not np.all(np.isfinite(vector)):
            return f"{self.output} of shape {vector.shape} or not finite"
        if self.reference is None:
            self.reference = vector
        elif float(np.dot(vector, self.reference) / np.linalg.norm(vector) / np.linalg.norm(self.reference)) < 0.9999:
            return f"{self.output} differs from the first response"
        return None

    async def _one(self, session) -> Outcome:
        import aiohttp

        began = time.time()
        outcome = Outcome(began=began, ended=began, ok=False, tries=0)
        for attempt in range(1, RETRY["tries"] + 1):
            outcome.tries = attempt
            try:
                async with session.post(self.url, data=self.body, headers={"Content-Type": "application/json"}) as r:
                    outcome.status, outcome.upstream = r.status, r.headers.get("X-Upstream", "")
                    text = await r.text()
                    if r.status == 200:
                        payload = json.loads(text)
                        outcome.version = payload.get("model_version")
                        outcome.error = self.check(payload)
                        outcome.ok = outcome.error is None
                        break
                    outcome.error = f"HTTP {r.status}: {text[:200]}"
                    if f"HTTP {r.status}" not in RETRY["retry_on"]:
                        break
            except (TimeoutError, aiohttp.ClientError) as exc:
                outcome.status, outcome.error = None, f"connection error: {type(exc).__name__}: {exc}"[:300]
            if attempt == 1:
                outcome.first_try_error = outcome.error
            if attempt < RETRY["tries"]:
                await asyncio.sleep(RETRY["backoff_s"])
        outcome.ended = time.time()
        return outcome

    async def _main(self) -> None:
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=RETRY["timeout_s"])
        connector = aiohttp.TCPConnector(limit=self.concurrency * 2)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:

            async def worker():
                while not self._stop.is_set():
                    self.outcomes.append(await self._one(session))

            await asyncio.gather(*(worker() for _ in range(self.concurrency)))

    def start(self) -> Load:
        self._thread.start()
        return self

    def stop(self) -> list[Outcome]:
        self._stop.set()
        self._thread.join(timeout=RETRY["timeout_s"] * RETRY["tries"] + 5)
        return self.outcomes


def summarize(outcomes: list[Outcome], began: float | None = None, ended: float | None = None) -> dict:
    """Requests, failures, tries and latency of the outcomes that ended in [began, ended]."""
    chosen = [o for o in outcomes if (began is None or o.ended >= began) and (ended is None or o.ended <= ended)]
    ok = [o for o in chosen if o.ok]
    latencies = np.array([(o.ended - o.began) * 1000 for o in ok]) if ok else np.array([np.nan])
    span = (max(o.ended for o in chosen) - min(o.ended for o in chosen)) if len(chosen) > 1 else 0.0
    return {
        "requests": len(chosen),
        "lost": len(chosen) - len(ok),
        "retried_by_client": sum(1 for o in chosen if o.tries > 1),
        "infer_per_s": round(len(ok) / span, 2) if span else None,
        "p50_ms": round(float(np.percentile(latencies, 50)), 1),
        "p99_ms": round(float(np.percentile(latencies, 99)), 1),
        "max_ms": round(float(np.max(latencies)), 1),
        "first_error": next((o.error for o in chosen if not o.ok), None),
        "client_retry_causes": sorted({(o.first_try_error or "")[:120] for o in chosen if o.tries > 1}),
    }
