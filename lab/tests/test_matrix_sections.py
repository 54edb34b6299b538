"""The lab's sections of the matrix (harness_lab.matrix_sections, found through its entry point).
The headline screen of docs/results.md, rendered from a small hand-made records file
(lab/tests/fixtures/headline_results/: records.jsonl and a gate-cost report, with round values
chosen so that every number on the screen is known): every number it shows is one of those the
records give, and every command it names is a Makefile target or a harness subcommand. Then the
headline figures' ceiling marks."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from harness import PROJECT_ROOT
from harness.measuring import matrix

FIXTURE = PROJECT_ROOT / "lab" / "tests" / "fixtures" / "headline_results"
BENCHMARK = """
[[benchmarks]]
id = "{id}"
workload = "checks.py:workload"
concurrency = [1]
"""
MANIFEST = (
    'name = "toy_detect"\nsummary = "A toy detector"\ntargets = ["cpu"]\nentry_models = ["pipeline", "detector"]\n'
    + BENCHMARK.format(id="jpeg-in").replace("concurrency", 'model_only = "tensor-in"\nconcurrency')
    + BENCHMARK.format(id="tensor-in")
    + BENCHMARK.format(id="naive-tensor")
)

#: Every number the screen may show, and where it comes from in the fixture.
EXPECTED = {
    "2.00": "processing pair rounds 1.8, 2.0, 2.2 -> median 2.00",
    "1": "c=1; 1 sentence per request",
    "2026-12-01": "the records' date",
    "2": "2 cores",
    "1.0-1.5": "load_average_1m of the records",
    # serving lesson: rounds of each target per (batch, c)
    "150": "served_tokens at b=1 c=1",
    "315": "served_tokens at b=1 c=8: rounds 300, 330",
    "320": "served_tokens at b=1 c=32",
    "8": "c=8",
    "32": "c=32; 32 sentences per request",
    "1.50": "300/200, 330/220 and 600/400, 660/440: served_tokens / served_text",
    "1.50-1.50": "their range",
    "3.15": "median of 300/100, 330/100: served_tokens / peer_a at b=1 c=8",
    "3.00-3.30": "their range",
    "500": "served_tokens at b=32 c=1",
    "630": "served_tokens at b=32 c=8: rounds 600, 660",
    "3.00": "600/200, 660/220: served_tokens / peer_a at b=32 c=8",
    "3.00-3.00": "their range",
    # costs lesson
    "1.00": "the heading's 1.00 = nothing; upper end of the container range",
    "1.80-2.20": "processing pair rounds",
    "3": "3 rounds / 3 variant x c cells",
    "0.90": "container: docker / local 45/50, 25/25, 5/6.25 -> 0.90, 1.00, 0.80; gate rounds 90/100 ...",
    "0.80-1.00": "container range",
    "0.2": "the docker records were taken 10 minutes after the local ones: 0.2 h apart",
    "0.80-0.95": "gate rounds 0.90, 0.95, 0.80",
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("headlines")
    root = tmp / "deployments"
    for model in ("pipeline", "detector"):
        (root / "toy_detect" / "model_repository" / model).mkdir(parents=True)
    (root / "toy_detect" / "deployment.toml").write_text(MANIFEST)
    shutil.copytree(FIXTURE, tmp / "results")
    written = matrix.generate(tmp / "results" / "records.jsonl", tmp / "docs", root)
    text = written["markdown"].read_text()
    return text.split("## Tables", 1)[0], written


def test_every_number_on_the_headline_screen_comes_from_the_records(rendered):
    screen, _ = rendered
    prose = re.sub(r"`[^`]*`|\([^()]*\.png\)", "", screen)  # names, commands and figure paths hold no measurement
    found = set(re.findall(r"\d{4}-\d\d-\d\d|\d+(?:,\d{3})*(?:\.\d+)?(?:-\d+(?:\.\d+)?)?", prose))
    assert found <= set(EXPECTED), f"numbers on the screen that the records do not give: {found - set(EXPECTED)}"
    assert set(EXPECTED) <= found, f"numbers of the records missing from the screen: {set(EXPECTED) - found}"
    for sentence in (
        "`served_tokens` is fastest at every c (150 / 315 / 320 sentences/s at c=1/8/32); at c=8 `served_tokens` "
        "serves 1.50x (1.50-1.50) `served_text`, 3.15x (3.00-3.30) `peer_a` (peer).",
        "toy_detect: jpeg-in / tensor-in (local) 2.00x (1.80-2.20, 3 rounds at c=1)",
        "toy_detect: docker / local 0.90x (0.80-1.00, 3 variant x c cells, 0.2 h apart)",
        "toy_embed: served_text gate / direct (c=8) 0.90x (0.80-0.95, 3 rounds, 2026-12-01)",
    ):
        assert sentence in screen, sentence


def test_the_screen_fits_the_first_forty_lines_and_shows_its_two_figures(rendered):
    screen, written = rendered
    assert len(screen.splitlines()) <= 42
    for kind in ("serving", "costs"):
        assert f"plots/headline-{kind}.png" in screen
        assert written[f"plot headline {kind}"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _make_targets() -> set[str]:
    text = (PROJECT_ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-zA-Z0-9_-]+):", text, flags=re.M))


def _harness_subcommands() -> set[str]:
    done = subprocess.run([sys.executable, "-m", "harness", "--help"], capture_output=True, text=True, check=True)
    return set(re.search(r"\{([a-z,-]+)\}", done.stdout).group(1).split(","))


def test_every_command_on_the_screen_is_a_make_target_or_a_harness_subcommand(rendered):
    screen, _ = rendered
    makefile = (PROJECT_ROOT / "Makefile").read_text()
    targets, subcommands = _make_targets(), _harness_subcommands()
    commands = [c.strip() for span in re.findall(r"`([^`]*)`", screen) for c in span.split("&&")]
    commands = [c for c in commands if c.startswith(("make ", "python -m harness"))]
    assert len(commands) >= 8, commands
    for command in commands:
        words = command.split()
        if words[0] == "make":
            for word in words[1:]:
                if "=" in word:
                    assert f"$({word.split('=')[0]})" in makefile, f"{command}: the Makefile reads no {word}"
                else:
                    assert word in targets, f"{command}: no Makefile target {word}"
        else:
            assert words[3] in subcommands, f"{command}: no harness subcommand {words[3]}"


def test_a_lesson_without_records_says_not_measured_and_its_command(tmp_path):
    root = tmp_path / "deployments"
    (root / "toy_detect" / "model_repository" / "pipeline").mkdir(parents=True)
    (root / "toy_detect" / "model_repository" / "detector").mkdir(parents=True)
    (root / "toy_detect" / "deployment.toml").write_text(MANIFEST)
    (tmp_path / "results").mkdir()
    written = matrix.generate(tmp_path / "results" / "records.jsonl", tmp_path / "docs", root)
    screen = written["markdown"].read_text().split("## Tables", 1)[0]
    from harness.measuring.matrix.headlines import COSTS
    from harness_lab.matrix_sections import GATE, side_by_side

    for command in [side_by_side.COMMAND, *(k.command for k in (*COSTS, GATE))]:
        assert f"{matrix.NOT_MEASURED}: `{command}`" in screen
    assert not any(k.startswith("plot headline") for k in written)


def test_the_lab_sections_are_found_through_the_entry_point():
    from harness.measuring.matrix.sections import installed
    from harness_lab.matrix_sections import SECTIONS

    assert SECTIONS in installed()


def test_each_ceiling_sits_over_its_own_bar_and_an_off_scale_one_says_so():
    """A figure with ceilings (as the removed network figure had): per link a JPEG, a tensor and a naive tensor bar, the JPEG's ceiling
    far off the axis, the tensor's above both bars of its group, the naive one's just above its bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from harness.measuring.matrix.plots import bars

    series = {"jpeg": [14.0, 15.0], "tensor": [9.0, 2.4], "naive": [2.5, 0.6]}
    ceilings = {"jpeg": [908.0, 90.8], "tensor": [24.4, 2.44], "naive": [6.1, 0.61]}
    fig, ax = plt.subplots()
    bars(ax, ["1gbit", "100mbit"], series, ceilings, label_marks=True)
    drawn = {label: container.patches for label, container in zip(series, ax.containers)}
    ticks = [seg for c in ax.collections for seg in c.get_segments() if seg[0][1] == seg[1][1]]
    for label, patches in drawn.items():
        for patch, mark in zip(patches, ceilings[label]):
            over = [s for s in ticks if abs(s[0][1] - mark) < 1e-9]
            if mark > ax.get_ylim()[1]:
                assert not over, f"{label}'s off-scale ceiling {mark} drawn inside the axis"
                continue
            assert over, f"{label}'s ceiling {mark} not drawn"
            centre = patch.get_x() + patch.get_width() / 2
            assert all(abs((s[0][0] + s[1][0]) / 2 - centre) < 1e-9 for s in over), f"{label}'s ceiling {mark}"
    texts = [t.get_text() for t in ax.texts]
    assert texts.count("908\n(off scale)") == 1 and texts.count("90.8\n(off scale)") == 1
    assert "24.4" in texts, "a ceiling above its bar says its value"
    plt.close(fig)
