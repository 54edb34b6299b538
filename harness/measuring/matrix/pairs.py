"""What server-side processing and the container cost, from pairs of records of one cell: an entry
model that takes JPEG bytes or text against its ``model_only`` benchmark (from the table's rows and
from the pair runs, ``make bench-pairs``), and docker / local items/s of the same variant, target,
c, generator and pinning. Each record is paired with the other's record of that cell taken closest
in time."""

from __future__ import annotations

from harness.measuring.matrix.cells import generator_family, hours, latest_records, load_cell, pinning_label, stamp
from harness.measuring.matrix.fmt import captioned, number

#: The goal for every JPEG- or text-in entry model on loopback.
GOAL = 0.85
#: ``comparison`` of the records ``python -m harness pair-bench --manifest --record-results`` writes.
PAIR_COMPARISON = "processing-pair"
#: Farther apart than this, two records were taken under different loads of a shared machine: no pair.
#: `make bench` then `make bench MODE=docker` measure the same cell 0.6-1.1 h apart on a quiet machine
#: (the local run also holds the pair and peers runs); each pair says how far apart it is.
MAX_HOURS_APART = 1.5
#: The columns both processing tables start with (one cell, its two throughputs and their quotient).
PAIR_HEADERS = "entry variant | model-only variant | server / target | c | entry items/s | model-only items/s | "


def pair_up(tops: list[dict], candidates: list[dict], key, top_key=None) -> list[tuple[dict, dict, float]]:
    """Each of ``tops`` with the candidate whose ``key`` is the top's ``top_key`` (default ``key``)
    taken closest in time, and how many hours apart the two were taken; tops without one left out."""
    found = []
    for top in tops:
        same = [r for r in candidates if key(r) == (top_key or key)(top)]
        if same:
            other = min(same, key=lambda r: abs(hours(r) - hours(top)))
            found.append((top, other, abs(hours(other) - hours(top))))
    return found


def _key(record: dict) -> tuple:
    return load_cell(record, "target", "server_mode")


def _container_key(record: dict) -> tuple:
    return load_cell(record, "benchmark", "target")


def container_cost(rows: list[dict], history: list[dict] | None = None) -> list[dict]:
    """docker / local items/s for each docker row of the table: against the local record of the same
    variant, target, c and generator taken closest in time (from ``history``, all records of the
    deployment; default the table's own rows), so that a pair comes from one run where there is one."""
    measured = [r for r in rows if r["measured"]]
    local = [
        r
        for r in (history if history is not None else measured)
        if r.get("server_mode") == "local" and r.get("items_per_second")
    ]
    docker = [r for r in measured if r["server_mode"] == "docker"]
    return [
        {
            **dict(zip(("benchmark", "target", "concurrency", "generator"), _container_key(top))),
            "local": other["items_per_second"],
            "docker": top["items_per_second"],
            "ratio": top["items_per_second"] / other["items_per_second"],
            "hours_apart": apart,
        }
        for top, other, apart in pair_up(docker, local, _container_key)
        if apart <= MAX_HOURS_APART
    ]


def render_container_cost(rows: list[dict], history: list[dict] | None = None) -> list[str]:
    """A short table: what the container costs, as docker / local items/s of the same variant and c."""
    pairs = container_cost(rows, history)
    if not pairs:
        return []
    rows = [
        [
            p["benchmark"],
            p["target"],
            p["concurrency"],
            number(p["local"]),
            number(p["docker"]),
            f"{p['ratio']:.2f}",
            f"{p['hours_apart']:.1f}",
        ]
        for p in pairs
    ]
    return captioned(
        "Container cost (docker / local items/s of the same variant, target and c; a ratio near 1 means the "
        "container costs nothing measurable; the local record is the one of the same cell taken closest in "
        f"time, within {MAX_HOURS_APART} h (records farther apart are not paired); `h apart` how far apart the two were taken: 0.0-0.1 means one run, the modes alternating per "
        "deployment):",
        rows,
        "variant | target | c | local items/s | docker items/s | docker / local | h apart",
    )


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
    entries = [r for r in measured if model_only.get(r.get("benchmark"))]
    pairs = pair_up(
        entries, measured, lambda r: (r.get("benchmark"), *_key(r)), lambda e: (model_only[e["benchmark"]], *_key(e))
    )
    return [
        {
            "benchmark": entry["benchmark"],
            "model_only": alone["benchmark"],
            "target": entry.get("target"),
            "server_mode": entry.get("server_mode"),
            "concurrency": int(entry.get("concurrency") or 0),
            "generator": generator_family(entry),
            "entry": entry["items_per_second"],
            "alone": alone["items_per_second"],
            "ratio": entry["items_per_second"] / alone["items_per_second"],
            "hours_apart": apart,
        }
        for entry, alone, apart in pairs
    ]


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
