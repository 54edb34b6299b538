"""Memory of a served process tree: RSS of tritonserver, the front gate and each Python-backend
stub, sampled once (``process_memory``) or compared over a run (``memory_growth``, ``memory_trend``)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import psutil


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


def rss_sample(pid: int, t0: float) -> dict:
    """One point of a memory series: seconds since ``t0`` (monotonic), RSS MiB per process, total."""
    rss = {k: v["rss_mib"] for k, v in process_memory(pid).items()}
    return {"t_s": round(time.monotonic() - t0, 1), "rss_mib": rss, "total_mib": round(sum(rss.values()), 1)}


def stub_processes(pid: int, model: str) -> list[psutil.Process]:
    """The Python-backend stub processes serving ``model`` (children of server ``pid``)."""
    return [p for p in psutil.Process(pid).children(recursive=True) if _label(p) == f"stub:{model}"]


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
