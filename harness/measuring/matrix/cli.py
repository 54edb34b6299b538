"""Results matrix: ``results/records.jsonl`` -> ``docs/results.md`` + JSON + CSV + PNG plots, and each
deployment README's block of headline figures."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harness.measuring.matrix.outputs import DOCS, generate
from harness.measuring.matrix.readme import fill_readmes
from harness.measuring.records import records_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness matrix", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=Path, default=None, help="records file (default results/records.jsonl)")
    parser.add_argument("--docs", type=Path, default=DOCS, help="where results.md/json/csv and plots/ go")
    parser.add_argument(
        "--readmes-only",
        action="store_true",
        help="only refill the READMEs' results blocks from the existing <docs>/results.json (no records read)",
    )
    args = parser.parse_args(argv)
    from harness.deployments import discover

    if not args.readmes_only:
        records_file = args.records or records_path()
        if not Path(records_file).exists():
            print(
                f"no records at {records_file}: nothing to aggregate, docs/ left as they are (run `make bench` "
                "first, or point HARNESS_RESULTS_DIR at a results folder)",
                file=sys.stderr,
            )
            return 1
        for kind, path in generate(records_file, args.docs).items():
            print(f"{kind:28} {os.path.relpath(path)}")
    # the READMEs link ../../docs/results.md: filled only from the project's own docs folder
    if args.docs.resolve() == DOCS.resolve():
        for readme in fill_readmes(args.docs / "results.json", discover()):
            print(f"{'readme results block':28} {os.path.relpath(readme)}")
    return 0
