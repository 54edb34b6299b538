"""Which cell of the matrix a benchmark record belongs to, the latest record of each cell, and
the derived numbers a record carries (ceiling, server compute time)."""

from __future__ import annotations

import re


def stamp(record: dict) -> str:
    """A record's or check outcome's timestamp as a sortable string ("" when it has none)."""
    return str(record.get("timestamp", ""))


def generator_family(record: dict) -> str:
    """``perf_analyzer`` or ``harness-asyncio`` (the default load generator)."""
    generator = str(record.get("generator") or "harness-asyncio")
    return "perf_analyzer" if generator.startswith("perf_analyzer") else generator.split(" ", 1)[0]


def network_label(record: dict) -> str | None:
    """``"100mbit"`` / ``"100mbit, +20 ms RTT"`` for a network-bound record, None otherwise."""
    network = record.get("network")
    if not network:
        return None
    label = str(network.get("rate") or "unlimited")
    if network.get("rtt_ms"):
        label += f", +{network['rtt_ms']:g} ms RTT"
    return label


def cell_key(record: dict) -> tuple:
    machine = record.get("machine") or {}
    return (
        record.get("deployment"),
        record.get("benchmark"),
        record.get("target", "cpu"),
        record.get("server_mode", "local"),
        int(record.get("concurrency") or 0),
        generator_family(record),
        network_label(record),
        machine.get("cpu_model"),
        machine.get("cpu_cores"),
    )


def latest_records(records: list[dict]) -> list[dict]:
    """The latest record of each cell (deployment, benchmark, target, mode, concurrency, generator,
    network, machine); in first-seen order."""
    latest: dict[tuple, dict] = {}
    for record in records:
        key = cell_key(record)
        if key not in latest or stamp(record) >= stamp(latest[key]):
            latest[key] = record
    return list(latest.values())


def network_records(records: list[dict]) -> list[dict]:
    """The latest record of each network-bound cell (``make bench-network``)."""
    return [r for r in latest_records(records) if network_label(r)]


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
    pinning = re.sub(r" \(\d+ processes\)", "", str(record.get("pinning") or ""))
    pinning = re.sub(r" \(perf_analyzer container: [^)]*\)", "", pinning)
    return "" if pinning in ("", "none") else pinning
