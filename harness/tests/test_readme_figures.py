"""Every items/s or ms figure in a README or doc comes from a records file or names its command.

A figure (``<number> <unit>/s``, ``<number>/s``, ``<number> ms``, or a table whose header has such a
column) outside a generated block (``<!-- results:begin -->`` / ``<!-- reliability-results:begin -->``
... ``end``, filled by `make matrix` / `make reliability`) must sit in a ``##`` section that names the
command that measured it (`` `python -m ...` ``, `` `make ...` ``, `` `pytest ...` ``) or a run id
(``run `<hex>` ``). docs/results*.md are generated from the records as a whole. And each README's
results block is what `make matrix` renders from the committed docs/results.json.
"""

from __future__ import annotations

import json
import re

import pytest

from harness import PROJECT_ROOT
from harness.deployments import discover
from harness.measuring.matrix.readme import BEGIN, BLOCK, fill_readmes, readme_block

FIGURE = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:[A-Za-z]+/s|/s|ms)\b")
#: A command (at a commit, ``abc1234: python -m ...``, for a tool since removed) or a run id.
COMMAND = re.compile(
    r"`(?:[0-9a-f]{7,40}: )?(?:[A-Z_]+=\S+ )*(?:\.venv/bin/)?(?:python -m |make |pytest )[^`]*`|\brun `[0-9a-f]{8,}`"
)
GENERATED = re.compile(r"<!-- ([\w-]*)results:begin -->.*?<!-- \1results:end -->", re.S)


def unsourced_figures(markdown: str) -> list[str]:
    """The paragraphs stating a figure outside generated blocks, in a ``##`` section naming no command."""
    text = re.sub(r"```.*?```", "", GENERATED.sub("", markdown), flags=re.S)
    found = []
    for section in re.split(r"\n(?=## )", text):
        if COMMAND.search(section):
            continue
        for paragraph in re.split(r"\n\s*\n", section):
            lines = paragraph.strip().splitlines()
            table_of_figures = bool(lines) and lines[0].startswith("|") and re.search(r"/s\b|\bms\b", lines[0])
            if FIGURE.search(paragraph) or table_of_figures:
                found.append(paragraph.strip())
    return found


DOCUMENTS = sorted(
    [PROJECT_ROOT / "README.md", *PROJECT_ROOT.glob("deployments/*/README.md"), *PROJECT_ROOT.glob("docs/**/*.md")]
)


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(PROJECT_ROOT)))
def test_every_figure_comes_from_records_or_names_its_command(path):
    if path.parent == PROJECT_ROOT / "docs" and path.name.startswith("results"):
        pytest.skip("generated from the records by `make matrix`")
    unsourced = unsourced_figures(path.read_text())
    assert not unsourced, f"{path.name}: figures with no records file or command behind them:\n\n" + "\n\n".join(
        unsourced
    )


def test_the_rule_flags_a_hand_typed_figure_and_passes_sourced_ones():
    typed = "## Headline numbers\n\n`text_embedding` 18 texts/s at c=1 (p50 56 ms).\n"
    assert unsourced_figures(typed) == ["`text_embedding` 18 texts/s at c=1 (p50 56 ms)."]
    assert unsourced_figures("## T\n\n| path | infer/s |\n|---|---|\n| a | 2.6 |\n")
    assert not unsourced_figures(f"## Headline numbers\n\n{BEGIN}\n`a` 18 texts/s\n<!-- results:end -->\n")
    assert not unsourced_figures("## Numbers\n\n18 texts/s.\n\nMeasured by `make bench DEPLOYMENT=x`.\n")
    assert not unsourced_figures("## Numbers\n\n225 sentences/s (run `e979207b23f0`).\n")
    assert unsourced_figures("## A\n\n`make bench`\n\n## B\n\n18 texts/s.\n"), "a command covers its own section only"


def test_each_deployment_readme_block_is_the_matrix_of_the_committed_results_json():
    payload = json.loads((PROJECT_ROOT / "docs" / "results.json").read_text())
    for deployment in discover():
        text = (deployment.path / "README.md").read_text()
        blocks = BLOCK.findall(text)
        assert len(blocks) == 1, f"{deployment.name}'s README has {len(blocks)} results blocks, not one"
        expected = readme_block(deployment.name, payload["deployments"].get(deployment.name, {}).get("rows", []))
        assert blocks[0] == expected, f"{deployment.name}: run `python -m harness matrix --readmes-only`"


def test_filling_replaces_the_block_only(tmp_path):
    (tmp_path / "toy" / "model_repository" / "m").mkdir(parents=True)
    (tmp_path / "toy" / "deployment.toml").write_text(
        'name = "toy"\nsummary = "A toy"\ntargets = ["cpu"]\nentry_models = ["m"]\n'
    )
    readme = tmp_path / "toy" / "README.md"
    readme.write_text(f"# toy\n\nbefore\n\n{BEGIN}\nold 1.0 items/s\n<!-- results:end -->\n\nafter\n")
    row = {
        "measured": True,
        "benchmark": "m-b1",
        "target": "cpu",
        "server_mode": "local",
        "concurrency": 1,
        "items_per_second": 12.34,
        "perf_latency_p50": 80.0,
        "bytes_sent_per_request": 1000,
        "timestamp": "2026-12-01T10:00:00+00:00",
        "machine": {"cpu_model": "Test CPU", "cpu_cores": 2},
        "server_version": "2.51.0",
    }
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"deployments": {"toy": {"rows": [row, {**row, "server_mode": "docker"}]}}}))
    assert fill_readmes(results, discover(tmp_path)) == [readme]
    text = readme.read_text()
    assert text.startswith("# toy\n\nbefore\n\n") and text.endswith("\n\nafter\n") and "old" not in text
    assert re.search(r"\| `m-b1` +\| 1 +\| 12\.3 +\| 80\.0 +\| 1,000 +\|", text), text
    assert "2026-12-01; Test CPU, 2 cores" in text and text.count("m-b1") == 1, "the docker row is not a headline"
    assert fill_readmes(results, discover(tmp_path)) == [], "nothing to change the second time"
    results.write_text(json.dumps({"deployments": {}}))  # a copy the last run did not measure
    assert fill_readmes(results, discover(tmp_path)) == [readme]
    assert "Not measured yet: `make bench DEPLOYMENT=toy && make matrix`" in readme.read_text()
