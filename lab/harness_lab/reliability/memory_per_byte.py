"""How much tritonserver memory an accepted request byte costs, per entry model, and the body
limits that follow (the method and the findings: lab/docs/reliability.md, "Memory per request byte").

    python -m harness memory-per-byte                       # every deployment the harness finds
    python -m harness memory-per-byte <deployment> ... --budget-fraction 0.5 --budget-concurrency 4

Each entry model's real request is grown toward the gate's body limit, one way at a time (batch,
elements, element length, image pixels); only bodies the gate's ``validate_infer`` accepts are sent,
alone then ``--concurrency`` at once, while a thread samples the RSS of tritonserver and its stubs.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import math
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil
import requests
import tritonclient.http as httpclient
from tritonclient.utils import triton_to_np_dtype

from harness import PROJECT_ROOT
from harness.tensors import make_inputs
from harness.testing.processes import served_processes
from harness.testing.servers import deployment_server, started, stop_server
from harness_lab.text_models import is_utf8

MIB = 2**20
RESULTS = PROJECT_ROOT / "results" / "memory-per-byte.json"


def peak_growth(samples: list[float], baseline: float) -> float:
    """Largest rise of ``samples`` over ``baseline`` (0 when none rose above it)."""
    return max([0.0, *(s - baseline for s in samples)])


def bytes_per_byte(growth_bytes: float, request_bytes: int, concurrency: int = 1) -> float:
    """Memory growth per request byte in flight (``concurrency`` requests of ``request_bytes``)."""
    return growth_bytes / (concurrency * request_bytes) if request_bytes > 0 else 0.0


def safe_limit(budget_bytes: float, concurrency: int, ratio: float) -> int | None:
    """Largest body such that ``concurrency`` requests growing ``ratio`` bytes per byte fit the
    budget; None when nothing grew (no bound follows from the measurement)."""
    return int(budget_bytes / (concurrency * ratio)) if ratio > 0 else None


def target_sizes(base: int, limit: int, steps: int = 4, headroom: float = 0.95) -> list[int]:
    """Geometric body sizes above ``base`` up to ``headroom`` x ``limit`` (that last one included)."""
    top = int(limit * headroom)
    if top <= base:
        return []
    ratio = (top / base) ** (1 / steps)
    return sorted({int(base * ratio**k) for k in range(1, steps)} | {top})


def batch_sizes(max_batch: int, steps: int = 3) -> list[int]:
    """Batch sizes 2 .. ``max_batch``, geometric."""
    if max_batch < 2:
        return []
    return sorted({max(2, round(max_batch ** (k / steps))) for k in range(1, steps + 1)})


#: A model measured up to this share of its body limit is judged on what it measured.
COVERED = 0.5


def summarize(
    rows: list[dict],
    current_limit: int,
    *,
    budget_bytes: float,
    concurrency: int,
    min_bytes: int,
    aborted: bool = False,
    complete: bool = False,
) -> dict:
    """A model's worst ratio (rows of at least ``min_bytes``), worst single-request growth, the
    limit that follows, and whether the current limit is safe: no abort; ``concurrency`` times
    the worst request fits the budget; and, unless the sizes sent reached ``COVERED`` x the limit
    or every way of growing ran to its end (``complete``: its largest size, or a gate refusal),
    the limit within the one that follows from the ratio."""
    measured = [r for r in rows if r.get("peak_growth_mib") is not None]
    counted = [r for r in measured if r["request_bytes"] >= min_bytes]
    worst = max(counted, key=lambda r: r["bytes_per_byte"], default=None)
    single = max((r for r in measured if r["concurrency"] == 1), key=lambda r: r["peak_growth_mib"], default=None)
    ratio = worst["bytes_per_byte"] if worst else 0.0
    server_ratio = max(
        (bytes_per_byte(r["server_growth_mib"] * MIB, r["request_bytes"], r["concurrency"]) for r in counted),
        default=0.0,
    )
    limit = safe_limit(budget_bytes, concurrency, ratio)
    largest = max((r["request_bytes"] for r in measured), default=0)
    # Small requests that grow a lot (a flat image of many pixels) are bounded by the models' own
    # limits, not by the body size: the budget must hold ``concurrency`` of those too.
    heavy = single is not None and concurrency * single["peak_growth_mib"] * MIB > budget_bytes
    if aborted or heavy:
        safe, basis = False, "aborted" if aborted else f"{concurrency} x the worst request pass the budget"
    elif largest >= COVERED * current_limit:
        safe, basis = True, "measured up to the limit"
    elif complete:
        safe, basis = True, "its largest accepted requests measured"
    elif counted:
        safe, basis = limit is None or current_limit <= limit, "ratio x limit"
    else:
        safe, basis = None, "not measured near the limit"
    return {
        "worst_bytes_per_byte": round(ratio, 2),
        "worst_server_bytes_per_byte": round(server_ratio, 2),
        "worst_at": {k: worst[k] for k in ("mode", "request_bytes", "concurrency")} if worst else None,
        "worst_request_growth_mib": single["peak_growth_mib"] if single else None,
        "worst_request_at": {k: single[k] for k in ("mode", "request_bytes")} if single else None,
        "largest_accepted_bytes": largest,
        "current_limit_bytes": current_limit,
        "safe_limit_bytes": limit,
        "current_limit_safe": safe,
        "safe_basis": basis,
    }


def _rss(processes: list[psutil.Process]) -> float:
    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.Error:
            pass
    return float(total)


class RssSampler(threading.Thread):
    """Samples RSS of tritonserver + stubs (and, apart, the gate) every ``interval_s``; keeps the
    peaks since ``reset``; calls ``on_over`` once when tritonserver + stubs pass ``bound_bytes``."""

    def __init__(self, root_pid: int, interval_s: float):
        super().__init__(daemon=True)
        self.root_pid, self.interval_s = root_pid, interval_s
        self.bound_bytes, self.on_over = None, None
        self.lock = threading.Lock()
        self.halt = threading.Event()
        self.refresh()
        self.reset()

    def refresh(self) -> None:
        """Find the processes again (a stub restarted, a model loaded)."""
        with self.lock:
            self.processes = served_processes(self.root_pid)

    def read(self) -> dict[str, float]:
        with self.lock:
            server, stubs, gate = (_rss(self.processes[k]) for k in ("server", "stubs", "gate"))
        return {"total": server + stubs, "server": server, "stubs": stubs, "gate": gate}

    def reset(self) -> None:
        self.peaks = self.read()
        self.samples = 1

    def idle(self, seconds: float = 0.3) -> dict[str, float]:
        """Median of each series over ``seconds`` of (presumed) idle."""
        points = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            points.append(self.read())
            time.sleep(self.interval_s)
        return {k: float(np.median([p[k] for p in points])) for k in points[0]}

    def run(self) -> None:
        while not self.halt.wait(self.interval_s):
            now = self.read()
            self.peaks = {k: max(v, self.peaks.get(k, 0.0)) for k, v in now.items()}
            self.samples += 1
            if self.bound_bytes and self.on_over and now["total"] > self.bound_bytes:
                callback, self.on_over = self.on_over, None
                callback(now["total"])


def request_body(inputs: dict[str, np.ndarray], outputs: list[str] | None, parameters: dict | None = None):
    """(body, header length) of a binary-tensor HTTP inference request, as tritonclient sends it."""
    requested = [httpclient.InferRequestedOutput(name, binary_data=True) for name in outputs or []]
    return httpclient.InferenceServerClient.generate_request_body(
        make_inputs("http", inputs), outputs=requested or None, parameters=parameters
    )


def post(url: str, path: str, body: bytes, header_length: int | None, headers: dict, timeout_s: float) -> dict:
    """POST one request; its status, the first bytes of an error and seconds taken."""
    sent = {"Content-Type": "application/octet-stream", **(headers or {})}
    if header_length is not None:
        sent["Inference-Header-Content-Length"] = str(header_length)
    began = time.monotonic()
    try:
        response = requests.post(f"http://{url}{path}", data=body, headers=sent, timeout=timeout_s)
        status, error = (
            response.status_code,
            None if response.status_code == 200 else response.content[:300].decode("utf-8", "replace"),
        )
    except requests.RequestException as exc:
        status, error = None, f"{type(exc).__name__}: {exc}"
    return {"status": status, "error": error, "seconds": round(time.monotonic() - began, 2)}


def _image_kind(data: bytes) -> str | None:
    if data[:3] == b"\xff\xd8\xff":
        return "JPEG"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "PNG"
    return None


def _encoded(pixels: np.ndarray, kind: str, quality: int) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(pixels)).save(out, kind, **({"quality": quality} if kind == "JPEG" else {}))
    return out.getvalue()


def noise_image(kind: str, target_bytes: int, seed: int = 0) -> bytes:
    """A valid image of random pixels whose file is about ``target_bytes`` (more pixels, not padding)."""
    rng = np.random.default_rng(seed)

    def encode(side: int) -> bytes:
        return _encoded(rng.integers(0, 256, (side, side, 3), dtype=np.uint8), kind, 95)

    per_pixel = len(encode(256)) / 256**2
    return encode(max(16, int(math.sqrt(target_bytes / per_pixel))))


def flat_image(kind: str, pixels: int) -> bytes:
    """A valid image of ``pixels`` pixels (square) that compresses to little: large decode, small body."""
    side = max(16, int(math.sqrt(pixels)))
    gradient = np.linspace(0, 255, side, dtype=np.uint8)
    return _encoded(np.stack([np.broadcast_to(gradient, (side, side))] * 3, axis=-1), kind, 90)


def longer_element(data: bytes, target_bytes: int) -> bytes:
    """``data`` grown to about ``target_bytes``: an image with more (noise) pixels, text repeated
    (whole copies, space-separated: still valid UTF-8 text), other bytes repeated."""
    kind = _image_kind(data)
    if kind:
        return noise_image(kind, target_bytes)
    glue = b" " if is_utf8(data) else b""
    copies = max(1, target_bytes // max(1, len(data) + len(glue)))
    return glue.join([data] * copies)


@dataclass
class Grower:
    """One way of growing a request: ``make(target_bytes)`` -> inputs, and the sizes to try."""

    mode: str
    make: object
    targets: list[int] = field(default_factory=list)


def _variable_axis(spec: dict, batched: bool) -> int | None:
    dims = [int(d) for d in spec.get("dims") or []]
    for index, dim in enumerate(dims):
        if dim < 0:
            return index + (1 if batched else 0)
    return None


def _tiled(base: dict[str, np.ndarray], axes: dict[str, int], target: int, base_bytes: int) -> dict:
    """``base`` with each array of ``axes`` repeated along its axis to about ``target`` bytes in all."""
    factor = max(2, target // max(1, base_bytes))
    return {k: (np.concatenate([v] * factor, axis=axes[k]) if k in axes else v) for k, v in base.items()}


def _first_replaced(base: dict[str, np.ndarray], name: str, element: bytes) -> dict:
    grown = base[name].copy()
    grown.flat[0] = element
    return {**base, name: grown}


def growers(config: dict, base: dict[str, np.ndarray], base_bytes: int, limit: int, steps: int) -> list[Grower]:
    """The ways to grow ``base`` for this model's config, each with its target sizes (batch: counts)."""
    max_batch = int(config.get("max_batch_size") or 0)
    batched = max_batch > 0
    specs = {s["name"]: s for s in config.get("input") or []}
    out = []
    if batched and all(a.shape and a.shape[0] == 1 for a in base.values()):
        sizes = [n for n in batch_sizes(max_batch, steps) if n * max(1, base_bytes) < limit]
        out.append(Grower("batch", lambda n: {k: np.repeat(v, n, axis=0) for k, v in base.items()}, sizes))
    targets = target_sizes(base_bytes, limit, steps)
    tensors = {k: _variable_axis(specs.get(k, {}), batched) for k, v in base.items() if v.dtype != np.object_}
    tensors = {k: a for k, a in tensors.items() if a is not None and base[k].shape[a] > 0}
    if tensors:
        tile = functools.partial(_tiled, base, tensors, base_bytes=base_bytes)
        out.append(Grower("length:" + ",".join(sorted(tensors)), tile, targets))
    for name, array in base.items():
        if array.dtype != np.object_ or array.size == 0:
            continue
        first = array.flat[0]
        first = first if isinstance(first, bytes) else str(first).encode()
        other = base_bytes - len(first)
        axis = _variable_axis(specs.get(name, {}), batched)
        if axis is not None:
            more = functools.partial(_tiled, base, {name: axis}, base_bytes=base_bytes)
            out.append(Grower(f"elements:{name}", more, targets))

        def longer(target: int, name=name, first=first, other=other) -> dict:
            return _first_replaced(base, name, longer_element(first, max(1, target - other)))

        out.append(Grower(f"long:{name}", longer, targets))
        if kind := _image_kind(first):
            from triton_helpers.images import DEFAULT_MAX_PIXELS

            def many_pixels(pixels: int, name=name, kind=kind) -> dict:
                return _first_replaced(base, name, flat_image(kind, pixels))

            pixel_steps = [int(DEFAULT_MAX_PIXELS * f) for f in (0.1, 0.4, 0.95)]
            out.append(Grower(f"pixels:{name}", many_pixels, pixel_steps))
    return out


def mixed_requests(
    config: dict, base: dict[str, np.ndarray], max_dims: dict | None, count: int, seed: int = 0
) -> list[dict] | None:
    """``count`` requests of mixed lengths for one burst (seeded): half of them ``base`` as it is,
    half a full batch (``max_batch_size`` rows) of long rows: each text repeated to 1-8 KiB (each row
    its own length), or every tensor with a variable dim tiled to one length between a quarter of
    and all of the gate's bound for it (``max_dims``; else 16 x its length). None for a model
    without batching."""
    max_batch = int(config.get("max_batch_size") or 0)
    if max_batch < 1 or not all(a.shape and a.shape[0] == 1 for a in base.values()):
        return None
    specs = {s["name"]: s for s in config.get("input") or []}
    rng = np.random.default_rng(seed)

    def long_request() -> dict:
        tensors = {}
        length = None
        for name, array in base.items():
            rows = np.repeat(array, max_batch, axis=0)
            if array.dtype == np.object_:
                first = array.flat[0] if isinstance(array.flat[0], bytes) else str(array.flat[0]).encode()
                for index in range(rows.size):
                    rows.flat[index] = longer_element(first, int(rng.integers(1024, 8193)))
            elif (axis := _variable_axis(specs.get(name, {}), True)) is not None and array.shape[axis] > 0:
                bound = ((max_dims or {}).get(name) or [16 * array.shape[axis]])[axis - 1]
                length = length or int(rng.integers(max(1, bound // 4), bound + 1))
                factor = -(-length // array.shape[axis])
                rows = np.take(np.concatenate([rows] * factor, axis=axis), range(length), axis=axis)
            tensors[name] = rows
        return tensors

    kinds = rng.permutation([True] * ((count + 1) // 2) + [False] * (count // 2))
    return [long_request() if long else base for long in kinds]


def synthetic_inputs(config: dict) -> dict[str, np.ndarray]:
    """A minimal request from the config alone (for a model no workload covers): text for BYTES,
    ones for tensors, variable dims 1."""
    batched = int(config.get("max_batch_size") or 0) > 0
    out = {}
    for spec in config.get("input") or []:
        dims = [max(1, int(d)) for d in spec.get("dims") or []]
        shape = ([1] if batched else []) + dims
        datatype = spec.get("data_type", "TYPE_FP32")[5:]
        if datatype == "STRING":
            out[spec["name"]] = np.full(shape, b"memory per byte", dtype=np.object_)
        else:
            out[spec["name"]] = np.ones(shape, dtype=triton_to_np_dtype(datatype))
    return out


def model_workload(deployment, server, model: str):
    """(inputs, outputs, parameters, headers, source) of a real request to ``model``: the first of
    the deployment's benchmark workloads (default config) that calls it, else one from its config."""
    from harness.context import DeploymentContext

    ctx = DeploymentContext(deployment, server)
    for benchmark in deployment.benchmarks:
        if benchmark.config or benchmark.models or "cpu" not in (benchmark.targets or ["cpu"]):
            continue
        try:
            workload = deployment.resolve(benchmark.workload)(ctx)
        except Exception:  # noqa: BLE001 - a workload that cannot be built here: try the next one
            continue
        if workload.model == model:
            inputs = workload.request_inputs()
            return inputs, workload.outputs, workload.parameters, workload.headers, benchmark.workload
    return None


class Measurement:
    """Sends requests to one model of a running gated server and measures RSS growth."""

    def __init__(self, server, sampler: RssSampler, model: str, args):
        self.server, self.sampler, self.model, self.args = server, sampler, model, args
        self.path = f"/v2/models/{model}/infer"

    def send(self, label: str, body: bytes, header_length: int | None, headers: dict, concurrency: int) -> dict:
        return self.send_all(f"{label} {len(body)} B x{concurrency}", [(body, header_length)] * concurrency, headers)

    def send_all(self, label: str, bodies: list[tuple[bytes, int | None]], headers: dict) -> dict:
        """``bodies`` sent at once (one thread each), RSS growth over the idle value just before; printed."""
        self.sampler.refresh()
        before = self.sampler.idle(self.args.idle)
        self.sampler.reset()
        concurrency = len(bodies)
        barrier = threading.Barrier(concurrency)

        def one(made: tuple[bytes, int | None]) -> dict:
            barrier.wait()
            return post(self.server.http_url, self.path, *made, headers, self.args.timeout)

        with ThreadPoolExecutor(concurrency) as pool:
            results = list(pool.map(one, bodies))
        time.sleep(2 * self.args.interval)
        growth = {k: peak_growth([v], before[k]) for k, v in self.sampler.peaks.items()}
        errors = [r["error"] for r in results if r["error"]]
        row = {
            "concurrency": concurrency,
            "request_bytes": max(len(body) for body, _ in bodies),
            "statuses": sorted({str(r["status"]) for r in results}),
            "error": errors[0][:200] if errors else None,
            "seconds_max": max(r["seconds"] for r in results),
            "baseline_mib": round(before["total"] / MIB, 1),
            "peak_growth_mib": round(growth["total"] / MIB, 1),
            **{f"{k}_growth_mib": round(growth[k] / MIB, 1) for k in ("server", "stubs", "gate")},
            "bytes_per_byte": round(bytes_per_byte(growth["total"], sum(len(body) for body, _ in bodies)), 3),
            "samples": self.sampler.samples,
        }
        print(
            f"  {self.model} {label}: +{row['peak_growth_mib']} MiB (tritonserver +{row['server_growth_mib']}, "
            f"stubs +{row['stubs_growth_mib']}; {row['bytes_per_byte']} B/B) {row['statuses']} "
            f"{row['seconds_max']} s {(row['error'] or '')[:80]}",
            flush=True,
        )
        return row


def accepted_body(model: str, config: dict, inputs, outputs, parameters, limit: int, max_dims: dict | None):
    """The body and header length if the gate would accept it, else (None, the gate's reason)."""
    from harness.repository import config_from_json
    from triton_gate.validate import GateError, validate_infer

    body, header_length = request_body(inputs, outputs, parameters)
    if len(body) > limit:
        return None, f"{len(body)} bytes over the gate's limit {limit}"
    try:
        validate_infer(model, config_from_json(config), body, header_length, max_dims)
    except GateError as exc:
        return None, f"gate {exc.status}: {exc.message}"
    return (body, header_length), None


def _current_limit(server, model: str, config: dict) -> tuple[int, dict | None]:
    from harness.repository import config_from_json
    from triton_gate.policy import GatePolicy
    from triton_gate.validate import DEFAULT_MAX_BODY, body_limit

    policy = server.options.gate_policy or GatePolicy()
    default = int(getattr(server, "gate_options", {}).get("max_body_bytes") or DEFAULT_MAX_BODY)
    limit = body_limit(config_from_json(config), default, policy.max_body_bytes.get(model))
    return limit, policy.max_dims.get(model)


class Aborted(Exception):
    pass


def mixed_bursts(measurement, config, inputs, outputs, parameters, headers, limit, max_dims) -> list[dict]:
    """``--mixed-bursts``: for each size, that many ``mixed_requests`` at once; the peak growth, and
    what is still held ``--settle`` seconds after (over the idle value before the burst)."""
    out = []
    for count in measurement.args.mixed_bursts:
        burst = mixed_requests(config, inputs, max_dims, count)
        if not burst:
            break
        made = [accepted_body(measurement.model, config, r, outputs, parameters, limit, max_dims) for r in burst]
        refused = next((reason for body, reason in made if body is None), None)
        if refused:
            out.append({"burst": count, "refused_by_gate": refused})
            break
        row = {"burst": count, "long": sum(r is not inputs for r in burst)}
        row.update(measurement.send_all(f"mixed burst x{count} ({row['long']} long)", [b for b, _ in made], headers))
        time.sleep(measurement.args.settle)
        row["held_after_mib"] = round(
            measurement.sampler.idle(measurement.args.idle)["total"] / MIB - row["baseline_mib"], 1
        )
        out.append(row)
        print(f"  {measurement.model}: held {row['held_after_mib']} MiB {measurement.args.settle} s after", flush=True)
    return out


def measure_model(server, deployment, model: str, args, budget_bytes: float) -> dict:
    """Every grower of ``model`` at its sizes, alone then ``args.concurrency`` at once."""
    with httpclient.InferenceServerClient(server.http_url, network_timeout=30) as client:
        config = client.get_model_config(model)
    limit, max_dims = _current_limit(server, model, config)
    found = model_workload(deployment, server, model) if deployment is not None else None
    if found:
        inputs, outputs, parameters, headers, source = found
    else:
        inputs, outputs, parameters, headers, source = synthetic_inputs(config), None, None, None, "config"
    headers = dict(headers or {})
    rows: list[dict] = []
    report = {"model": model, "workload": source, "max_batch_size": int(config.get("max_batch_size") or 0)}
    over = threading.Event()

    def on_over(total: float) -> None:
        over.set()
        for process in served_processes(server.process.pid)["server"]:
            os.kill(process.pid, signal.SIGKILL)  # our own tritonserver, past the bound

    sampler = RssSampler(server.process.pid, args.interval)
    sampler.start()
    try:
        base, reason = accepted_body(model, config, inputs, outputs, parameters, limit, max_dims)
        if base is None:
            return {**report, "error": f"the workload's own request is refused: {reason}", "rows": rows}
        for _ in range(args.warmup):
            post(server.http_url, f"/v2/models/{model}/infer", *base, headers, args.timeout)
        baseline = sampler.idle(args.idle)
        sampler.bound_bytes, sampler.on_over = baseline["total"] + args.abort_mib * MIB, on_over
        measurement = Measurement(server, sampler, model, args)
        rows.append({"mode": "base", **measurement.send("base", *base, headers, 1)})
        report["mixed_bursts"] = mixed_bursts(
            measurement, config, inputs, outputs, parameters, headers, limit, max_dims
        )
        if over.is_set():
            raise Aborted(f"RSS growth passed {args.abort_mib} MiB in a mixed-length burst")
        began = time.monotonic()
        top = min(limit, args.max_bytes or limit)
        for grower in [] if args.mixed_only else growers(config, inputs, len(base[0]), top, args.steps):
            targets, single_only = list(grower.targets), False
            while targets:
                target = targets.pop(0)
                if time.monotonic() - began > args.model_budget_s:
                    rows.append({"mode": grower.mode, "skipped": f"model time budget {args.model_budget_s} s spent"})
                    break
                made, reason = accepted_body(model, config, grower.make(target), outputs, parameters, limit, max_dims)
                if made is None:
                    rows.append({"mode": grower.mode, "target": target, "refused_by_gate": reason})
                    break
                slow = False
                for concurrency in (1,) if single_only else (1, args.concurrency):
                    if concurrency * len(made[0]) > args.max_in_flight_mib * MIB:
                        continue
                    sent = measurement.send(grower.mode, *made, headers, concurrency)
                    row = {"mode": grower.mode, "target": target, **sent}
                    rows.append(row)
                    if over.is_set():
                        raise Aborted(f"RSS growth passed {args.abort_mib} MiB at {grower.mode} {len(made[0])} B")
                    if row["statuses"] == ["None"]:
                        raise Aborted(f"no answer ({row['error']}) at {grower.mode} {len(made[0])} B")
                    slow = row["seconds_max"] * (args.concurrency if concurrency == 1 else 1) > 2 * args.slow_s
                    if slow:
                        break
                if slow and not single_only and targets:
                    # The sizes between would take long; the largest (often refused by the model's
                    # own limits, after the gate accepted it) is still sent, alone.
                    rows.append({"mode": grower.mode, "skipped": f"sizes {targets[:-1]}: too slow; the largest alone"})
                    targets, single_only = targets[-1:], True
                elif slow:
                    break
        report["retained_mib"] = round((sampler.idle(args.idle)["total"] - baseline["total"]) / MIB, 1)
    except Aborted as exc:
        report["aborted"] = str(exc)
    finally:
        sampler.halt.set()
    report.update(rows=rows, current_limit_bytes=limit)
    return report | model_summary(report, budget_bytes, args.budget_concurrency, args.min_bytes)


def measure_deployment(deployment, args, budget_bytes: float, models: list[str] | None = None) -> list[dict]:
    """Every entry model of ``deployment`` (or those of ``models``), each on a fresh server unless
    ``--shared-server`` (then a fresh one after a model that was aborted); a server that does not
    start fails that model only."""
    reports = []
    server = None
    try:
        for model in [m for m in deployment.entry_models if not models or m in models]:
            if server is not None and (args.fresh_server or not server.is_running()):
                stop_server(server)  # a server of its own: no memory held from an earlier model's requests
                server = None
            print(f"{deployment.name}/{model}", flush=True)
            try:
                server = server or started(deployment_server(deployment, overrides=args.triton_config))
                report = measure_model(server, deployment, model, args, budget_bytes)
            except Exception as exc:  # noqa: BLE001 - one model's failure must not hide the others
                report = {"model": model, "error": f"{type(exc).__name__}: {str(exc)[:300]}", "rows": []}
            reports.append({"deployment": deployment.name, **report})
            if report.get("aborted") and server is not None:
                stop_server(server)
                server = None
    finally:
        if server is not None:
            stop_server(server)
    return reports


def _mb(value: int | None) -> str:
    return "-" if value is None else f"{value / MIB:,.1f}"


def markdown(report: dict) -> str:
    lines = [
        f"Budget: {report['budget_fraction']:.0%} of {report['machine_memory_gib']} GiB = "
        f"{report['budget_gib']} GiB for {report['budget_concurrency']} concurrent worst-case requests; "
        f"ratio over bodies >= {report['min_bytes'] // 1024} KiB.",
        "",
        "| deployment | model | worst MiB per MiB (at) | tritonserver alone | worst one request "
        "| held after | largest accepted MiB | current limit MiB | safe limit MiB | current limit safe? |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in report["models"]:
        if m.get("error") and not m.get("rows"):
            lines.append(f"| {m['deployment']} | {m['model']} | error: {m['error'][:80]} | | | | | | | |")
            continue
        at = m.get("worst_at") or {}
        where = f" ({at['mode']}, {_mb(at['request_bytes'])} MiB x{at['concurrency']})" if at else ""
        one = m.get("worst_request_at") or {}
        single = (
            f"+{m['worst_request_growth_mib']:,.0f} MiB ({one['mode']}, {_mb(one['request_bytes'])} MiB)"
            if one
            else "-"
        )
        safe = {True: "yes", False: "**no**", None: "n/a"}[m.get("current_limit_safe")]
        safe += f" ({m['aborted'] if m.get('aborted') else m.get('safe_basis')})"
        held = "-" if m.get("retained_mib") is None else f"{m['retained_mib']:,.0f} MiB"
        lines.append(
            f"| {m['deployment']} | {m['model']} | {m.get('worst_bytes_per_byte', 0):.2f}{where} "
            f"| {m.get('worst_server_bytes_per_byte', 0):.2f} | {single} | {held} "
            f"| {_mb(m.get('largest_accepted_bytes'))} | {_mb(m.get('current_limit_bytes'))} "
            f"| {_mb(m.get('safe_limit_bytes'))} | {safe} |"
        )
    bursts = [(m, b) for m in report["models"] for b in m.get("mixed_bursts") or [] if "peak_growth_mib" in b]
    if bursts:
        lines += [
            "",
            "| deployment | model | mixed burst (long) | growth MiB | tritonserver | stubs | held after MiB | seconds |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for m, b in bursts:
            lines.append(
                f"| {m['deployment']} | {m['model']} | {b['burst']} ({b['long']}) | {b['peak_growth_mib']:,.0f} "
                f"| {b['server_growth_mib']:,.0f} | {b['stubs_growth_mib']:,.0f} | {b['held_after_mib']:,.0f} "
                f"| {b['seconds_max']} |"
            )
    return "\n".join(lines)


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness memory-per-byte", description=__doc__.split("\n\n")[0])
    parser.add_argument("deployments", nargs="*", help="default: every deployment the harness finds")
    parser.add_argument("--models", nargs="*", help="only these entry models")
    parser.add_argument("--concurrency", type=int, default=4, help="requests at once after each single one")
    parser.add_argument("--steps", type=int, default=4, help="sizes per way of growing")
    parser.add_argument("--interval", type=float, default=0.01, help="RSS sampling interval, s")
    parser.add_argument("--idle", type=float, default=0.3, help="idle seconds read before each request")
    parser.add_argument("--warmup", type=int, default=3, help="base requests before the baseline")
    parser.add_argument("--timeout", type=float, default=120.0, help="per request, s")
    parser.add_argument(
        "--slow-s", type=float, default=30.0, help="stop growing a way once its requests at once would take 2x longer"
    )
    parser.add_argument("--model-budget-s", type=float, default=180.0, help="seconds of growing per model")
    parser.add_argument("--max-in-flight-mib", type=float, default=1024.0, help="skip a level over this many MiB")
    parser.add_argument("--abort-mib", type=float, default=6144.0, help="kill tritonserver past this growth")
    parser.add_argument(
        "--shared-server",
        dest="fresh_server",
        action="store_false",
        help="one server per deployment (default: a fresh server per model, no memory held from another model)",
    )
    parser.add_argument(
        "--mixed-bursts",
        type=int,
        nargs="*",
        default=[4, 16],
        help="burst sizes of mixed-length requests (half the workload's, half a full batch of long rows)",
    )
    parser.add_argument("--settle", type=float, default=5.0, help="seconds after a mixed burst before 'held after'")
    parser.add_argument("--mixed-only", action="store_true", help="only the mixed-length bursts, no growing")
    parser.add_argument(
        "--triton-config",
        type=json.loads,
        default=None,
        help='config overrides (harness.variants), e.g. \'{"embedding_onnx": {"parameters": {"max_batch_tokens": ""}}}\'',
    )
    parser.add_argument("--max-bytes", type=int, default=None, help="grow no further (default: the gate's limit)")
    parser.add_argument("--min-bytes", type=int, default=1 << 20, help="smallest body counted in the ratio")
    parser.add_argument("--budget-fraction", type=float, default=0.5, help="share of machine memory for requests")
    parser.add_argument("--budget-concurrency", type=int, default=4, help="worst-case requests at once")
    parser.add_argument("--json", type=Path, default=RESULTS)
    parser.add_argument(
        "--update", action="store_true", help="replace only the models measured now in an existing --json"
    )
    parser.add_argument("--report", type=Path, default=None, help="print the table of a JSON written earlier; no run")
    return parser


def model_summary(m: dict, budget_bytes: float, concurrency: int, min_bytes: int) -> dict:
    """``summarize`` of one model's report: complete when it ran to its end and skipped no size."""
    complete = "retained_mib" in m and not any("skipped" in r for r in m["rows"])
    return summarize(
        m["rows"],
        m["current_limit_bytes"],
        budget_bytes=budget_bytes,
        concurrency=concurrency,
        min_bytes=min_bytes,
        aborted=bool(m.get("aborted")),
        complete=complete,
    )


def resummarize(report: dict) -> dict:
    """``report`` (a JSON this tool wrote) with each model's summary computed again from its rows."""
    budget = report.get("budget_bytes") or report["budget_gib"] * 2**30
    for m in report["models"]:
        if "rows" in m and "current_limit_bytes" in m:
            m.update(model_summary(m, budget, report["budget_concurrency"], report["min_bytes"]))
    return report


def main(argv: list[str] | None = None) -> int:
    args = arguments().parse_args(argv)
    if args.report:
        print(markdown(resummarize(json.loads(args.report.read_text()))))
        return 0

    from harness.deployments import discover, get_deployment

    chosen = [get_deployment(name) for name in args.deployments] if args.deployments else discover()
    memory = psutil.virtual_memory().total
    budget = memory * args.budget_fraction
    models = []
    for deployment in chosen:
        try:
            models += measure_deployment(deployment, args, budget, args.models)
        except Exception as exc:  # noqa: BLE001 - a deployment that does not serve now: the others still run
            models.append({"deployment": deployment.name, "model": "*", "error": f"{type(exc).__name__}: {exc}"})
        print(f"{deployment.name}: done", flush=True)
    report = {
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "machine": f"{os.uname().nodename}, {psutil.cpu_count()} cores, {memory / 2**30:.1f} GiB",
        "command": "python -m harness memory-per-byte " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine_memory_gib": round(memory / 2**30, 1),
        "budget_fraction": args.budget_fraction,
        "budget_gib": round(budget / 2**30, 1),
        "budget_bytes": budget,
        "budget_concurrency": args.budget_concurrency,
        "concurrency": args.concurrency,
        "min_bytes": args.min_bytes,
        "interval_s": args.interval,
        "models": models,
    }
    if args.update and args.json.exists():
        earlier = json.loads(args.json.read_text())
        measured = {(m["deployment"], m["model"]) for m in models}
        redone = {d.name for d in chosen}
        kept = [
            m
            for m in earlier["models"]
            if (m["deployment"], m["model"]) not in measured and not (m["model"] == "*" and m["deployment"] in redone)
        ]
        report["models"] = kept + models
        report["runs"] = [*earlier.get("runs", [earlier["measured_at"]]), report["measured_at"]]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(markdown(resummarize(report)))
    print(f"report: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
