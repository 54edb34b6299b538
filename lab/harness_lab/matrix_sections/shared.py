"""What the lab's sections share: the latest run of a comparison, round-by-round quotients and the
load phrase of a run."""

from __future__ import annotations

import statistics
from collections import defaultdict

from harness.measuring.matrix.cells import stamp


def latest_run(records: list[dict], comparison: str, keep=lambda run: True) -> list[dict]:
    """The records of the latest run (one ``run_id``) whose records say ``comparison`` and that ``keep(run)``."""
    runs: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        if record.get("comparison") == comparison:
            runs[record.get("run_id")].append(record)
    kept = [run for run in runs.values() if keep(run)]
    return max(kept, key=lambda run: max(stamp(r) for r in run)) if kept else []


def round_quotients(top: list[float], bottom: list[float]) -> list[float]:
    """``top / bottom`` round by round (a round whose ``bottom`` is 0 left out)."""
    return [a / b for a, b in zip(top, bottom) if b]


def median(values: list[float]) -> float | None:
    """The median, None of no values."""
    return statistics.median(values) if values else None


def load(records: list[dict]) -> str:
    loads = [r["load_average_1m"] for r in records if r.get("load_average_1m") is not None]
    return f"load {min(loads):.1f}-{max(loads):.1f}" if loads else "load not recorded"
