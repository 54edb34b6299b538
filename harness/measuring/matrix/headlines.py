"""The first screen of ``docs/results.md``: each lesson one sentence with its measured ratio, one
figure and the command that reproduces it. The installed distributions' lessons come first, then
the core's ``costs`` (server-side processing, the container, and the distributions' cost rows)."""

from __future__ import annotations

import statistics
from pathlib import Path

from harness.measuring.matrix.cells import freshness_note
from harness.measuring.matrix.fmt import ratio, spread
from harness.measuring.matrix.pairs import container_cost
from harness.measuring.matrix.rows import NOT_MEASURED
from harness.measuring.matrix.sections import CostKind


def machine(record: dict) -> str:
    machine = record.get("machine") or {}
    return f"{machine.get('cpu_model', 'unknown CPU')}, {machine.get('cpu_cores')} cores"


# -- the costs lesson: what processing on the server and the container cost -------------------
def cost_row(kind: str, deployment, label: str, values: list[float], over: str, records: list[dict]) -> dict:
    """One ratio of the costs lesson: its median and spread over ``values`` (rounds or cells)."""
    return {
        "kind": kind,
        "deployment": deployment,
        "label": label,
        "median": statistics.median(values),
        "spread": values,
        "over": over,
        "records": records,
    }


def _pair_rows(matrix: dict) -> list[dict]:
    """Per deployment one ratio: its first entry model (manifest order) with a pair run, local
    mode where measured, every round at every concurrency of that run."""
    rows = []
    for name, data in matrix.items():
        pairs = data.get("processing_pairs") or []
        if not pairs:
            continue
        mode = "local" if any(r.get("server_mode") == "local" for r in pairs) else pairs[0].get("server_mode")
        order = list(data.get("model_only") or {})
        entries = [r.get("entry_benchmark") for r in pairs if r.get("server_mode") == mode]
        entry = min(entries, key=lambda e: order.index(e) if e in order else len(order))
        found = [r for r in pairs if r.get("server_mode") == mode and r.get("entry_benchmark") == entry]
        rounds = [float(v) for r in found for v in r.get("rounds_ratio") or []]
        if rounds:
            levels = ",".join(str(c) for c in sorted({int(r["concurrency"]) for r in found}))
            label = f"{name}: {entry} / {found[0].get('model_only_benchmark')} ({mode})"
            rows.append(cost_row("processing", name, label, rounds, f"{len(rounds)} rounds at c={levels}", found))
    return rows


def _apart(pairs: list[dict]) -> str:
    low, high = min(p["hours_apart"] for p in pairs), max(p["hours_apart"] for p in pairs)
    return f"{low:.1f} h" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}-{high:.1f} h"


def _container_rows(matrix: dict) -> list[dict]:
    rows = []
    for name, data in matrix.items():
        pairs = container_cost(data["rows"], data.get("history"))
        if pairs:
            values = [p["ratio"] for p in pairs]
            used = [r for r in data["rows"] if r.get("measured") and r.get("server_mode") == "docker"]
            over = f"{len(values)} variant x c cells, {_apart(pairs)} apart"
            rows.append(cost_row("container", name, f"{name}: docker / local", values, over, used))
    return rows


#: The core's rows of the costs lesson; distributions add theirs (``Sections.costs``).
COSTS = (
    CostKind(
        "processing",
        "Server-side processing (entry model / its model-only path, one server, alternating)",
        "processing on the server",
        "make bench-pairs && make matrix",
        "tab:blue",
        "server-side processing",
        lambda matrix, results_dir: _pair_rows(matrix),
    ),
    CostKind(
        "container",
        "The container (docker / local items/s, same variant and c, one run)",
        "the container",
        "make bench MODE=local && make bench MODE=docker && make matrix",
        "tab:orange",
        "container",
        lambda matrix, results_dir: _container_rows(matrix),
    ),
)


def costs_lesson(matrix: dict, results_dir: Path, kinds: tuple[CostKind, ...]) -> dict:
    rows = {k.kind: k.rows(matrix, results_dir) for k in kinds}
    return {
        "measured": any(rows.values()),
        "rows": rows,
        "commands": {k.kind: k.command for k in kinds},
        "records": [r for kind in rows.values() for row in kind for r in row["records"]],
    }


def costs_heading(kinds: tuple[CostKind, ...]) -> str:
    """``processing on the server, the container and the gate``: what the kinds measure."""
    names = [k.heading for k in kinds]
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]


def render_costs_lesson(lesson: dict, kinds: tuple[CostKind, ...]) -> list[str]:
    lines = [f"### What {costs_heading(kinds)} cost (1.00 = nothing)", ""]
    for kind in kinds:
        rows, command = lesson["rows"][kind.kind], kind.command
        if not rows:
            lines.append(f"- {kind.title}: {NOT_MEASURED}: `{command}`")
            continue
        lines.append(
            f"- {kind.title}: "
            + "; ".join(f"{r['label']} {ratio(r['median'])} ({spread(r['spread'])}, {r['over']})" for r in rows)
            + f". `{command}`"
        )
    if lesson["measured"]:
        lines += ["", "![cost ratios](plots/headline-costs.png)"]
    return lines + [""]


# -- the screen ---------------------------------------------------------------------------
def build_headlines(records: list[dict], matrix: dict, results_dir: Path, sections) -> dict:
    """Lesson name -> lesson: the distributions' lessons, then ``costs``."""
    lessons = {lesson.name: lesson.build(records, matrix) for s in sections for lesson in s.lessons}
    return {**lessons, "costs": costs_lesson(matrix, results_dir, cost_kinds(sections))}


def cost_kinds(sections) -> tuple[CostKind, ...]:
    return COSTS + tuple(kind for s in sections for kind in s.costs)


def render_headlines(headlines: dict, sections, deployments=None) -> list[str]:
    rendered = [(lesson.render, headlines[lesson.name]) for s in sections for lesson in s.lessons]
    rendered.append((lambda lesson: render_costs_lesson(lesson, cost_kinds(sections)), headlines["costs"]))
    lines = ["## Headlines", ""]
    machines = sorted({machine(r) for _, lesson in rendered for r in lesson.get("records", [])})
    if len(machines) > 1:
        lines += [
            f"Measured on {len(machines)} machines ({'; '.join(machines)}): compare ratios within a lesson only.",
            "",
        ]
    for render, lesson in rendered:
        lines += render(lesson) + _stale(lesson, deployments)
    return lines


def _stale(lesson: dict, deployments) -> list[str]:
    if not lesson.get("measured") or deployments is None:
        return []
    note = freshness_note(lesson["records"], deployments)
    return [note, ""] if note else []


def headlines_json(headlines: dict) -> dict:
    """The headline numbers without the records they came from (those are in results.json)."""

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "records"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(headlines)
