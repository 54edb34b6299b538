"""Results matrix: ``results/records.jsonl`` -> ``docs/results.md`` + JSON + CSV + PNG plots, and
each deployment README's block of headline figures (``readme.py``).

    python -m harness matrix                 # what `make matrix` runs
    python -m harness matrix --records results/records.jsonl --docs docs

Every number comes from a record; per deployment one block of rows per benchmark scenario x target
x server mode its manifest declares, "not measured" where no record is; the latest record of each
cell wins. Installed distributions add sections of their own (``sections.py``)."""

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
