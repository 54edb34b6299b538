"""Memory of a served process tree over a run: one point of a series (``rss_sample``, from
``harness.testing.processes.process_memory``) and what a run did to it (``memory_growth``, ``memory_trend``)."""

from __future__ import annotations

import time

from harness.testing.processes import process_memory


def rss_sample(pid: int, t0: float) -> dict:
    """One point of a memory series: seconds since ``t0`` (monotonic), RSS MiB per process, total."""
    rss = {k: v["rss_mib"] for k, v in process_memory(pid).items()}
    return {"t_s": round(time.monotonic() - t0, 1), "rss_mib": rss, "total_mib": round(sum(rss.values()), 1)}


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
