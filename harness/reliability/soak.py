"""Soak: hold a fixed concurrency on one entry model for a set time, verifying every answer.

Reports what a long-running service needs to know: errors (must be zero), answers that were
wrong or belonged to another request (must be zero), latency drift (p50/p99 of the first
third of the run against the last third) and the resident memory (RSS) of the server and of
each Python-backend stub process (children of the server) after warm-up and at the end.

Every request is checkable on its own: each carries a unique input whose correct answer is
known before the load starts (``CheckedWorkload``): the ``echo`` test model answers its own
text; a text-embedding model's answer is compared with the vector the same server gave for
that text, alone, before the load began (and a mismatch is also matched against every other
expected vector, so an answer that belongs to another request is named as such).

    python -m harness.reliability.soak                                  # embedding_cpu / embedding_onnx_text, 15 s, c=64
    python -m harness.reliability.soak --duration 600 --json results/reliability/soak.json
    python -m harness.reliability.soak --deployment my_dep --model my_text_model
    python -m harness.reliability.soak --deployment yolo11_ensemble --model yolo11_ensemble --input IMAGE_BYTES \
        --output BOXES --images 'deployments/yolo11_ensemble/fixtures/images/*' --concurrency 8 --duration 1200

The shared pieces (``CheckedWorkload``, ``run_checked_load``, ``subset_repository``,
``process_memory``) are used by ``harness.reliability.faults`` too.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil
import tritonclient.http as httpclient
import tritonclient.http.aio as http_aio

from harness.tensors import make_inputs, make_outputs, result_arrays

RESULTS_DIR = Path(__file__).resolve().parent.parent / "results" / "reliability"

WORDS = (
    "river",
    "lamp",
    "orbit",
    "quiet",
    "granite",
    "violet",
    "harbour",
    "engine",
    "meadow",
    "signal",
    "copper",
    "lantern",
    "glacier",
    "thunder",
    "pepper",
    "circuit",
    "falcon",
    "marble",
    "velvet",
    "canyon",
)


def unique_sentence(index: int) -> str:
    """A distinct short English sentence per index (deterministic)."""
    words = [WORDS[(index // len(WORDS) ** k) % len(WORDS)] for k in range(3)]
    return f"Request {index}: the {words[0]} near the {words[1]} and the {words[2]}."


# -- checkable workloads ---------------------------------------------------------------------
@dataclass
class CheckedWorkload:
    """Requests whose correct answer is known per request.

    ``make(i)`` returns the inputs of request ``i`` and a key; ``expected[key]`` is the
    correct ``{output: array}``; ``check(got, want)`` says whether an answer is right.
    """

    model: str
    output: str
    make: Callable[[int], tuple[dict[str, np.ndarray], object]]
    expected: Callable[[object], np.ndarray]
    check: Callable[[np.ndarray, np.ndarray], bool]
    describe: str = ""
    others: Callable[[], dict] | None = None  # key -> expected, to name whose answer a wrong one is

    def owner_of(self, got: np.ndarray):
        """Which other request's answer ``got`` is, if any (None when it matches nobody's)."""
        if self.others is None:
            return None
        for key, want in self.others().items():
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
        check=lambda got, want: got.shape == want.shape and bytes(got.reshape(-1)[0]) == bytes(want.reshape(-1)[0]),
        describe=f"{model}: every request sends a unique text and must get exactly that text back",
        others=None,
    )


def text_embedding_workload(
    http_url: str,
    model: str,
    *,
    cases: int = 256,
    input_name: str = "TEXT",
    output: str = "EMBEDDING",
    atol: float = 2e-4,
) -> CheckedWorkload:
    """A text -> vector model: ``cases`` unique sentences, each embedded alone before the load.

    During the load request ``i`` sends sentence ``i % cases`` (batched by the server with
    others) and must get the vector it got alone, within ``atol`` (dynamic batching pads
    sequences, which changes float results in the 1e-6 range; two different sentences differ
    by far more).
    """
    expected: dict[int, np.ndarray] = {}
    with httpclient.InferenceServerClient(http_url, network_timeout=120) as client:
        for i in range(cases):
            inputs = make_inputs("http", {input_name: np.array([[unique_sentence(i).encode()]], dtype=object)})
            expected[i] = client.infer(model, inputs, outputs=make_outputs("http", [output])).as_numpy(output)

    def make(i: int):
        key = i % cases
        return {input_name: np.array([[unique_sentence(key).encode()]], dtype=object)}, key

    def check(got: np.ndarray, want: np.ndarray) -> bool:
        return got.shape == want.shape and bool(np.allclose(got, want, atol=atol, rtol=0))

    return CheckedWorkload(
        model=model,
        output=output,
        make=make,
        expected=expected.__getitem__,
        check=check,
        describe=(
            f"{model}: {cases} unique sentences, each answer compared with the vector the same server "
            f"gave that sentence alone before the load (atol {atol})"
        ),
        others=lambda: expected,
    )


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

    def check(got: np.ndarray, want: np.ndarray) -> bool:
        if got.dtype == object or want.dtype == object:
            return got.shape == want.shape and [bytes(x) for x in got.reshape(-1)] == [
                bytes(x) for x in want.reshape(-1)
            ]
        return got.shape == want.shape and bool(np.allclose(got, want, atol=atol, rtol=0))

    return CheckedWorkload(
        model=model,
        output=output,
        make=make,
        expected=expected.__getitem__,
        check=check,
        describe=(
            f"{model}: {len(cases)} files ({', '.join(names)}) in turn, each request's {output} compared with "
            f"what the same server gave that file alone before the load (atol {atol})"
        ),
        others=lambda: expected,
    )


# -- the load ---------------------------------------------------------------------------------
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

    def count(self, status: str, since: float | None = None, until: float | None = None) -> int:
        return sum(
            1
            for r in self.records
            if r.status == status and (since is None or r.end >= since) and (until is None or r.end < until)
        )


async def _checked_load(
    workload: CheckedWorkload,
    http_url: str,
    concurrency: int,
    request_timeout_s: float,
    backoff_s: float,
    log: LoadLog,
    stop_flag: threading.Event,
) -> None:
    client = http_aio.InferenceServerClient(http_url, conn_limit=max(concurrency, 1))
    outputs = make_outputs("http", [workload.output])
    counter = iter(range(1 << 62))
    stop = asyncio.Event()

    async def worker() -> None:
        while not stop.is_set():
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

    async def watch() -> None:
        while not stop_flag.is_set():
            await asyncio.sleep(0.02)
        stop.set()

    try:
        await asyncio.gather(watch(), *(worker() for _ in range(concurrency)))
    finally:
        log.ended = time.monotonic()
        await client.close()


def run_checked_load(
    workload: CheckedWorkload,
    http_url: str,
    *,
    concurrency: int = 64,
    duration_s: float = 10.0,
    request_timeout_s: float = 60.0,
    backoff_s: float = 0.05,
    during: Callable[[LoadLog], None] | None = None,
) -> LoadLog:
    """Hold ``concurrency`` verified requests in flight for ``duration_s``, or while ``during(log)``
    runs (the fault scenarios pass a function that injects a fault, remedies it and waits).

    The load runs in its own thread; ``during`` runs in the caller's thread, so a server it
    starts is a child of a thread that lives on (PR_SET_PDEATHSIG is per thread).
    """
    log = LoadLog()
    stop_flag = threading.Event()
    failure: list[BaseException] = []

    def load() -> None:
        try:
            asyncio.run(_checked_load(workload, http_url, concurrency, request_timeout_s, backoff_s, log, stop_flag))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            failure.append(exc)

    log.began = time.monotonic()
    thread = threading.Thread(target=load, name="checked-load", daemon=True)
    thread.start()
    try:
        if during is None:
            time.sleep(duration_s)
        else:
            during(log)
    finally:
        stop_flag.set()
        thread.join(timeout=request_timeout_s + 30)
    if failure:
        raise failure[0]
    return log


# -- memory -----------------------------------------------------------------------------------
def _label(process: psutil.Process) -> str:
    """``stub:<model>`` for a Python-backend stub (its 2nd argument is the model file), else the name."""
    try:
        cmdline = process.cmdline()
    except psutil.Error:
        return "gone"
    if cmdline and cmdline[0].endswith("triton_python_backend_stub") and len(cmdline) > 1:
        match = re.search(r"([^/]+)/\d+/[^/]+$", cmdline[1])
        return f"stub:{match.group(1) if match else cmdline[1]}"
    return process.name()


def _role(process: psutil.Process) -> str | None:
    """``server`` for tritonserver itself, ``gate`` for the front gate, else None."""
    try:
        cmdline = process.cmdline()
    except psutil.Error:
        return None
    if cmdline and Path(cmdline[0]).name == "tritonserver":
        return "server"
    if "harness.serving.gate" in cmdline:
        return "gate"
    return None


def process_memory(pid: int) -> dict[str, dict]:
    """RSS (MiB) of the process tree under ``pid`` (the launcher's process: tritonserver, or the
    front gate with tritonserver below it), keyed ``server`` (tritonserver), ``gate`` and
    ``<label>#<pid>`` (stubs: ``stub:<model>#<pid>``)."""
    out = {}
    try:
        root = psutil.Process(pid)
        tree = [root] + root.children(recursive=True)
    except psutil.Error:
        return out
    for process in tree:
        try:
            rss = round(process.memory_info().rss / 2**20, 1)
        except psutil.Error:
            continue
        role = _role(process) or ("server" if process.pid == pid else None)
        key = role if role and role not in out else f"{_label(process)}#{process.pid}"
        out[key] = {"pid": process.pid, "rss_mib": rss}
    return out


def stub_processes(pid: int, model: str) -> list[psutil.Process]:
    """The Python-backend stub processes serving ``model`` (children of server ``pid``)."""
    return [p for p in psutil.Process(pid).children(recursive=True) if _label(p) == f"stub:{model}"]


# -- repositories -----------------------------------------------------------------------------
def model_dependencies(repository: Path, models: list[str]) -> list[str]:
    """``models`` plus every model of ``repository`` their configs name (ensemble steps, BLS
    targets given as config parameters), recursively; in repository order."""
    available = {p.name for p in Path(repository).iterdir() if (p / "config.pbtxt").exists()}
    wanted, queue = set(), list(models)
    while queue:
        name = queue.pop()
        if name in wanted:
            continue
        if name not in available:
            raise ValueError(f"{repository} has no model {name!r}")
        wanted.add(name)
        text = (Path(repository) / name / "config.pbtxt").read_text()
        queue += [m for m in re.findall(r'"([^"]+)"', text) if m in available and m not in wanted]
    return sorted(wanted)


def subset_repository(repository: Path, models: list[str], dest: Path | None = None) -> Path:
    """A repository holding only ``models`` and what they call, as links to the original files."""
    dest = Path(dest or tempfile.mkdtemp(prefix="triton-subset-")) / "model_repository"
    dest.mkdir(parents=True, exist_ok=True)
    for name in model_dependencies(Path(repository).resolve(), models):
        (dest / name).mkdir()
        for item in (Path(repository).resolve() / name).iterdir():
            os.symlink(item, dest / name / item.name)
    return dest


# -- reporting --------------------------------------------------------------------------------
def percentiles(latencies_ms: list[float]) -> dict:
    if not latencies_ms:
        return {"p50_ms": None, "p99_ms": None, "n": 0}
    lat = np.asarray(latencies_ms)
    return {
        "p50_ms": round(float(np.percentile(lat, 50)), 2),
        "p99_ms": round(float(np.percentile(lat, 99)), 2),
        "n": int(lat.size),
    }


def summarize_soak(log: LoadLog, warmup_s: float) -> dict:
    """Counts, throughput and the drift of p50/p99 between the first and the last third."""
    measured = [r for r in log.records if r.start >= log.began + warmup_s]
    span = max(log.ended - (log.began + warmup_s), 1e-9)
    t0 = log.began + warmup_s
    thirds = [
        [
            (r.end - r.start) * 1e3
            for r in measured
            if r.status == "ok" and t0 + k * span / 3 <= r.start < t0 + (k + 1) * span / 3
        ]
        for k in range(3)
    ]
    first, last = percentiles(thirds[0]), percentiles(thirds[2])
    drift = {}
    for key in ("p50_ms", "p99_ms"):
        if first[key] and last[key]:
            drift[key.replace("_ms", "_ratio")] = round(last[key] / first[key], 3)
    problems = [r for r in measured if r.status != "ok"]
    return {
        "requests": len(measured),
        "ok": sum(1 for r in measured if r.status == "ok"),
        "errors": sum(1 for r in measured if r.status == "error"),
        "timeouts": sum(1 for r in measured if r.status == "timeout"),
        "wrong_answers": sum(1 for r in measured if r.status == "wrong"),
        "first_problem": problems[0].detail if problems else None,
        "measured_s": round(span, 2),
        "throughput_rps": round(sum(1 for r in measured if r.status == "ok") / span, 1),
        "latency_all": percentiles([(r.end - r.start) * 1e3 for r in measured if r.status == "ok"]),
        "latency_first_third": first,
        "latency_last_third": last,
        "latency_drift": drift,
    }


def memory_growth(start: dict, end: dict) -> dict:
    """Per process present at both points: start, end and growth in MiB; plus the total."""
    rows = {}
    for key, value in start.items():
        if key in end:
            rows[key] = {
                "start_mib": value["rss_mib"],
                "end_mib": end[key]["rss_mib"],
                "growth_mib": round(end[key]["rss_mib"] - value["rss_mib"], 1),
            }
    total_start = sum(v["start_mib"] for v in rows.values())
    total_end = sum(v["end_mib"] for v in rows.values())
    return {
        "processes": rows,
        "total_start_mib": round(total_start, 1),
        "total_end_mib": round(total_end, 1),
        "total_growth_mib": round(total_end - total_start, 1),
        "total_growth_pct": round(100 * (total_end - total_start) / total_start, 1) if total_start else None,
        "gone": sorted(set(start) - set(end)),
        "new": sorted(set(end) - set(start)),
    }


def memory_trend(series: list[dict], key: str) -> dict | None:
    """RSS of one process (``server``, ``gate``, or ``total`` of every process) over the soak:
    value at the start, at each third and at the end, growth per third, and whether it levelled
    off (the last third grew less than 2 MiB or less than a quarter of the first third)."""
    points = [(s["t_s"], s["total_mib"] if key == "total" else s["rss_mib"].get(key)) for s in series]
    points = [(t, v) for t, v in points if v is not None]
    if len(points) < 4:
        return None
    t_end = points[-1][0]
    t0 = points[0][0]

    def at(t: float) -> float:
        return min(points, key=lambda p: abs(p[0] - t))[1]

    marks = [at(t0 + k * (t_end - t0) / 3) for k in range(4)]
    thirds = [round(marks[k + 1] - marks[k], 1) for k in range(3)]
    return {
        "key": key,
        "start_mib": marks[0],
        "end_mib": marks[3],
        "marks_mib": marks,
        "growth_per_third_mib": thirds,
        "max_mib": max(v for _, v in points),
        "levelled": thirds[2] < 2.0 or (thirds[0] > 0 and thirds[2] < 0.25 * thirds[0]),
    }


def run_soak(
    server,
    workload: CheckedWorkload,
    *,
    concurrency: int = 64,
    duration_s: float = 15.0,
    warmup_s: float = 2.0,
    request_timeout_s: float = 60.0,
    sample_every_s: float | None = None,
) -> dict:
    """Soak a running server (``server.process.pid`` gives the memory); returns the report.

    RSS of every process of the server is sampled every ``sample_every_s`` (default: 1/40 of
    the run, at least 1 s) into ``memory_series``, so a long soak shows whether memory levels off."""
    pid = server.process.pid
    memory = {"before": process_memory(pid)}
    every = sample_every_s or max(1.0, duration_s / 40)
    series: list[dict] = []

    def sample(t0: float) -> dict:
        rss = {k: v["rss_mib"] for k, v in process_memory(pid).items()}
        series.append(
            {"t_s": round(time.monotonic() - t0, 1), "rss_mib": rss, "total_mib": round(sum(rss.values()), 1)}
        )
        return rss

    def sample_after_warmup(log: LoadLog) -> None:
        time.sleep(warmup_s)
        t0 = time.monotonic()
        memory["start"] = process_memory(pid)
        sample(t0)
        end = t0 + duration_s
        while time.monotonic() < end:
            time.sleep(min(every, max(0.0, end - time.monotonic())))
            sample(t0)
        memory["end"] = process_memory(pid)

    log = run_checked_load(
        workload,
        server.http_url,
        concurrency=concurrency,
        request_timeout_s=request_timeout_s,
        backoff_s=0.0,
        during=sample_after_warmup,
    )
    report = {
        "scenario": "soak",
        "model": workload.model,
        "workload": workload.describe,
        "concurrency": concurrency,
        "duration_s": duration_s,
        "warmup_s": warmup_s,
        **summarize_soak(log, warmup_s),
        "memory": memory_growth(memory["start"], memory["end"]),
        "memory_before_load": memory["before"],
        "memory_series": series,
        "memory_trend": {k: memory_trend(series, k) for k in ("server", "gate", "total")},
        "gate": bool(getattr(server, "gate", False)),
    }
    report["stub_crashed"] = bool(report["memory"]["gone"])
    return report


def check_soak(report: dict, max_growth_mib: float, max_growth_pct: float, max_p99_drift: float | None) -> list[str]:
    """The soak's pass conditions; returns what failed (empty: passed)."""
    failed = []
    for key in ("errors", "timeouts", "wrong_answers"):
        if report[key]:
            failed.append(f"{report[key]} {key} (first: {report['first_problem']})")
    if not report["ok"]:
        failed.append("no request succeeded")
    growth = report["memory"]["total_growth_mib"]
    bound = max(max_growth_mib, report["memory"]["total_start_mib"] * max_growth_pct / 100)
    if growth > bound:
        failed.append(f"memory grew {growth} MiB, over the bound {bound:.0f} MiB")
    if report["memory"]["gone"]:
        failed.append(f"processes gone during the soak: {report['memory']['gone']}")
    ratio = report["latency_drift"].get("p99_ratio")
    if max_p99_drift and ratio and ratio > max_p99_drift:
        failed.append(f"p99 latency drifted x{ratio} (bound x{max_p99_drift})")
    report["bounds"] = {"max_growth_mib": round(bound, 1), "max_p99_drift": max_p99_drift}
    return failed


def deployment_server(deployment: str, models: list[str], *, model_control_mode: str = "none", target: str = "cpu"):
    """A LocalTritonServer on a subset of a deployment's repository (the models + dependencies)."""
    from harness.deployments import get_deployment
    from harness.serving.launchers import LocalTritonServer

    dep = get_deployment(deployment)
    dep.export()
    repo = subset_repository(dep.model_repository, models)
    every = sorted(p.name for p in repo.iterdir())  # explicit mode loads only what is named: all of them
    options = dep.server_options(
        target, model_repository=str(repo), required_models=every, model_control_mode=model_control_mode
    )
    server = LocalTritonServer(options)
    server.cleanup_dirs = [repo.parent]  # type: ignore[attr-defined]
    return server


def stop_server(server) -> None:
    server.stop()
    for path in getattr(server, "cleanup_dirs", []):
        shutil.rmtree(path, ignore_errors=True)


def write_json(report: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deployment", default="embedding_cpu")
    parser.add_argument("--model", default="embedding_onnx_text", help="an entry model with a TEXT -> vector contract")
    parser.add_argument("--input", default="TEXT")
    parser.add_argument("--output", default="EMBEDDING")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--duration", type=float, default=float(os.environ.get("SOAK_DURATION", 15)))
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--max-growth-mib", type=float, default=64.0)
    parser.add_argument("--max-growth-pct", type=float, default=10.0)
    parser.add_argument(
        "--max-p99-drift",
        type=float,
        default=None,
        help="fail when last-third p99 / first-third p99 exceeds this (default: report only)",
    )
    parser.add_argument(
        "--images",
        nargs="+",
        default=None,
        metavar="GLOB",
        help="files (e.g. JPEGs) sent in turn to an entry model with a bytes input (--input), "
        "instead of sentences; each answer's --output checked against the file's answer alone",
    )
    parser.add_argument("--sample-every", type=float, default=None, help="RSS sampling period, s (default run/40)")
    parser.add_argument("--json", type=Path, default=RESULTS_DIR / "soak.json")
    args = parser.parse_args(argv)

    files = sorted({Path(p) for pattern in args.images or [] for p in glob.glob(pattern)})
    if args.images and not files:
        parser.error(f"--images {args.images} matches no file")
    server = deployment_server(args.deployment, [args.model])
    server.start()
    try:
        server.wait_ready()
        if files:
            workload = bytes_workload(
                server.http_url,
                args.model,
                [f.read_bytes() for f in files],
                input_name=args.input,
                output=args.output,
                names=[f.name for f in files],
            )
        else:
            workload = text_embedding_workload(server.http_url, args.model, input_name=args.input, output=args.output)
        report = run_soak(
            server,
            workload,
            concurrency=args.concurrency,
            duration_s=args.duration,
            warmup_s=args.warmup,
            sample_every_s=args.sample_every,
        )
    finally:
        stop_server(server)
    report["deployment"] = args.deployment
    report["command"] = "python -m harness.reliability.soak " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)
    )
    report["machine"] = {"cpu_count": os.cpu_count(), "load_avg_at_end": [round(x, 2) for x in os.getloadavg()]}
    failed = check_soak(report, args.max_growth_mib, args.max_growth_pct, args.max_p99_drift)
    report["passed"], report["failed"] = not failed, failed
    write_json(report, args.json)
    print(format_soak(report))
    print(f"report: {args.json}")
    return 0 if not failed else 1


def format_soak(r: dict) -> str:
    m = r["memory"]
    lines = [
        f"soak {r.get('deployment', '')}/{r['model']}: concurrency {r['concurrency']} for {r['measured_s']} s "
        f"(after {r['warmup_s']} s warm-up): {r['requests']} requests, {r['ok']} ok, {r['errors']} errors, "
        f"{r['timeouts']} timeouts, {r['wrong_answers']} wrong answers; {r['throughput_rps']} req/s",
        f"latency p50/p99 first third {r['latency_first_third']['p50_ms']}/{r['latency_first_third']['p99_ms']} ms, "
        f"last third {r['latency_last_third']['p50_ms']}/{r['latency_last_third']['p99_ms']} ms "
        f"(drift {r['latency_drift']})",
        f"RSS total {m['total_start_mib']} -> {m['total_end_mib']} MiB ({m['total_growth_mib']:+} MiB, "
        f"{m['total_growth_pct']}%)",
    ]
    for key, row in m["processes"].items():
        lines.append(f"  {key:40s} {row['start_mib']:8.1f} -> {row['end_mib']:8.1f} MiB ({row['growth_mib']:+})")
    for key, trend in (r.get("memory_trend") or {}).items():
        if trend:
            lines.append(
                f"  {key}: growth per third {trend['growth_per_third_mib']} MiB, levelled off: {trend['levelled']}"
            )
    if r.get("failed"):
        lines.append("FAILED: " + "; ".join(r["failed"]))
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
