"""Beyond one machine: multi-replica runs of the committed swarm stacks (``swarm``, ``run``, ``nodes``). Command line: ``python -m harness scaleout``."""

import socket
import subprocess
import time

import numpy as np

from harness.measuring.loadgen import Load, RequestRecord, Retry
from harness_lab.text_models import sentence_workload, text_tensors

#: The client's retry policy under the scale-out load: a request is lost when all its tries fail.
RETRY = Retry(
    tries=3,
    retry_on=("connection error", "no answer", "HTTP 502", "HTTP 503", "HTTP 504"),
    backoff_s=0.05,
    timeout_s=30,
)
SENTENCE = "Triton serves this sentence from one of several replicas behind a balancer."


class ScaleoutError(RuntimeError):
    """The stack cannot be brought up or driven as asked; one line that says what to do."""


def wait_for(predicate, deadline_s: float, what: str, period_s: float = 0.5):
    """``predicate()``'s first true value, tried every ``period_s``; ScaleoutError after ``deadline_s``."""
    deadline = time.monotonic() + deadline_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise ScaleoutError(f"{what}: not within {deadline_s:.0f} s")
        time.sleep(period_s)


def docker(*args: str, timeout_s: float = 300, check: bool = True) -> str:
    """``docker <args>``'s stdout; ``check``: ScaleoutError when it fails."""
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout_s)
    if check and done.returncode != 0:
        raise ScaleoutError(f"docker {' '.join(args[:3])} failed: {(done.stderr or done.stdout).strip()[-600:]}")
    return done.stdout


def host_address(towards: str = "10.255.255.255") -> str:
    """The local address the kernel sends from towards ``towards``; by default the one the swarm
    advertises (the host's address on its default route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect((towards, 1))
            return sock.getsockname()[0]
        except OSError:
            return "127.0.0.1"


def stack_load(stack, concurrency: int) -> Load:
    """The checked load on the stack's balancer (KServe v2 JSON, so its ``X-Upstream`` header is seen)
    and its entry model (``stack.models[0]``), tensors from its config; times are ``time.time()``."""
    model = stack.models[0]
    workload = sentence_workload(model, text_tensors(stack.deployment.model_repository, model), SENTENCE)
    workload.retry = RETRY
    return Load(workload, stack.url, protocol="json", concurrency=concurrency, clock=time.time)


def summarize(records: list[RequestRecord], began: float | None = None, ended: float | None = None) -> dict:
    """Requests, failures, tries and latency of the records that ended in [began, ended]."""
    chosen = [r for r in records if (began is None or r.end >= began) and (ended is None or r.end <= ended)]
    ok = [r for r in chosen if r.ok]
    latencies = np.array([(r.end - r.start) * 1000 for r in ok]) if ok else np.array([np.nan])
    span = (max(r.end for r in chosen) - min(r.end for r in chosen)) if len(chosen) > 1 else 0.0
    return {
        "requests": len(chosen),
        "lost": len(chosen) - len(ok),
        "retried_by_client": sum(1 for r in chosen if r.tries > 1),
        "infer_per_s": round(len(ok) / span, 2) if span else None,
        "p50_ms": round(float(np.percentile(latencies, 50)), 1),
        "p99_ms": round(float(np.percentile(latencies, 99)), 1),
        "max_ms": round(float(np.max(latencies)), 1),
        "first_error": next((r.detail for r in chosen if not r.ok), None),
        "client_retry_causes": sorted({(r.first_try_error or "")[:120] for r in chosen if r.tries > 1}),
    }
