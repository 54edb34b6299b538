"""The load generator on tritonclient's asyncio clients (HTTP and gRPC) or KServe v2 JSON over aiohttp.

One request loop serves every tool: ``concurrency`` workers, each request made by the workload
(same inputs, ``prepare()``, or ``make(i)`` with a key its answer is checked by), tried as
``Retry`` says, ended as ok / error / wrong / timeout in a ``RequestRecord``.

``run_load`` (bench): a fixed window after warm-up; it closes at the first completion after
``duration_s`` once ``min(concurrency, 3)`` requests completed in it (at the latest
``duration_s + max(30 s, 10 x duration_s)``). Metrics carry model_analyzer's names
(``perf_throughput``, ``perf_latency_p99`` ... in ms). ``Load`` / ``run_checked_load`` (soak,
faults, gate cost, scale-out): a background load until stopped, every request in a ``LoadLog``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tritonclient.grpc.aio as grpc_aio
import tritonclient.http as httpclient
import tritonclient.http.aio as http_aio
from tritonclient.utils import np_to_triton_dtype, triton_to_np_dtype

from harness.measuring.pinning import apply_pinning, cores_label, pin_plan, pin_threads
from harness.tensors import as_triton_array, make_inputs, make_outputs, request_bytes, response_bytes, result_arrays

GENERATOR = "harness-asyncio"


@dataclass(frozen=True)
class Retry:
    """A client's retry policy: up to ``tries`` tries of a request, the next one ``backoff_s`` after a
    try whose error starts with one of ``retry_on``; ``timeout_s`` per try. A worker also waits
    ``backoff_s`` after a request that failed for good."""

    tries: int = 1
    retry_on: tuple[str, ...] = ()
    backoff_s: float = 0.0
    timeout_s: float = 60.0

    def as_record(self) -> dict:
        return {**dataclasses.asdict(self), "retry_on": list(self.retry_on)}


@dataclass
class Workload:
    """What one load sends: the same inputs every request, ``prepare()`` per request, or ``make(i)``.

    ``prepare`` / ``finish``: client-side work inside the timed latency, in worker threads.
    ``make(i)``: request ``i``'s inputs and the key ``check(arrays, key)`` judges its answer by
    (None when right, else what is wrong). ``ceiling(batch)``: a function doing the same work for
    ``batch`` items in this process.
    """

    model: str
    inputs: dict[str, np.ndarray] | None = None
    outputs: list[str] | None = None
    items_per_request: int = 1
    variant: str | None = None
    prepare: Callable[[], dict[str, np.ndarray]] | None = None
    finish: Callable[[dict[str, np.ndarray]], Any] | None = None
    parameters: dict | None = None
    notes: dict = field(default_factory=dict)
    ceiling: Callable[[int], Callable[[], Any]] | None = None
    headers: dict[str, str] | None = None
    make: Callable[[int], tuple[dict[str, np.ndarray], Any]] | None = None
    check: Callable[[dict[str, np.ndarray], Any], str | None] | None = None
    retry: Retry = Retry()
    #: What the load sends and how answers are judged, in words (records keep it).
    describe: str = ""

    def request_inputs(self) -> dict[str, np.ndarray]:
        if self.prepare is not None:
            return self.prepare()
        if self.inputs is None:
            raise ValueError(f"workload for {self.model} has neither inputs nor prepare()")
        return self.inputs


@dataclass
class RequestRecord:
    """One request (all its tries): when it started and ended (s, the load's clock), and how it ended."""

    start: float
    end: float
    status: str  # ok | error | wrong | timeout
    detail: str = ""
    tries: int = 1
    #: Why the first try failed, when the request needed another.
    first_try_error: str | None = None
    #: What the answer said besides its tensors: ``model_version``, the balancer's ``upstream``.
    facts: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def percentiles(latencies_ms: list[float]) -> dict:
    """p50 and p99 (ms, 2 decimals) and how many latencies."""
    if not latencies_ms:
        return {"p50_ms": None, "p99_ms": None, "n": 0}
    p50, p99 = np.percentile(latencies_ms, [50, 99])
    return {"p50_ms": round(float(p50), 2), "p99_ms": round(float(p99), 2), "n": len(latencies_ms)}


@dataclass
class LoadLog:
    """Every request a background load made, and the moments its caller marked in ``events``."""

    records: list[RequestRecord] = field(default_factory=list)
    events: dict[str, float] = field(default_factory=dict)
    began: float = 0.0
    ended: float = 0.0

    def select(
        self,
        status: str | None = None,
        *,
        started_from: float | None = None,
        started_before: float | None = None,
        ended_from: float | None = None,
        ended_before: float | None = None,
    ) -> list[RequestRecord]:
        """The records with ``status`` (``"failed"``: any but ok; None: all) in a time window;
        safe to call while the load still appends."""
        return [
            r
            for r in list(self.records)
            if (status is None or r.status == status or (status == "failed" and r.status != "ok"))
            and (started_from is None or r.start >= started_from)
            and (started_before is None or r.start < started_before)
            and (ended_from is None or r.end >= ended_from)
            and (ended_before is None or r.end < ended_before)
        ]

    def count(self, status: str | None = None, **window: float | None) -> int:
        """How many records ``select(status, **window)`` gives."""
        return len(self.select(status, **window))

    def steady(self, warmup_s: float) -> dict:
        """The requests that started after ``warmup_s``: counts per status, throughput of the
        ok ones over the rest of the run, latency percentiles of the ok ones."""
        since = self.began + warmup_s
        measured = self.select(started_from=since)
        ok = [r for r in measured if r.ok]
        problems = [r for r in measured if not r.ok]
        span = max(self.ended - since, 1e-9)
        return {
            "requests": len(measured),
            "ok": len(ok),
            "errors": sum(1 for r in problems if r.status == "error"),
            "timeouts": sum(1 for r in problems if r.status == "timeout"),
            "wrong_answers": sum(1 for r in problems if r.status == "wrong"),
            "first_problem": problems[0].detail if problems else None,
            "measured_s": round(span, 2),
            "throughput_rps": round(len(ok) / span, 1),
            "latency_all": percentiles([(r.end - r.start) * 1e3 for r in ok]),
        }


# -- one request on the wire ------------------------------------------------------------------
class HTTPStatusError(Exception):
    """A KServe v2 JSON answer other than 200: ``HTTP <status>: <body>``."""


class Sender:
    """Sends one request of ``workload`` and returns its output arrays and facts: tritonclient's
    asyncio client (``http``, ``grpc``) or KServe v2 JSON over aiohttp (``json``, with the
    ``X-Upstream`` header a balancer adds)."""

    def __init__(self, workload: Workload, protocol: str, url: str, concurrency: int):
        self.workload, self.protocol, self.url = workload, protocol, url
        self.sizes: tuple[int, int] | None = None  # request and response bytes of the first answer
        if protocol == "json":
            import aiohttp

            connector = aiohttp.TCPConnector(limit=concurrency * 2)
            self.client = aiohttp.ClientSession(connector=connector)
        elif protocol == "http":
            self.client = http_aio.InferenceServerClient(url, conn_limit=max(concurrency, 1))
        else:
            self.client = grpc_aio.InferenceServerClient(url)
        self.outputs = None if protocol == "json" else make_outputs(protocol, workload.outputs)

    def encode(self, inputs: dict[str, np.ndarray]):
        """``inputs`` as the wire wants them: tritonclient InferInputs, or a KServe v2 JSON body."""
        if self.protocol != "json":
            return make_inputs(self.protocol, inputs)
        body = {"inputs": [json_tensor(name, array) for name, array in inputs.items()]}
        return body | {"outputs": [{"name": name} for name in self.workload.outputs or []]}

    async def send(self, encoded) -> tuple[dict[str, np.ndarray], dict]:
        """One request of ``encoded`` inputs: its output arrays and facts."""
        if self.protocol == "json":
            return await self._send_json(encoded)
        w, infer_inputs = self.workload, encoded
        result = await self.client.infer(
            w.model, infer_inputs, outputs=self.outputs, parameters=w.parameters, headers=w.headers
        )
        if self.sizes is None:
            sent = request_bytes(self.protocol, w.model, infer_inputs, self.outputs, w.parameters)
            self.sizes = (sent, response_bytes(result))
        return result_arrays(result, w.outputs), {}

    async def _send_json(self, body: dict) -> tuple[dict[str, np.ndarray], dict]:
        path = f"{self.url}/v2/models/{self.workload.model}/infer"
        async with self.client.post(path, json=body, headers=self.workload.headers) as response:
            text = await response.text()
            upstream = response.headers.get("X-Upstream", "")
        if response.status != 200:
            raise HTTPStatusError(f"HTTP {response.status}: {text[:200]}")
        payload = json.loads(text)
        arrays = {
            o["name"]: np.asarray(o["data"], dtype=triton_to_np_dtype(o["datatype"])).reshape(o["shape"])
            for o in payload.get("outputs", [])
        }
        return arrays, {"model_version": payload.get("model_version"), "upstream": upstream}

    async def close(self) -> None:
        await self.client.close()


def json_tensor(name: str, value) -> dict:
    """One KServe v2 JSON input tensor (BYTES as UTF-8 text)."""
    array = as_triton_array(value)
    data = [v.decode() if isinstance(v, bytes) else v for v in array.reshape(-1).tolist()]
    return {"name": name, "shape": list(array.shape), "datatype": np_to_triton_dtype(array.dtype), "data": data}


def error_text(exc: BaseException) -> str:
    """What a failed try says: ``HTTP <status>: ...``, ``connection error: ...`` or ``<type>: ...``."""
    if isinstance(exc, HTTPStatusError):
        return str(exc)
    if type(exc).__module__.startswith("aiohttp"):
        return f"connection error: {type(exc).__name__}: {exc}"[:300]
    return f"{type(exc).__name__}: {str(exc)[:300]}"


# -- the request loop -------------------------------------------------------------------------
class Requests:
    """Makes, sends (its own ``Sender``), checks and retries request ``i`` of ``workload`` (one per call of ``one``)."""

    def __init__(self, workload: Workload, protocol: str, url: str, concurrency: int, clock: Callable[[], float]):
        self.workload, self.clock = workload, clock
        self.sender = Sender(workload, protocol, url, concurrency)
        needs_threads = workload.prepare is not None or workload.finish is not None
        self.threads = ThreadPoolExecutor(max(concurrency, 1), "loadgen-client") if needs_threads else None
        fixed = workload.prepare is None and workload.make is None
        #: The workload's fixed inputs, encoded once.
        self.fixed = self.sender.encode(workload.request_inputs()) if fixed else None

    def _encode(self, index: int) -> tuple[Any, Any]:
        """Request ``index`` encoded for the wire, and the key its answer is checked by."""
        if self.workload.make is not None:
            inputs, key = self.workload.make(index)
            return self.sender.encode(inputs), key
        return self.sender.encode(self.workload.request_inputs()), None

    async def _try(self, index: int, key: Any, inputs) -> tuple[str, str, dict]:
        """One try: (status, detail, facts)."""
        w, loop = self.workload, asyncio.get_running_loop()
        try:
            arrays, facts = await asyncio.wait_for(self.sender.send(inputs), timeout=w.retry.timeout_s)
            if w.finish is not None:
                await loop.run_in_executor(self.threads, w.finish, arrays)
        except TimeoutError:
            return "timeout", f"no answer within {w.retry.timeout_s} s", {}
        except Exception as exc:  # noqa: BLE001 - what the client saw is the measurement
            return "error", error_text(exc), {}
        problem = w.check(arrays, key) if w.check is not None else None
        if problem is not None:
            return "wrong", f"request {index}: {problem}", facts
        return "ok", "", facts

    async def one(self, index: int) -> RequestRecord:
        w, loop = self.workload, asyncio.get_running_loop()
        start = self.clock()
        try:
            if self.fixed is not None:
                inputs, key = self.fixed, None
            elif w.prepare is not None:  # client-side work: off the event loop
                inputs, key = await loop.run_in_executor(self.threads, self._encode, index)
            else:
                inputs, key = self._encode(index)
        except Exception as exc:  # noqa: BLE001 - a request that could not be made is a failed one
            return RequestRecord(start, self.clock(), "error", error_text(exc))
        record = RequestRecord(start, start, "ok")
        for attempt in range(1, w.retry.tries + 1):
            record.tries = attempt
            record.status, record.detail, record.facts = await self._try(index, key, inputs)
            if attempt == 1 and not record.ok:
                record.first_try_error = record.detail
            if record.ok or attempt == w.retry.tries or not record.detail.startswith(w.retry.retry_on):
                break
            await asyncio.sleep(w.retry.backoff_s)
        record.end = self.clock()
        return record

    async def hold(self, concurrency: int, stopped: Callable[[], bool], on_record: Callable[[RequestRecord], None]):
        """``concurrency`` workers, each sending one request after another until ``stopped()``."""
        counter = iter(range(1 << 62))

        async def worker() -> None:
            while not stopped():
                record = await self.one(next(counter))
                on_record(record)
                if not record.ok and self.workload.retry.backoff_s:
                    await asyncio.sleep(self.workload.retry.backoff_s)

        try:
            await asyncio.gather(*(worker() for _ in range(concurrency)))
        finally:
            await self.sender.close()
            if self.threads is not None:
                self.threads.shutdown(wait=True)


# -- the bench window -------------------------------------------------------------------------
@dataclass
class LoadResult:
    """One concurrency level of one workload."""

    concurrency: int
    duration_s: float
    requests: int
    errors: int
    latencies_ms: list[float]
    bytes_sent_per_request: int
    bytes_received_per_request: int
    server: dict
    first_error: str | None = None
    pinning: str = "none"

    def metrics(self, items_per_request: int = 1) -> dict:
        lat = np.asarray(self.latencies_ms) if self.latencies_ms else np.asarray([np.nan])
        throughput = self.requests / self.duration_s if self.duration_s else 0.0
        return {
            "concurrency": self.concurrency,
            "duration_s": round(self.duration_s, 3),
            "requests": self.requests,
            "errors": self.errors,
            "first_error": self.first_error,
            "perf_throughput": round(throughput, 2),
            "items_per_second": round(throughput * items_per_request, 2),
            "perf_latency_avg": round(float(np.mean(lat)), 3),
            **{f"perf_latency_p{q}": round(float(np.percentile(lat, q)), 3) for q in (50, 90, 95, 99)},
            "bytes_sent_per_request": self.bytes_sent_per_request,
            "bytes_received_per_request": self.bytes_received_per_request,
            "pinning": self.pinning,
            **self.server,
        }


def _stats(http_url: str, model: str) -> dict:
    with httpclient.InferenceServerClient(http_url) as client:
        stats = client.get_inference_statistics(model)["model_stats"]
    total: dict[str, float] = {}
    for entry in stats:
        inference = entry["inference_stats"]
        for key in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
            total[f"{key}_ns"] = total.get(f"{key}_ns", 0) + int(inference[key]["ns"])
        total["success_count"] = total.get("success_count", 0) + int(inference["success"]["count"])
        total["inference_count"] = total.get("inference_count", 0) + int(entry.get("inference_count", 0))
        total["execution_count"] = total.get("execution_count", 0) + int(entry.get("execution_count", 0))
    return total


def server_split(before: dict, after: dict) -> dict:
    """Average per-request server times (ms) and batch size over a measurement window."""
    count = after.get("success_count", 0) - before.get("success_count", 0)
    if count <= 0:
        return {}
    per = lambda key: round((after[key] - before[key]) / count / 1e6, 3)  # noqa: E731
    executions = after["execution_count"] - before["execution_count"]
    inferences = after["inference_count"] - before["inference_count"]
    return {
        "perf_server_queue": per("queue_ns"),
        "perf_server_compute_input": per("compute_input_ns"),
        "perf_server_compute_infer": per("compute_infer_ns"),
        "perf_server_compute_output": per("compute_output_ns"),
        "perf_server_request": per("success_ns"),
        "server_avg_batch_size": round(inferences / executions, 2) if executions else None,
    }


class Window:
    """The bench's measurement window: opens after warm-up, closes at the first completion after
    ``duration_s`` once ``min(concurrency, 3)`` requests completed in it, or at the hard stop."""

    def __init__(self, now: float, concurrency: int, duration_s: float, warmup_s: float):
        self.opens = now + warmup_s
        self.due = self.opens + duration_s
        self.hard_stop = self.due + max(30.0, 10 * duration_s)
        self.min_done = min(concurrency, 3)
        self.closes: float | None = None
        self.closed = asyncio.Event()
        self.latencies: list[float] = []
        self.errors = 0
        self.first_error: str | None = None
        self.stats: dict[str, dict] = {}

    def close(self, at: float) -> None:
        if not self.closed.is_set():
            self.closes = at
            self.closed.set()

    def count(self, record: RequestRecord) -> None:
        if record.detail and self.first_error is None:
            self.first_error = record.detail
        if record.end < self.opens or self.closed.is_set():
            return
        if record.ok:
            self.latencies.append((record.end - record.start) * 1e3)
        else:
            self.errors += 1
        done = len(self.latencies) + self.errors
        if (record.end >= self.due and done >= self.min_done) or record.end >= self.hard_stop:
            self.close(record.end)


async def _run_level(
    workload: Workload, protocol: str, url: str, http_url: str, concurrency: int, duration_s: float, warmup_s: float
) -> LoadResult:
    loop = asyncio.get_running_loop()
    window = Window(loop.time(), concurrency, duration_s, warmup_s)
    requests = Requests(workload, protocol, url, concurrency, loop.time)

    async def snapshots() -> None:
        await asyncio.sleep(max(window.opens - loop.time(), 0))
        window.stats["before"] = await loop.run_in_executor(None, _stats, http_url, workload.model)
        await window.closed.wait()
        window.stats["after"] = await loop.run_in_executor(None, _stats, http_url, workload.model)

    async def deadline() -> None:
        await asyncio.sleep(max(window.hard_stop - loop.time(), 0) + 60)
        window.close(loop.time())

    guard = asyncio.ensure_future(deadline())
    try:
        await asyncio.gather(snapshots(), requests.hold(concurrency, window.closed.is_set, window.count))
    finally:
        guard.cancel()
    sent, received = requests.sender.sizes or (0, 0)
    return LoadResult(
        concurrency=concurrency,
        duration_s=(window.closes or loop.time()) - window.opens,
        requests=len(window.latencies),
        errors=window.errors,
        latencies_ms=window.latencies,
        bytes_sent_per_request=sent,
        bytes_received_per_request=received,
        server=server_split(window.stats.get("before", {}), window.stats.get("after", {})),
        first_error=window.first_error,
    )


def endpoint(server, protocol: str) -> tuple[str, str]:
    """``(protocol, url)`` of ``server`` for ``protocol``: gRPC falls back to HTTP on a server without it."""
    if protocol == "grpc" and server.grpc_url:
        return protocol, server.grpc_url
    return "http", server.http_url


def run_load(
    workload: Workload, server, *, protocol: str, concurrency: int, duration_s: float = 5.0, warmup_s: float = 1.0
) -> LoadResult:
    """Hold ``concurrency`` requests in flight on ``server`` for ``duration_s`` after ``warmup_s``
    (``protocol`` as :func:`endpoint` resolves it)."""
    protocol, url = endpoint(server, protocol)
    pinning = apply_pinning(url)
    result = asyncio.run(_run_level(workload, protocol, url, server.http_url, concurrency, duration_s, warmup_s))
    result.pinning = pinning
    return result


# -- the background load ----------------------------------------------------------------------
class Load:
    """``concurrency`` requests of ``workload`` in flight on ``url`` in a background thread from
    ``start()`` until ``stop()``; every request in ``log`` (times on ``clock``)."""

    def __init__(
        self,
        workload: Workload,
        url: str,
        *,
        protocol: str = "http",
        concurrency: int = 64,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.workload, self.url, self.protocol = workload, url, protocol
        self.concurrency, self.clock = concurrency, clock
        self.log = LoadLog()
        self._stop = threading.Event()
        self._failure: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, name="background-load", daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            requests = Requests(self.workload, self.protocol, self.url, self.concurrency, self.clock)
            try:
                await requests.hold(self.concurrency, self._stop.is_set, self.log.records.append)
            finally:
                self.log.ended = self.clock()

        try:
            asyncio.run(main())
        except BaseException as exc:  # noqa: BLE001 - re-raised by stop()
            self._failure.append(exc)

    def start(self) -> Load:
        self.log.began = self.clock()
        self._thread.start()
        return self

    def stop(self) -> LoadLog:
        self._stop.set()
        retry = self.workload.retry
        self._thread.join(timeout=(retry.timeout_s + retry.backoff_s) * retry.tries + 30)
        if self._failure:
            raise self._failure[0]
        return self.log


def run_checked_load(
    workload: Workload, http_url: str, *, during: Callable[[LoadLog], None], concurrency: int = 64
) -> LoadLog:
    """Hold ``concurrency`` checked requests in flight while ``during(log)`` runs (in the caller's
    thread, so a server it starts is a child of a thread that lives on: PR_SET_PDEATHSIG is per thread)."""
    load = Load(workload, http_url, concurrency=concurrency).start()
    try:
        during(load.log)
    finally:
        log = load.stop()
    return log


def measure_in_process(
    run: Callable[[], Any], items_per_call: int, duration_s: float = 3.0, warmup_calls: int = 2
) -> dict:
    """The in-process ceiling: ``run()`` back to back for ``duration_s`` (on the pinned server's CPUs)."""
    server_cpus = pin_plan().get("server")
    previous = os.sched_getaffinity(0)
    if server_cpus:
        pin_threads(os.getpid(), server_cpus)
    try:
        for _ in range(warmup_calls):
            run()
        calls = 0
        started = time.perf_counter()
        while time.perf_counter() - started < duration_s:
            run()
            calls += 1
        elapsed = time.perf_counter() - started
    finally:
        if server_cpus:
            pin_threads(os.getpid(), previous)
    return {
        "calls_per_second": round(calls / elapsed, 2),
        "items_per_second": round(calls * items_per_call / elapsed, 2),
        **({"cpus": cores_label(server_cpus)} if server_cpus else {}),
    }
