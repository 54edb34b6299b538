"""Results matrix: ``results/records.jsonl`` -> ``docs/results.md`` + JSON + CSV + PNG plots, and
each deployment README's block of headline figures (``readme.py``).

    python -m harness.measuring.matrix                 # what `make matrix` runs
    python -m harness.measuring.matrix --records results/records.jsonl --docs docs

The page opens with a screen of headlines (``headlines.py``: each lesson one sentence with its
measured ratio, one figure, the command that reproduces it), then one compact table per
deployment and server mode; each says the date and run it comes from, and a section measured at
another commit of its deployment's model repository says so (``cells.freshness_note``).

Every number comes from a record written by a benchmark run (``make bench``, the benchmark
tests, the tools of installed distributions); nothing is typed in by hand. For each deployment the
table has one block of rows per benchmark scenario x target x server mode that its manifest
declares (``targets``): cells that were never measured on any machine stay in the table as "not
measured". The latest record of each cell wins. Installed distributions add sections, pages and
headline lessons of their own, and the records of their own kinds go there rather than into the
tables (``sections.py``; the lab's network-bound and side-by-side runs).

Correctness comes from the latest pytest outcomes recorded by the small pytest plugin in
``harness.testing.outcomes`` (``pytest -p harness.testing.outcomes``, or wired in by conftest), or from a JUnit XML in
the results folder (``pytest --junitxml=results/junit.xml``).
"""

from harness.measuring.matrix.cells import generator_family
from harness.measuring.matrix.cli import main
from harness.measuring.matrix.outputs import DOCS, generate
from harness.measuring.matrix.render import render_markdown
from harness.measuring.matrix.rows import NOT_MEASURED, build, expected_grid

__all__ = [
    "DOCS",
    "NOT_MEASURED",
    "build",
    "expected_grid",
    "generate",
    "generator_family",
    "main",
    "render_markdown",
]
