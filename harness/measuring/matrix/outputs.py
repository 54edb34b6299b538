"""Write the matrix: ``results.md``, ``results.json``, ``results.csv`` and the plots, with the
sections and pages of installed distributions (``sections.py``)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from harness import PROJECT_ROOT
from harness.measuring.matrix import sections as installed_sections
from harness.measuring.matrix.cells import ceiling, compute_ms, generator_family
from harness.measuring.matrix.headlines import build_headlines, headlines_json, render_headlines
from harness.measuring.matrix.pairs import container_cost
from harness.measuring.matrix.plots import PLOT_KINDS, plot, plot_headlines
from harness.measuring.matrix.render import render_markdown
from harness.measuring.matrix.rows import NOT_MEASURED, build
from harness.measuring.records import OUTCOMES_FILE, read_records, records_path

DOCS = PROJECT_ROOT / "docs"
#: results.csv's columns: the scenario, the measured numbers, the machine (every field: results.json)
CSV_FIELDS = (
    "deployment benchmark variant model target server_mode server_version gate protocol generator "
    "concurrency perf_throughput items_per_second perf_latency_p50 perf_latency_p95 perf_latency_p99 "
    "bytes_sent_per_request bytes_received_per_request perf_server_queue server_compute_ms server_avg_batch_size "
    "ceiling_items_per_second errors requests duration_s cpu_model cpu_cores os timestamp in_matrix"
).split()


def json_row(r: dict, in_matrix: bool) -> dict:
    """A record as results.json / results.csv write it: its fields, the derived numbers, the machine."""
    machine = r.get("machine") or {}
    return {
        **{k: v for k, v in r.items() if k != "measured"},
        "generator_family": generator_family(r),
        "server_compute_ms": compute_ms(r),
        "ceiling_items_per_second": ceiling(r),
        "cpu_model": machine.get("cpu_model"),
        "cpu_cores": machine.get("cpu_cores"),
        "os": machine.get("os"),
        "in_matrix": in_matrix,
        "measured": r.get("measured", True),
    }


def _clear_plots(plots_dir: Path) -> None:
    """Remove the matrix's own figures (docs/plots also holds the reliability figures)."""
    for pattern in [*(f"*-{kind}.png" for kind in PLOT_KINDS), "headline-*.png"]:
        for old in plots_dir.glob(pattern):
            old.unlink()


def results_json(records: list[dict], matrix: dict, headlines: dict, source: str, docs: Path, sections) -> dict:
    """results.json: every row and other record of each deployment, the headlines, the sections' fields."""
    return {
        "source": source,
        "not_measured": NOT_MEASURED,
        "headlines": headlines_json(headlines),
        "deployments": {
            name: {
                "summary": data["summary"],
                "targets": data["targets"],
                "correctness": data["correctness"],
                "rows": [json_row(r, True) for r in data["rows"]],
                "other_records": [json_row(r, False) for r in data["extra"]],
                "container_cost": container_cost(data["rows"], data["history"]),
                "processing_pairs": data["processing_pairs"],
                "plots": {k: str(p.relative_to(docs)) for k, p in data["plots"].items()},
            }
            for name, data in matrix.items()
        },
        **{k: v for s in sections for k, v in s.json(records).items()},
    }


def _write_csv(path: Path, matrix: dict) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        for data in matrix.values():
            writer.writerows([json_row(r, True) for r in data["rows"]] + [json_row(r, False) for r in data["extra"]])


def _source(records_file: Path) -> str:
    try:
        return str(records_file.resolve().relative_to(PROJECT_ROOT))
    except ValueError:
        return str(records_file)


def generate(
    records_file: Path | None = None,
    docs: Path = DOCS,
    deployments_root: Path | None = None,
    sections: list | None = None,
) -> dict[str, Path]:
    """Write results.md, results.json, results.csv and plots, with ``sections`` (default: those
    installed); returns the paths written."""
    from harness.deployments import discover

    records_file = Path(records_file or records_path())
    records = read_records(records_file)
    sections = installed_sections.installed() if sections is None else sections
    deployments = discover(deployments_root)
    outcomes = read_records(records_file.parent / OUTCOMES_FILE)  # the pytest plugin's check outcomes
    matrix = build([r for r in records if not any(s.claims(r) for s in sections)], deployments, outcomes)
    _clear_plots(docs / "plots")
    for name, data in matrix.items():
        data["plots"] = plot(name, data["rows"], docs / "plots", data.get("model_only"))
    headlines = build_headlines(records, matrix, records_file.parent, sections)
    headline_plots = plot_headlines(headlines, docs / "plots", sections)
    source = _source(records_file)
    docs.mkdir(parents=True, exist_ok=True)
    written = {"markdown": docs / "results.md", "json": docs / "results.json", "csv": docs / "results.csv"}
    pages = {kind: page for s in sections for kind, page in s.pages(records, deployments).items()}
    markdown = render_markdown(
        matrix, source, render_headlines(headlines, sections, deployments), deployments, list(pages.values())
    )
    after = [line for s in sections for line in s.markdown(records)]
    written["markdown"].write_text(markdown + ("\n".join(after) + "\n" if after else ""))
    payload = results_json(records, matrix, headlines, source, docs, sections)
    written["json"].write_text(json.dumps(payload, indent=1, default=str) + "\n")
    _write_csv(written["csv"], matrix)
    for kind, (name, text) in pages.items():
        written[kind] = docs / name
        written[kind].write_text(text)
    written |= {f"plot {name} {kind}": path for name, data in matrix.items() for kind, path in data["plots"].items()}
    return written | {f"plot headline {kind}": path for kind, path in headline_plots.items()}
