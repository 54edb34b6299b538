"""What server-side processing costs: an entry model that takes JPEG bytes or text against its
``model_only`` benchmark, from the pair runs (``make bench-pairs``) and from the table's rows."""

from __future__ import annotations

from harness.measuring.matrix.cells import (
    closest,
    generator_family,
    latest_records,
    load_cell,
    pinning_label,
    stamp,
)
from harness.measuring.matrix.fmt import captioned

#: The goal for every JPEG- or text-in entry model on loopback.
GOAL = 0.85
#: ``comparison`` of the records ``python -m harness pair-bench --manifest --record-results`` writes.
PAIR_COMPARISON = "processing-pair"


def _key(record: dict) -> tuple:
    return load_cell(record, "target", "server_mode")


#: The columns both processing tables start with (one cell, its two throughputs and their quotient).
PAIR_HEADERS = "entry variant | model-only variant | server / target | c | entry items/s | model-only items/s | "


def ratio_cell(ratio: float) -> str:
    """Two decimals; three where two would round a ratio below the goal up to it (0.849, not 0.85)."""
    if ratio >= GOAL:
        return f"{ratio:.2f}"
    shown = f"{ratio:.2f}" if float(f"{ratio:.2f}") < GOAL else f"{ratio:.3f}"
    return f"{shown} (below goal)"


def processing_ratios(rows: list[dict], model_only: dict[str, str]) -> list[dict]:
    """entry / model-only items/s for each measured row whose benchmark names a ``model_only`` one;
    the model-only record is the one of the same cell taken closest in time."""
    measured = [r for r in rows if r.get("measured") and r.get("items_per_second")]
    pairs = []
    for entry in measured:
        other = model_only.get(entry.get("benchmark"))
        if not other:
            continue
        same = [r for r in measured if r.get("benchmark") == other and _key(r) == _key(entry)]
        if not same:
            continue
        alone, apart = closest(entry, same)
        pairs.append(
            {
                "benchmark": entry["benchmark"],
                "model_only": other,
                "target": entry.get("target"),
                "server_mode": entry.get("server_mode"),
                "concurrency": int(entry.get("concurrency") or 0),
                "generator": generator_family(entry),
                "entry": entry["items_per_second"],
                "alone": alone["items_per_second"],
                "ratio": entry["items_per_second"] / alone["items_per_second"],
                "hours_apart": apart,
            }
        )
    return pairs


def render_processing_ratios(rows: list[dict], model_only: dict[str, str]) -> list[str]:
    """A short table under a deployment: entry / model-only items/s per cell, against the goal."""
    pairs = processing_ratios(rows, model_only)
    if not pairs:
        return []
    rows = [
        [
            p["benchmark"],
            p["model_only"],
            f"{p['server_mode']} / {p['target']}",
            p["concurrency"],
            f"{p['entry']:.1f}",
            f"{p['alone']:.1f}",
            ratio_cell(p["ratio"]),
            p["generator"],
            f"{p['hours_apart']:.1f}",
        ]
        for p in pairs
    ]
    return captioned(
        f"Server-side processing / model-only from the rows above (items/s of the entry model that takes JPEG "
        f"bytes or text, over the same network served alone on client-made tensors, one window each; goal >= {GOAL} "
        "on loopback; `h apart` 0.0-0.1 means both were measured in one run):",
        rows,
        PAIR_HEADERS + "entry / model-only | generator | h apart",
    )


def _where(record: dict) -> tuple:
    return (record.get("server_mode"), record.get("target"))


def paired_records(records: list[dict], deployment: str) -> list[dict]:
    """The records of the latest pair run of each (server mode, target) of ``deployment``."""
    mine = [r for r in records if r.get("comparison") == PAIR_COMPARISON and r.get("deployment") == deployment]
    runs = {(r.get("server_mode"), r.get("target"), r.get("run_id")) for r in latest_records(mine, key=_where)}
    return [r for r in mine if (*_where(r), r.get("run_id")) in runs]


def render_paired_ratios(records: list[dict]) -> list[str]:
    """The pair runs' table: per entry model, server mode and concurrency, the median over rounds."""
    if not records:
        return []
    rows = []
    for r in records:
        generator = generator_family(r) + (f", {pinning_label(r)}" if pinning_label(r) else "")
        cpu = r.get("rounds_cpu_ratio") or []
        triton = r.get("rounds_triton_cpu_ratio") or []
        rows.append(
            [
                r.get("entry_benchmark"),
                r.get("model_only_benchmark"),
                f"{r.get('server_mode')} / {r.get('target')}",
                r.get("concurrency"),
                f"{r.get('items_per_second', 0):.1f}",
                f"{r.get('model_only_items_per_second', 0):.1f}",
                ratio_cell(float(r.get("ratio") or 0.0)),
                ", ".join(f"{x:.2f}" for x in r.get("rounds_ratio") or []),
                f"{r['cpu_ratio']:.2f} ({', '.join(f'{x:.2f}' for x in cpu)})" if r.get("cpu_ratio") else "",
                f"{r['triton_cpu_ratio']:.2f} ({', '.join(f'{x:.2f}' for x in triton)})"
                if r.get("triton_cpu_ratio")
                else "",
                generator,
                f"{str(r.get('run_id'))[:8]} {stamp(r)[:16].replace('T', ' ')}",
            ]
        )
    rounds = sorted({int(r.get("rounds") or 0) for r in records})
    return captioned(
        "Server-side processing / model-only, side by side (`make bench-pairs`: the entry model and its model-only "
        "path on one server, back to back at each concurrency, which one runs first alternating round by round; "
        f"{'/'.join(map(str, rounds))} rounds; the ratio is the median of the per-round quotients of items/s; goal "
        f">= {GOAL} on loopback; `CPU-time ratio` model-only / entry CPU ms per request of the server's processes "
        "and the generator, read from /proc, which moves less with the neighbours' load; `Triton-only` the same "
        "for tritonserver and its stubs alone: without the harness's front gate, whose proxy costs more CPU for "
        "a large client-made tensor than for a JPEG, and without the generator):",
        rows,
        PAIR_HEADERS + "entry / model-only | rounds | CPU-time ratio | Triton-only CPU-time ratio | generator | run",
    )
