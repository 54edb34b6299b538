"""Results matrix: ``results/records.jsonl`` -> ``docs/results.md`` + JSON + CSV + PNG plots.

``python -m harness matrix`` / ``python -m harness.measuring.matrix`` (what `make matrix` runs).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harness.measuring.matrix.outputs import DOCS, generate
from harness.measuring.matrix.rows import NOT_MEASURED
from harness.measuring.records import records_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness matrix", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=Path, default=None, help="records file (default results/records.jsonl)")
    parser.add_argument("--docs", type=Path, default=DOCS, help="where results.md/json/csv and plots/ go")
    parser.add_argument("--deployments", type=Path, default=None, help="deployments folder (default ./deployments)")
    args = parser.parse_args(argv)
    records_file = args.records or records_path()
    if not Path(records_file).exists():
        print(
            f"no records at {records_file}: every row will say '{NOT_MEASURED}' (run `make bench` first)",
            file=sys.stderr,
        )
    written = generate(records_file, args.docs, args.deployments)
    for kind, path in written.items():
        print(f"{kind:28} {os.path.relpath(path)}")
    return 0
