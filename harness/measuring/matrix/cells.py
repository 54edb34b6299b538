"""Which cell of the matrix a record belongs to, the latest record of each cell, the numbers derived
from a record, and whether records measured the model repository's commit as it is now."""

from __future__ import annotations

import datetime as dt
import re

from harness.provenance import repository_commit


def stamp(record: dict) -> str:
    """A record's or check outcome's timestamp as a sortable string ("" when it has none)."""
    return str(record.get("timestamp", ""))


def dates(records: list[dict]) -> str:
    """The days the records were taken: ``2026-12-01``, ``2026-12-01 to 2026-12-02``, or "no date"."""
    days = sorted({stamp(r)[:10] for r in records if stamp(r)})
    return days[0] + (f" to {days[-1]}" if days[-1] != days[0] else "") if days else "no date"


def hours(record: dict) -> float:
    """A record's timestamp in hours (NaN when it has none)."""
    try:
        return dt.datetime.fromisoformat(stamp(record).replace("Z", "+00:00")).timestamp() / 3600
    except ValueError:
        return float("nan")


def generator_family(record: dict) -> str:
    """The load generator's name: the first word of the record's ``generator`` (``harness-asyncio``
    by default, ``perf_analyzer``, ...)."""
    return str(record.get("generator") or "harness-asyncio").split(" ", 1)[0]


def cell_key(record: dict) -> tuple:
    machine = record.get("machine") or {}
    return (
        record.get("deployment"),
        record.get("benchmark"),
        record.get("target", "cpu"),
        record.get("server_mode", "local"),
        int(record.get("concurrency") or 0),
        generator_family(record),
        machine.get("cpu_model"),
        machine.get("cpu_cores"),
    )


def load_cell(record: dict, *fields: str) -> tuple:
    """The record's ``fields``, then its concurrency, generator and pinning: what two records must share
    for one's items/s to be compared with the other's."""
    return (
        *(record.get(field) for field in fields),
        int(record.get("concurrency") or 0),
        generator_family(record),
        pinning_label(record),
    )


def latest_records(records: list[dict], key=cell_key) -> list[dict]:
    """The latest record of each cell (``key``, default deployment, benchmark, target, mode,
    concurrency, generator, machine); in first-seen order."""
    latest: dict[tuple, dict] = {}
    for record in records:
        key_of = key(record)
        if key_of not in latest or stamp(record) >= stamp(latest[key_of]):
            latest[key_of] = record
    return list(latest.values())


def run_label(record: dict) -> tuple:
    """The machine and server a record was measured on: one ``run`` of the table's footnotes."""
    machine = record.get("machine") or {}
    return (
        machine.get("cpu_model", "unknown CPU"),
        machine.get("cpu_cores"),
        machine.get("os", ""),
        record.get("server_mode"),
        record.get("server_version"),
        record.get("gate"),
    )


def ceiling(record: dict) -> float | None:
    """The in-process / served ceiling (items/s) a record carries, if any."""
    value = record.get("ceiling_items_per_second")
    if value is None:
        value = (record.get("notes") or {}).get("ceiling_items_per_second")
    return float(value) if value is not None else None


def compute_ms(record: dict) -> float | None:
    """Triton's per-request compute time (input + infer + output), None when not measured."""
    parts = [
        record.get(k) for k in ("perf_server_compute_input", "perf_server_compute_infer", "perf_server_compute_output")
    ]
    if all(p is None for p in parts):
        return None
    return round(sum(p or 0.0 for p in parts), 3)


def pinning_label(record: dict) -> str:
    """The cores server and generator were pinned to (``server cpus 1, generator cpus 0``), "" when not pinned."""
    pinning = re.sub(r" \([^)]*\)", "", str(record.get("pinning") or ""))  # remarks: process counts, ...
    return "" if pinning in ("", "none") else pinning


def freshness_note(records: list[dict], deployments) -> str:
    """ "" when every record measured its deployment's model repository as committed now, else one
    sentence saying which records are older (or do not say) and the commit they would need."""
    now = {d.name: repository_commit(d.model_repository) for d in deployments}
    notes = []
    for name in sorted({r.get("deployment") for r in records if r.get("deployment") in now}):
        mine = [r for r in records if r.get("deployment") == name]
        current = now[name]
        if current is None:
            continue
        unknown = sum(1 for r in mine if not r.get("model_repository_commit"))
        other = sorted({r["model_repository_commit"] for r in mine if r.get("model_repository_commit")} - {current})
        if unknown:
            notes.append(
                f"{unknown} of {len(mine)} records of {name} do not say which commit of its model repository they "
                f"measured (taken before records said it; now {current})"
            )
        if other:
            notes.append(
                f"records of {name} measured its model repository at commit {', '.join(other)}, not at {current} as now"
            )
    return ("Freshness: " + "; ".join(notes) + ": re-run the command to measure the current code.") if notes else ""
