"""Verified load: requests whose every answer is checked against its own expected answer.

``CheckedWorkload`` says how request ``i`` is made and what its answer must be (``echo_workload``,
``text_embedding_workload``, ``bytes_workload``); ``run_checked_load`` holds a concurrency of
them against a server and returns a ``LoadLog`` of every request (when, and ok / error / wrong /
timeout), which the soak, the fault scenarios and the gate-cost runs all read.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import tritonclient.http as httpclient
import tritonclient.http.aio as http_aio

from harness.tensors import make_inputs, make_outputs, result_arrays

WORDS = "river lamp orbit quiet granite violet harbour engine meadow signal copper lantern glacier thunder".split()
WORDS += "pepper circuit falcon marble velvet canyon".split()


def unique_sentence(index: int) -> str:
    """A distinct short English sentence per index (deterministic)."""
    words = [WORDS[(index // len(WORDS) ** k) % len(WORDS)] for k in range(3)]
    return f"Request {index}: the {words[0]} near the {words[1]} and the {words[2]}."


# -- checkable workloads ---------------------------------------------------------------------
@dataclass
class CheckedWorkload:
    """Requests whose answer is known: ``make(i)`` gives request ``i``'s inputs and a key, ``expected(key)``
    its ``output``, ``check(got, want)`` whether an answer is right."""

    model: str
    output: str
    make: Callable[[int], tuple[dict[str, np.ndarray], object]]
    expected: Callable[[object], np.ndarray]
    check: Callable[[np.ndarray, np.ndarray], bool]
    describe: str = ""
    others: dict | None = None  # key -> expected, to name whose answer a wrong one is

    def owner_of(self, got: np.ndarray):
        """Which other request's answer ``got`` is, if any (None when it matches nobody's)."""
        if self.others is None:
            return None
        for key, want in self.others.items():
            if self.check(got, want):
                return key
        return None


def echo_workload(model: str = "echo", input_name: str = "TEXT", output: str = "TEXT_OUT") -> CheckedWorkload:
    """A Python model that returns its BYTES input: request ``i`` must get back its own text."""

    def make(i: int):
        text = f"{unique_sentence(i)} #{i}".encode()
        return {input_name: np.array([[text]], dtype=object)}, text

    return CheckedWorkload(
        model=model,
        output=output,
        make=make,
        expected=lambda text: np.array([[text]], dtype=object),
        check=functools.partial(same_answer, atol=0),
        describe=f"{model}: every request sends a unique text and must get exactly that text back",
    )


def same_answer(got: np.ndarray, want: np.ndarray, atol: float) -> bool:
    """Same shape and values: bytes equal for BYTES tensors, within ``atol`` for numbers."""
    if got.shape != want.shape:
        return False
    if got.dtype == object or want.dtype == object:
        return [bytes(x) for x in got.reshape(-1)] == [bytes(x) for x in want.reshape(-1)]
    return bool(np.allclose(got, want, atol=atol, rtol=0))


def text_embedding_workload(
    http_url: str,
    model: str,
    *,
    input_name: str,
    output: str,
    cases: int = 256,
    atol: float = 2e-4,
) -> CheckedWorkload:
    """A text -> vector model: ``bytes_workload`` of ``cases`` unique sentences (batching pads
    sequences, which changes floats in the 1e-6 range; two sentences differ by far more)."""
    workload = bytes_workload(
        http_url,
        model,
        [unique_sentence(i).encode() for i in range(cases)],
        input_name=input_name,
        output=output,
        atol=atol,
    )
    workload.describe = (
        f"{model}: {cases} unique sentences, each answer compared with the vector the same server "
        f"gave that sentence alone before the load (atol {atol})"
    )
    return workload


def bytes_workload(
    http_url: str,
    model: str,
    cases: list[bytes],
    *,
    input_name: str = "IMAGE_BYTES",
    output: str = "BOXES",
    atol: float = 0.05,
    names: list[str] | None = None,
) -> CheckedWorkload:
    """Encoded files (images) in, an array out: request ``i`` sends case ``i % len(cases)`` and
    must get the ``output`` the same server gave that case alone before the load, within
    ``atol`` (batching changes float results slightly; boxes of different images differ by far more)."""
    names = names or [f"case {i}" for i in range(len(cases))]
    expected: dict[int, np.ndarray] = {}
    with httpclient.InferenceServerClient(http_url, network_timeout=300) as client:
        for i, data in enumerate(cases):
            inputs = make_inputs("http", {input_name: np.array([[data]], dtype=object)})
            expected[i] = client.infer(model, inputs, outputs=make_outputs("http", [output])).as_numpy(output)

    def make(i: int):
        key = i % len(cases)
        return {input_name: np.array([[cases[key]]], dtype=object)}, key

    return CheckedWorkload(
        model=model,
        output=output,
        make=make,
        expected=expected.__getitem__,
        check=functools.partial(same_answer, atol=atol),
        describe=(
            f"{model}: {len(cases)} files ({', '.join(names)}) in turn, each request's {output} compared with "
            f"what the same server gave that file alone before the load (atol {atol})"
        ),
        others=expected,
    )


# -- the load ---------------------------------------------------------------------------------
def percentiles(latencies_ms: list[float]) -> dict:
    """p50 and p99 (ms, 2 decimals) and how many latencies."""
    if not latencies_ms:
        return {"p50_ms": None, "p99_ms": None, "n": 0}
    p50, p99 = np.percentile(latencies_ms, [50, 99])
    return {"p50_ms": round(float(p50), 2), "p99_ms": round(float(p99), 2), "n": len(latencies_ms)}


@dataclass
class RequestRecord:
    """One request: when it started and ended (s, monotonic), and how it ended."""

    start: float
    end: float
    status: str  # ok | error | wrong | timeout
    detail: str = ""


@dataclass
class LoadLog:
    """Everything the checked load saw."""

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
        """The records with ``status`` (``"failed"``: any but ok; None: all) in a time window
        (monotonic seconds); safe to call while the load still appends."""
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
        ok = [r for r in measured if r.status == "ok"]
        problems = [r for r in measured if r.status != "ok"]
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


def run_checked_load(
    workload: CheckedWorkload,
    http_url: str,
    *,
    during: Callable[[LoadLog], None],
    concurrency: int = 64,
    request_timeout_s: float = 60.0,
    backoff_s: float = 0.05,
) -> LoadLog:
    """Hold ``concurrency`` verified requests in flight while ``during(log)`` runs (in the caller's
    thread, so a server it starts is a child of a thread that lives on: PR_SET_PDEATHSIG is per thread)."""
    log = LoadLog()
    stop_flag = threading.Event()
    failure: list[BaseException] = []

    async def checked_load() -> None:
        client = http_aio.InferenceServerClient(http_url, conn_limit=max(concurrency, 1))
        outputs = make_outputs("http", [workload.output])
        counter = iter(range(1 << 62))

        async def worker() -> None:
            while not stop_flag.is_set():
                index = next(counter)
                inputs, key = workload.make(index)
                began = time.monotonic()
                status, detail = "ok", ""
                try:
                    result = await asyncio.wait_for(
                        client.infer(workload.model, make_inputs("http", inputs), outputs=outputs),
                        timeout=request_timeout_s,
                    )
                    got = result_arrays(result, [workload.output])[workload.output]
                    if not workload.check(got, workload.expected(key)):
                        owner = workload.owner_of(got)
                        status = "wrong"
                        detail = f"request {index} (case {key!r}) got " + (
                            f"the answer of case {owner!r}" if owner is not None else "an answer that matches no case"
                        )
                except TimeoutError:
                    status, detail = "timeout", f"no answer within {request_timeout_s} s"
                except Exception as exc:  # noqa: BLE001 - what the client saw is the measurement
                    status, detail = "error", f"{type(exc).__name__}: {str(exc)[:300]}"
                log.records.append(RequestRecord(began, time.monotonic(), status, detail))
                if status != "ok" and backoff_s:
                    await asyncio.sleep(backoff_s)

        try:
            await asyncio.gather(*(worker() for _ in range(concurrency)))
        finally:
            log.ended = time.monotonic()
            await client.close()

    def load() -> None:
        try:
            asyncio.run(checked_load())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            failure.append(exc)

    log.began = time.monotonic()
    thread = threading.Thread(target=load, name="checked-load", daemon=True)
    thread.start()
    try:
        during(log)
    finally:
        stop_flag.set()
        thread.join(timeout=request_timeout_s + 30)
    if failure:
        raise failure[0]
    return log
