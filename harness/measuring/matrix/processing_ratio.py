"""What server-side processing costs: an entry model that takes JPEG bytes or text (its pre- and
post-processing on the server) against the same network served alone on client-made tensors
(the manifest's ``model_only``), at the same target, server mode, concurrency and generator."""

from __future__ import annotations

from tabulate import tabulate

from harness.measuring.matrix.cells import generator_family, pinning_label
from harness.measuring.matrix.container_cost import hours

#: The issue's goal for every JPEG- or text-in entry model on loopback.
GOAL = 0.85


def _key(record: dict) -> tuple:
    return (
        record.get("target"),
        record.get("server_mode"),
        int(record.get("concurrency") or 0),
        generator_family(record),
        pinning_label(record),
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
    pairs = []
    for entry in measured:
        other = model_only.get(entry.get("benchmark"))
        if not other:
            continue
        same = [r for r in measured if r.get("benchmark") == other and _key(r) == _key(entry)]
        if not same:
            continue
        alone = min(same, key=lambda r: abs(hours(r) - hours(entry)))
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
                "hours_apart": abs(hours(entry) - hours(alone)),
            }
        )
    return pairs


def render_processing_ratios(rows: list[dict], model_only: dict[str, str]) -> list[str]:
    """A short table under a deployment: entry / model-only items/s per cell, against the goal."""
    pairs = processing_ratios(rows, model_only)
    if not pairs:
        return []
    table = [
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
    return [
        "",
        f"Server-side processing / model-only (items/s of the entry model that takes JPEG bytes or text, over "
        f"the same network served alone on client-made tensors; goal >= {GOAL} on loopback; `h apart` 0.0-0.1 "
        "means both were measured in one run):",
        "",
        tabulate(
            table,
            headers=[
                "entry variant",
                "model-only variant",
                "server / target",
                "c",
                "entry items/s",
                "model-only items/s",
                "entry / model-only",
                "generator",
                "h apart",
            ],
            tablefmt="github",
            disable_numparse=True,
        ),
        "",
    ]
