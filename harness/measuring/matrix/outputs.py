"""Write the matrix: ``results.md`` (with the side-by-side ratios), ``results.json``,
``results.csv``, ``results-network.md`` and the plots."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from harness import PROJECT_ROOT
from harness.measuring.matrix.cells import ceiling, compute_ms, generator_family, network_label, network_records
from harness.measuring.matrix.container_cost import container_cost
from harness.measuring.matrix.correctness import read_outcomes
from harness.measuring.matrix.headlines import build_headlines, headlines_json, render_headlines
from harness.measuring.matrix.plots import PLOT_KINDS, plot, plot_headlines
from harness.measuring.matrix.render import render_markdown, render_network
from harness.measuring.matrix.rows import NOT_MEASURED, build
from harness.measuring.records import read_records, records_path

DOCS = PROJECT_ROOT / "docs"
#: results.csv's columns: the scenario, the measured numbers, the machine (every field: results.json)
CSV_FIELDS = (
    "deployment benchmark variant model target server_mode server_version gate protocol generator network "
    "concurrency perf_throughput items_per_second perf_latency_p50 perf_latency_p95 perf_latency_p99 "
    "bytes_sent_per_request bytes_received_per_request perf_server_queue server_compute_ms server_avg_batch_size "
    "ceiling_items_per_second errors requests duration_s cpu_model cpu_cores os timestamp in_matrix"
).split()


def _json_row(r: dict, in_matrix: bool) -> dict:
    machine = r.get("machine") or {}
    return {
        **{k: v for k, v in r.items() if k != "measured"},
        "generator_family": generator_family(r),
        "network": r.get("network"),
        "server_compute_ms": compute_ms(r),
        "ceiling_items_per_second": ceiling(r),
        "cpu_model": machine.get("cpu_model"),
        "cpu_cores": machine.get("cpu_cores"),
        "os": machine.get("os"),
        "in_matrix": in_matrix,
        "measured": r.get("measured", True),
    }


def generate(
    records_file: Path | None = None,
    docs: Path = DOCS,
    deployments_root: Path | None = None,
    outcomes_folder: Path | None = None,
    perf_analyzer_note: str | None = None,
) -> dict[str, Path]:
    """Write results.md, results.json, results.csv and plots; returns the paths written."""
    records_file = Path(records_file or records_path())
    records = read_records(records_file)
    from harness.deployments import discover

    deployments = discover(deployments_root)
    outcomes = read_outcomes(Path(outcomes_folder or records_file.parent))
    if perf_analyzer_note is None:  # what made the perf_analyzer records, as they name it
        runs = sorted({r["generator"] for r in records if generator_family(r) == "perf_analyzer"})
        how = "`python -m harness perf-analyzer bench` (lab/)"
        perf_analyzer_note = (
            f"perf_analyzer: {', '.join(runs)} ({how})." if runs else f"perf_analyzer: no records ({how})."
        )
    matrix = build(records, deployments, outcomes)
    plots_dir = docs / "plots"
    if plots_dir.exists():  # the matrix's own figures only: docs/plots also holds the reliability figures
        for kind in PLOT_KINDS:
            for old in plots_dir.glob(f"*-{kind}.png"):
                old.unlink()
        for old in plots_dir.glob("headline-*.png"):
            old.unlink()
    for name, data in matrix.items():
        data["plots"] = plot(name, data["rows"], plots_dir, data.get("model_only"))
    model_only = {d.name: {b.id: b.model_only for b in d.benchmarks if b.model_only} for d in deployments}
    headlines = build_headlines(records, matrix, model_only, records_file.parent)
    headline_plots = plot_headlines(headlines, plots_dir)
    try:
        source = str(records_file.resolve().relative_to(PROJECT_ROOT))
    except ValueError:
        source = str(records_file)
    docs.mkdir(parents=True, exist_ok=True)
    written = {"markdown": docs / "results.md", "json": docs / "results.json", "csv": docs / "results.csv"}
    # ratio section: side-by-side runs (make bench-peers), ratios taken round by round
    from harness.measuring.matrix import side_by_side

    ratio_lines = side_by_side.render(records)
    written["markdown"].write_text(
        render_markdown(matrix, perf_analyzer_note, source, render_headlines(headlines, deployments), deployments)
        + ("\n".join(ratio_lines) + "\n" if ratio_lines else "")
    )
    latest_run = side_by_side.latest_run(records)
    payload = {
        "source": source,
        "perf_analyzer": perf_analyzer_note,
        "side_by_side": {"records": latest_run, "ratios": side_by_side.ratios(latest_run)},
        "not_measured": NOT_MEASURED,
        "headlines": headlines_json(headlines),
        "deployments": {
            name: {
                "summary": data["summary"],
                "targets": data["targets"],
                "correctness": data["correctness"],
                "rows": [_json_row(r, True) for r in data["rows"]],
                "other_records": [_json_row(r, False) for r in data["extra"]],
                "container_cost": container_cost(data["rows"], data["history"]),
                "processing_pairs": data["processing_pairs"],
                "plots": {k: str(p.relative_to(docs)) for k, p in data["plots"].items()},
            }
            for name, data in matrix.items()
        },
        "network": [_json_row(r, False) for r in network_records(records)],
    }
    written["json"].write_text(json.dumps(payload, indent=1, default=str) + "\n")
    with written["csv"].open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        for name, data in matrix.items():
            for r in data["rows"]:
                row = _json_row(r, True)
                row["network"] = network_label(r) or ""
                writer.writerow(row)
            for r in data["extra"]:
                writer.writerow({**_json_row(r, False), "network": ""})
    network = render_network(records, deployments)
    if network:
        written["network"] = docs / "results-network.md"
        written["network"].write_text(network)
    for name, data in matrix.items():
        for kind, path in data["plots"].items():
            written[f"plot {name} {kind}"] = path
    for kind, path in headline_plots.items():
        written[f"plot headline {kind}"] = path
    return written
