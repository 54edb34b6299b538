"""Asyncio load generator on tritonclient (HTTP and gRPC): fixed duration after warm-up.

The window closes at the first completion after ``duration_s`` once ``min(concurrency, 3)``
requests completed in it (at the latest ``duration_s + max(30 s, 10 x duration_s)``). Metrics
carry model_analyzer's names (``perf_throughput``, ``perf_latency_p99`` ... in ms).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc.aio as grpc_aio
import tritonclient.http as httpclient
import tritonclient.http.aio as http_aio

from harness.tensors import make_inputs, make_outputs, request_bytes, response_bytes, result_arrays

GENERATOR = "harness-asyncio"
#: ``HARNESS_PIN="server=0 generator=1"``: the server's process tree and this generator pinned per level.
PIN_ENV = "HARNESS_PIN"


def pin_plan(text: str | None = None) -> dict[str, set[int]]:
    """``{"server": cpus, "generator": cpus}`` from ``HARNESS_PIN`` (empty: no pinning)."""
    text = os.environ.get(PIN_ENV, "") if text is None else text
    plan = {}
    for part in text.replace(";", " ").split():
        role, _, cpus = part.partition("=")
        if role not in ("server", "generator") or not cpus:
            raise ValueError(
                f"{PIN_ENV}: expected 'server=CPUS generator=CPUS' (CPUS like 0 or 0-1 or 0,2), got {text!r}"
            )
        chosen = set()
        for piece in cpus.split(","):
            low, _, high = piece.partition("-")
            chosen.update(range(int(low), int(high or low) + 1))
        plan[role] = chosen
    return plan


def _pin_threads(pid: int, cpus: set[int]) -> int:
    """Pin every thread of ``pid`` (threads started later inherit it); returns how many."""
    pinned = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
            pinned += 1
        except (ProcessLookupError, PermissionError):
            continue
    return pinned


def container_pids(port: int) -> set[int]:
    """The init process of each running container that publishes ``port`` (docker mode: the
    port's listener is the engine's docker-proxy, tritonserver runs under the container's init)."""
    import docker

    client = docker.from_env()
    try:
        containers = client.containers.list(filters={"publish": str(port), "status": "running"})
        pids = {int(c.attrs["State"]["Pid"]) for c in containers}
    finally:
        client.close()
    if not pids:
        raise RuntimeError(f"{PIN_ENV}: port {port} is docker-proxy's, and no running container publishes it")
    return pids


def pin_server(url: str, cpus: set[int]) -> int:
    """Pin the process listening on ``url``'s port and all its descendants (with the container's
    processes when the listener is docker-proxy); returns the process count."""
    import psutil

    port = int(url.rsplit(":", 1)[1])
    owners = {
        c.pid
        for c in psutil.net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid
    }
    if not owners:
        raise RuntimeError(f"{PIN_ENV}: no process of this machine listens on port {port}")
    if any(psutil.Process(pid).name() == "docker-proxy" for pid in owners):
        owners |= container_pids(port)
    processes = set()
    for pid in owners:
        root = psutil.Process(pid)
        processes.update([root, *root.children(recursive=True)])
    for process in processes:
        _pin_threads(process.pid, cpus)
    return len(processes)


def apply_pinning(url: str, plan: dict[str, set[int]] | None = None) -> str:
    """Pin server and generator as ``plan`` (default: ``HARNESS_PIN``) says; the record's description."""
    plan = pin_plan() if plan is None else plan
    if not plan:
        return "none"
    said = []
    if "server" in plan:
        count = pin_server(url, plan["server"])
        said.append(f"server cpus {cores_label(plan['server'])} ({count} processes)")
    if "generator" in plan:
        _pin_threads(os.getpid(), plan["generator"])
        said.append(f"generator cpus {cores_label(plan['generator'])}")
    return ", ".join(said)


def cores_label(cores: set[int] | list[int] | None) -> str:
    """``0,2``, or ``any`` for no cores."""
    return ",".join(str(c) for c in sorted(cores)) if cores else "any"


@dataclass
class Workload:
    """What one benchmark sends: the same inputs every request, or ``prepare()`` per request.

    ``prepare`` / ``finish``: client-side work inside the timed latency, in worker threads.
    ``ceiling(batch)``: a function doing the same work for ``batch`` items in this process.
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

    def request_inputs(self) -> dict[str, np.ndarray]:
        if self.prepare is not None:
            return self.prepare()
        if self.inputs is None:
            raise ValueError(f"workload for {self.model} has neither inputs nor prepare()")
        return self.inputs


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


async def _run_level(
    workload: Workload, protocol: str, url: str, http_url: str, concurrency: int, duration_s: float, warmup_s: float
) -> LoadResult:
    if protocol == "http":
        client = http_aio.InferenceServerClient(url, conn_limit=max(concurrency, 1))
    else:
        client = grpc_aio.InferenceServerClient(url)
    outputs = make_outputs(protocol, workload.outputs)
    static_inputs = None if workload.prepare else make_inputs(protocol, workload.request_inputs())
    latencies: list[float] = []
    counters = {"requests": 0, "errors": 0, "first_error": None, "sent": 0, "received": 0}
    loop = asyncio.get_running_loop()
    measure_from = loop.time() + warmup_s
    stop_at = measure_from + duration_s
    hard_stop = stop_at + max(30.0, 10 * duration_s)
    min_done = min(concurrency, 3)
    window: dict[str, Any] = {"end": None}
    closed = asyncio.Event()

    def close(at: float) -> None:
        if not closed.is_set():
            window["end"] = at
            closed.set()

    client_work = (
        ThreadPoolExecutor(max_workers=max(concurrency, 1), thread_name_prefix="loadgen-client")
        if workload.prepare is not None or workload.finish is not None
        else None
    )

    def prepared_inputs():
        return make_inputs(protocol, workload.request_inputs())

    def finished(result):
        return workload.finish(result_arrays(result, workload.outputs))

    async def worker() -> None:
        while not closed.is_set():
            began = loop.time()
            try:
                inputs = static_inputs or await loop.run_in_executor(client_work, prepared_inputs)
                result = await client.infer(
                    workload.model, inputs, outputs=outputs, parameters=workload.parameters, headers=workload.headers
                )
                if workload.finish is not None:
                    await loop.run_in_executor(client_work, finished, result)
                ok = True
            except Exception as exc:  # noqa: BLE001 - counted, first one reported
                ok = False
                if counters["first_error"] is None:
                    counters["first_error"] = f"{type(exc).__name__}: {exc}"
            ended = loop.time()
            if ended < measure_from or closed.is_set():
                continue
            counters["requests" if ok else "errors"] += 1
            if ok:
                latencies.append((ended - began) * 1e3)
                if not counters["sent"]:
                    counters["sent"] = request_bytes(protocol, workload.model, inputs, outputs, workload.parameters)
                    counters["received"] = response_bytes(result)
            done = counters["requests"] + counters["errors"]
            if (ended >= stop_at and done >= min_done) or ended >= hard_stop:
                close(ended)

    async def snapshots() -> None:
        await asyncio.sleep(max(measure_from - loop.time(), 0))
        window["before"] = await loop.run_in_executor(None, _stats, http_url, workload.model)
        await closed.wait()
        window["after"] = await loop.run_in_executor(None, _stats, http_url, workload.model)

    async def deadline() -> None:
        await asyncio.sleep(max(hard_stop - loop.time(), 0) + 60)
        close(loop.time())

    guard = asyncio.ensure_future(deadline())
    try:
        await asyncio.gather(snapshots(), *(worker() for _ in range(concurrency)))
    finally:
        guard.cancel()
        await client.close()
        if client_work is not None:
            client_work.shutdown(wait=True)
    measured = (window["end"] or loop.time()) - measure_from
    return LoadResult(
        concurrency=concurrency,
        duration_s=measured,
        requests=counters["requests"],
        errors=counters["errors"],
        latencies_ms=latencies,
        bytes_sent_per_request=counters["sent"],
        bytes_received_per_request=counters["received"],
        server=server_split(window.get("before", {}), window.get("after", {})),
        first_error=counters["first_error"],
    )


def run_load(
    workload: Workload,
    *,
    protocol: str,
    url: str,
    http_url: str,
    concurrency: int,
    duration_s: float = 5.0,
    warmup_s: float = 1.0,
) -> LoadResult:
    """Hold ``concurrency`` requests in flight for ``duration_s`` after ``warmup_s``."""
    pinning = apply_pinning(url)
    result = asyncio.run(_run_level(workload, protocol, url, http_url, concurrency, duration_s, warmup_s))
    result.pinning = pinning
    return result


def sweep(
    workload: Workload, concurrencies: list[int], *, on_level: Callable[[LoadResult], None] | None = None, **options
) -> list[LoadResult]:
    """``run_load(workload, concurrency=c, **options)`` at each concurrency in turn."""
    results = []
    for concurrency in concurrencies:
        results.append(run_load(workload, concurrency=concurrency, **options))
        if on_level:
            on_level(results[-1])
    return results


def measure_in_process(
    run: Callable[[], Any], items_per_call: int, duration_s: float = 3.0, warmup_calls: int = 2
) -> dict:
    """The in-process ceiling: ``run()`` back to back for ``duration_s`` (on the pinned server's CPUs)."""
    server_cpus = pin_plan().get("server")
    previous = os.sched_getaffinity(0)
    if server_cpus:
        _pin_threads(os.getpid(), server_cpus)
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
            _pin_threads(os.getpid(), previous)
    return {
        "calls_per_second": round(calls / elapsed, 2),
        "items_per_second": round(calls * items_per_call / elapsed, 2),
        **({"cpus": cores_label(server_cpus)} if server_cpus else {}),
    }
