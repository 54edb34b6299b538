"""The stages table of ``docs/results.md``: where one request's time goes (records ``comparison:
stages`` of the one-off tool ``951997f:lab/harness_lab/stages.py``, its finding in docs/tuning.md),
the latest run, medians over its rounds."""

from __future__ import annotations

import statistics
from collections import defaultdict

from harness.measuring.matrix.cells import stamp
from harness.measuring.matrix.fmt import table
from harness.measuring.matrix.headlines import machine
from harness_lab.matrix_sections.shared import latest_run, load

COMMAND = "951997f: python -m harness stages"
#: The stages in the order a request meets them (``ms`` of each in a record's ``stages_ms``).
STAGES = (
    "front gate",
    "HTTP front end, loopback, client",
    "queue",
    "compute input",
    "ONNX Runtime run",
    "tokenize, buckets, pool",
    "stub round trip and model code",
    "compute output",
)


def render(records: list[dict]) -> list[str]:
    """Markdown lines: per batch and reply kind, each stage's median ms and share of the gated request."""
    run = latest_run(records, "stages")
    if not run:
        return []
    by_batch: dict[tuple[int, str], list[dict]] = defaultdict(list)
    for record in run:
        by_batch[int(record["items_per_request"]), record.get("reply", "json")].append(record)
    batches = sorted(by_batch, key=lambda key: (key[0], key[1] != "json"))
    first = min(run, key=stamp)

    def median(batch: tuple[int, str], pick) -> float:
        return statistics.median(pick(r) for r in by_batch[batch])

    rows = []
    for stage in STAGES:
        cells = []
        for batch in batches:
            ms = median(batch, lambda r: r["stages_ms"][stage])
            cells.append(f"{ms:.2f} ({100 * ms / median(batch, lambda r: r['client_ms_gate']):.0f} %)")
        rows.append([stage, *cells])
    rows.append(
        ["client latency through the gate", *(f"{median(b, lambda r: r['client_ms_gate']):.2f}" for b in batches)]
    )
    rounds = len({r.get("round") for r in run})
    return [
        "",
        f"## Where one request's time goes: {first['deployment']} `{first['model']}`",
        "",
        f"One run (`{COMMAND}`, run `{first['run_id']}`, {first.get('timestamp')}, {machine(first)}, "
        f"{load(run)}): requests one at a time, through the front gate and directly in alternating rounds "
        f"({rounds}), ms per request (median over rounds) and share of the gated request, the vectors as JSON "
        "numbers and as binary data (Triton's compute output includes writing the HTTP reply). Triton's stages are its "
        "per-model statistics; the ONNX Runtime run and the model's other work are the in-process ceiling's "
        f"on the same texts ({first.get('in_process_threads')} intra-op thread); the stub round trip and model "
        "code are Triton's compute infer minus both.",
        "",
        table(rows, ["stage", *(f"{b} sentence{'s' if b > 1 else ''}, {reply} reply" for b, reply in batches)]),
        "",
    ]
