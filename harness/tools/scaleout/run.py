"""The multi-replica run (``make scaleout``): throughput with 1, 2, 3 replicas, a replica killed under
load, and a new model version rolled across the replicas under load, through nginx.

Load: an asyncio client (aiohttp) holding ``concurrency`` HTTP/JSON inference requests in flight
against nginx, every response checked (an embedding of the first one's size, equal to it).
Client retry policy (``RETRY``): a request is tried up to 3 times; it is retried on a connection
error or an HTTP 502/503/504, 50 ms after the failure; a 4xx or any other answer is final. A
request is *lost* when all its tries fail. nginx itself retries a request on the next replica when
the connection fails or is reset (``harness.tools.scaleout.compose``): those retries are counted from
its access log.

Results: ``results/scaleout/<deployment>.json`` (and printed).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness import PROJECT_ROOT
from harness.deployments import get_deployment
from harness.measuring.records import machine
from harness.tools.scaleout.compose import ScaleoutError, Stack

RETRY = {
    "tries": 3,
    "retry_on": ["connection error", "HTTP 502", "HTTP 503", "HTTP 504"],
    "backoff_s": 0.05,
    "timeout_s": 30,
}
SENTENCE = "Triton serves this sentence from one of several replicas behind nginx."
RESULTS = PROJECT_ROOT / "results" / "scaleout"


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


def infer_body(text: str = SENTENCE) -> bytes:
    return json.dumps(
        {
            "inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": [text]}],
            "outputs": [{"name": "EMBEDDING"}],
        }
    ).encode()


class Load:
    """``concurrency`` requests in flight against ``url`` in a background thread until ``stop()``."""

    def __init__(self, url: str, model: str, concurrency: int, body: bytes | None = None, dims: int | None = None):
        self.url = f"{url}/v2/models/{model}/infer"
        self.concurrency = concurrency
        self.body = body or infer_body()
        #: The vector size every answer must have (default: the first answer's).
        self.dims = dims
        self.outcomes: list[Outcome] = []
        self.reference: np.ndarray | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def check(self, payload: dict) -> str | None:
        """None when the response is a correct embedding, else what is wrong."""
        outputs = {o["name"]: o for o in payload.get("outputs", [])}
        if "EMBEDDING" not in outputs:
            return f"no EMBEDDING in {list(outputs)}"
        vector = np.asarray(outputs["EMBEDDING"]["data"], dtype=np.float32)
        if not vector.size:
            return "EMBEDDING is empty"
        if self.dims is None:
            self.dims = vector.size
        if vector.shape != (self.dims,) or not np.all(np.isfinite(vector)):
            return f"EMBEDDING of shape {vector.shape} or not finite"
        if self.reference is None:
            self.reference = vector
        elif float(np.dot(vector, self.reference) / np.linalg.norm(vector) / np.linalg.norm(self.reference)) < 0.9999:
            return "EMBEDDING differs from the first response"
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


def served_by(outcomes: list[Outcome], stack: Stack) -> dict[str, int]:
    """Successful requests per replica (the last upstream nginx used)."""
    by_address = {f"{stack.address(n)}:8000": n for n in stack.names}
    counts = {n: 0 for n in stack.names}
    for o in outcomes:
        if o.ok and o.upstream:
            counts[by_address.get(o.upstream.split(",")[-1].strip(), "other")] = (
                counts.get(by_address.get(o.upstream.split(",")[-1].strip(), "other"), 0) + 1
            )
    return counts


# ---------------------------------------------------------------------------------------- scenarios


def throughput(stack: Stack, concurrency: int, duration_s: float, warmup_s: float = 2.0) -> list[dict]:
    """The same offered load (``concurrency`` in flight) through nginx to 1, 2, ... N replicas."""
    rows = []
    for count in range(1, stack.replicas + 1):
        stack.serve_only(stack.names[:count])
        load = Load(stack.url, stack.models[0], concurrency).start()
        time.sleep(warmup_s)
        began = time.time()
        time.sleep(duration_s)
        ended = time.time()
        outcomes = load.stop()
        window = [o for o in outcomes if began <= o.ended <= ended]
        rows.append(
            {
                "replicas": count,
                "concurrency": concurrency,
                "duration_s": duration_s,
                **summarize(window),
                "served_by": served_by(window, stack),
                "host_load_avg_1m": round(os.getloadavg()[0], 1),
            }
        )
        print(
            f"scaleout: {count} replica(s), c={concurrency}: {rows[-1]['infer_per_s']} infer/s, "
            f"p99 {rows[-1]['p99_ms']} ms, lost {rows[-1]['lost']}",
            flush=True,
        )
    stack.serve_only(stack.names)
    return rows


def kill_under_load(
    stack: Stack,
    concurrency: int,
    before_s: float = 4.0,
    after_s: float = 12.0,
    victim: str | None = None,
    rejoin: bool = True,
) -> dict:
    """SIGKILL one replica while ``concurrency`` requests are in flight; what the client and nginx saw."""
    victim = victim or stack.names[-1]
    stack.serve_only(stack.names)
    stack.reset_access_log()
    load = Load(stack.url, stack.models[0], concurrency).start()
    time.sleep(before_s)
    served_before = served_by(list(load.outcomes), stack)
    asked_at, killed_at = stack.kill(victim)
    time.sleep(after_s)
    outcomes = load.stop()
    log = stack.access_log()
    dead = f"{stack.address(victim)}:8000"
    touched = [e for e in log if dead in e["upstream"] and e["t"] >= asked_at]
    failed_over = [e for e in touched if "," in e["upstream"]]
    # The first burst: requests in flight on the victim or sent to it before nginx marked it failed.
    burst = [e for e in failed_over if e["t"] - asked_at < stack.fail_timeout_s]
    probes = [e for e in failed_over if e["t"] - asked_at >= stack.fail_timeout_s]
    after = [o for o in outcomes if o.began >= killed_at]
    result = {
        "victim": victim,
        "replicas": stack.replicas,
        "concurrency": concurrency,
        "kill_asked_at": asked_at,
        "killed_at": killed_at,
        "docker_kill_s": round(killed_at - asked_at, 3),
        "before_s": before_s,
        "after_s": after_s,
        "client": summarize(outcomes),
        "before_kill": summarize(outcomes, ended=asked_at),
        "after_kill": summarize(outcomes, began=killed_at),
        "served_by_before_kill": served_before,
        "served_by_after_kill": served_by(after, stack),
        "nginx_failovers_total": len(failed_over),
        "nginx_failovers_first_burst": len(burst),
        # From the kill to the last request nginx sent to the dead replica before marking it failed.
        "traffic_moved_s": round(max((e["t"] - asked_at for e in burst), default=0.0), 3),
        "nginx_probes_of_dead_replica": len(probes),
        "probe_latency_max_ms": round(max((e["request_time"] * 1000 for e in probes), default=0.0), 1),
        "nginx_5xx_to_client": sum(1 for e in log if e["t"] >= asked_at and e["status"] >= 500),
    }
    if rejoin:
        began = time.monotonic()
        stack.compose("up", "-d", "--no-deps", victim)
        stack.wait_healthy([victim], deadline_s=600)
        result["victim_healthy_again_s"] = round(time.monotonic() - began, 1)
    print(
        f"scaleout: killed {victim} under c={concurrency}: lost {result['client']['lost']} of "
        f"{result['client']['requests']} (client retries {result['client']['retried_by_client']}, nginx failovers "
        f"{len(failed_over)}), traffic moved in {result['traffic_moved_s']} s",
        flush=True,
    )
    return result


def roll_version(stack: Stack, concurrency: int, version: str = "v2", drain_deadline_s: float = 30.0) -> dict:
    """Replace every replica, one at a time, with one serving the new model version, under load:
    drain it at nginx, wait for its in-flight requests to finish, recreate, wait healthy, re-admit."""
    stack.serve_only(stack.names)
    load = Load(stack.url, stack.models[0], concurrency).start()
    time.sleep(2.0)
    steps = []
    began = time.time()
    for name in stack.names:
        step = {"replica": name}
        t = time.monotonic()
        stack.serve_only([n for n in stack.names if n != name])
        deadline = time.monotonic() + drain_deadline_s
        while stack.pending(name) > 0:
            if time.monotonic() > deadline:
                raise ScaleoutError(f"{name} still has requests in flight {drain_deadline_s:.0f} s after its drain")
            time.sleep(0.2)
        step["drained_s"] = round(time.monotonic() - t, 2)
        t = time.monotonic()
        stack.recreate(name, version)
        stack.wait_healthy([name], deadline_s=600)
        step["replaced_and_healthy_s"] = round(time.monotonic() - t, 1)
        stack.serve_only(stack.names)
        steps.append(step)
        print(f"scaleout: rolled {name} to {version}: {step}", flush=True)
    finished = time.time()
    time.sleep(3.0)
    outcomes = load.stop()
    versions_after = sorted({o.version for o in outcomes if o.ok and o.began > finished + 0.5})
    by_version = {}
    for o in outcomes:
        if o.ok:
            by_version[o.version] = by_version.get(o.version, 0) + 1
    result = {
        "replicas": stack.replicas,
        "concurrency": concurrency,
        "to": version,
        "steps": steps,
        "roll_s": round(finished - began, 1),
        "client": summarize(outcomes),
        "responses_by_model_version": by_version,
        "versions_served_after_roll": versions_after,
        "last_version_1_response_s_after_roll_start": round(
            max((o.ended - began for o in outcomes if o.ok and o.version == "1"), default=0.0), 1
        ),
    }
    print(
        f"scaleout: rolled {version} across {stack.replicas} replicas in {result['roll_s']} s: lost "
        f"{result['client']['lost']} of {result['client']['requests']}, by version {by_version}",
        flush=True,
    )
    return result


def run(
    deployment: str,
    replicas: int = 3,
    concurrency: int = 8,
    duration_s: float = 10.0,
    scenarios: tuple[str, ...] = ("throughput", "kill", "roll"),
    keep: bool = False,
    out: Path | None = None,
    gate: bool = True,
) -> dict:
    """Bring the stack up, run the scenarios, write the results JSON, bring it down."""
    stack = Stack(get_deployment(deployment), replicas=replicas, gate=gate)
    results = {
        "deployment": stack.deployment.name,
        "replicas": replicas,
        "models": list(stack.models),
        "image": stack.image,
        "gate": gate,
        "retry_policy": RETRY,
        "machine": machine(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": f"python -m harness.tools.scaleout run --deployment {deployment} --replicas {replicas} "
        f"--concurrency {concurrency} --duration {duration_s:g} --scenarios {' '.join(scenarios)}"
        + ("" if gate else " --no-gate"),
    }
    stack.prepare()
    results["lb_image"] = stack.lb
    results["nginx"] = {"fail_timeout_s": stack.fail_timeout_s, "connect_timeout_s": 1, "next_upstream_tries": 3}
    try:
        results["up_s"] = round(stack.up(), 1)
        print(
            f"scaleout: {replicas} replicas of {deployment} healthy behind nginx at {stack.url} in {results['up_s']} s",
            flush=True,
        )
        if "throughput" in scenarios:
            results["throughput"] = throughput(stack, concurrency, duration_s)
        if "kill" in scenarios:
            results["kill"] = kill_under_load(stack, concurrency)
        if "roll" in scenarios:
            results["roll"] = roll_version(stack, concurrency)
    finally:
        if not keep:
            stack.down()
    out = out or RESULTS / f"{stack.deployment.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"scaleout: results in {out}", flush=True)
    return results
