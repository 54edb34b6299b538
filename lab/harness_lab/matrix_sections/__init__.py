"""The lab's sections of the results matrix (entry point ``triton_harness.matrix_sections``,
lab/pyproject.toml; the core's matrix finds them there and names none of them): the side-by-side
section and serving lesson (``side_by_side.py``), the front gate's row of the costs lesson
(``make gate-cost``'s reports)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from harness.measuring.matrix.headlines import cost_row
from harness.measuring.matrix.sections import CostKind, Sections
from harness_lab.matrix_sections import side_by_side


def gate_reports(results_dir: Path) -> list[dict]:
    """``make gate-cost``'s reports (``<results>/reliability/gate_cost*.json``)."""
    reports = []
    for path in sorted((results_dir / "reliability").glob("gate_cost*.json")):
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(report, dict) and report.get("rows"):
            reports.append({**report, "file": path.name})
    return reports


def gate_rows(matrix: dict, results_dir: Path) -> list[dict]:
    """Per report the median of the per-round quotients of items/s with / without the gate."""
    rows = []
    for report in gate_reports(results_dir):
        rounds: dict[int, dict[bool, float]] = defaultdict(dict)
        for r in report["rows"]:
            rounds[int(r["round"])][bool(r["gate"])] = float(r["throughput_rps"])
        values = [r[True] / r[False] for r in rounds.values() if r.get(False) and True in r]
        if values:
            name = report.get("deployment")
            label = f"{name}: {report.get('model')} gate / direct (c={report.get('concurrency')})"
            over = f"{len(values)} rounds, {str(report.get('measured_at', ''))[:10]}"
            rows.append(cost_row("gate", name, label, values, over, []))
    return rows


GATE = CostKind(
    "gate",
    "The front gate (items/s with / without it)",
    "the gate",
    "make gate-cost && make matrix",
    "tab:green",
    "front gate",
    gate_rows,
)


class LabSections(Sections):
    lessons = (side_by_side.LESSON,)
    costs = (GATE,)

    def markdown(self, records: list[dict]) -> list[str]:
        return side_by_side.render(records)

    def json(self, records: list[dict]) -> dict:
        run = side_by_side.latest_peers_run(records)
        return {"side_by_side": {"records": run, "ratios": side_by_side.ratios(run)}}


SECTIONS = LabSections()
