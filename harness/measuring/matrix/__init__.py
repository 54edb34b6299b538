"""Results matrix: ``results/records.jsonl`` -> ``docs/results.md`` + JSON + CSV + PNG plots.

    python -m harness.measuring.matrix                 # what `make matrix` runs
    python -m harness.measuring.matrix --records results/records.jsonl --docs docs

The page opens with a screen of headlines (``headlines.py``: each lesson one sentence with its
measured ratio, one figure, the command that reproduces it), then one compact table per
deployment and server mode; each says the date and run it comes from, and a section measured at
another commit of its deployment's model repository says so (``freshness.py``).

Every number comes from a record written by a benchmark run (``make bench``, the benchmark
tests, ``python -m harness_lab.perf_analyzer``, ``python -m harness_lab.netem``); nothing is typed in
by hand. For each deployment the table has one block of rows per benchmark scenario x
target x server mode that its manifest declares (``targets``): cells that were never
measured on any machine stay in the table as "not measured". The latest record of each cell
wins. Records of network-bound runs (``make bench-network``) go to
``docs/results-network.md`` instead, so ``make bench matrix`` always gives the same layout.

Correctness comes from the latest pytest outcomes recorded by the small pytest plugin in
``harness.testing.outcomes`` (``pytest -p harness.testing.outcomes``, or wired in by conftest), or from a JUnit XML in
the results folder (``pytest --junitxml=results/junit.xml``).
"""

from harness.measuring.matrix.cells import (
    ceiling,
    compute_ms,
    generator_family,
    latest_records,
    network_label,
    network_records,
)
from harness.measuring.matrix.cli import main
from harness.measuring.matrix.container_cost import container_cost
from harness.measuring.matrix.correctness import read_outcomes, row_correctness, summarize_checks
from harness.measuring.matrix.outputs import DOCS, generate
from harness.measuring.matrix.plots import plot
from harness.measuring.matrix.render import render_markdown, render_network, render_table, table_blocks
from harness.measuring.matrix.rows import MODES_FOR_TARGET, NOT_MEASURED, build, expected_grid

__all__ = [
    "DOCS",
    "MODES_FOR_TARGET",
    "NOT_MEASURED",
    "build",
    "ceiling",
    "compute_ms",
    "container_cost",
    "expected_grid",
    "generate",
    "generator_family",
    "latest_records",
    "main",
    "network_label",
    "network_records",
    "plot",
    "read_outcomes",
    "render_markdown",
    "render_network",
    "render_table",
    "row_correctness",
    "summarize_checks",
    "table_blocks",
]
