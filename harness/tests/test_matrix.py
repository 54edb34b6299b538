"""Results matrix: records -> results.md / JSON / CSV / plots, never-measured rows, layout,
container cost, correctness from check outcomes."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness import PROJECT_ROOT
from harness.deployments import discover
from harness.measuring import matrix
from harness.measuring.records import OUTCOMES_FILE
from harness.tests.matrix_cases import measured_record

MANIFEST = """
name = "toy"
summary = "A toy deployment"
targets = ["cpu", "npu"]
entry_models = ["m"]

[[benchmarks]]
id = "m-b1"
workload = "checks.py:workload"
concurrency = [1, 4]
targets = ["cpu"]

[[benchmarks]]
id = "m-npu"
workload = "checks.py:workload"
concurrency = [16]
targets = ["npu"]
"""


@pytest.fixture
def toy(tmp_path):
    root = tmp_path / "deployments"
    (root / "toy" / "model_repository" / "m").mkdir(parents=True)
    (root / "toy" / "deployment.toml").write_text(MANIFEST)
    results = tmp_path / "results"
    results.mkdir()
    return root, results, tmp_path / "docs"


def table_blocks(markdown: str) -> dict[str, list[tuple[str, str]]]:
    """``{deployment: [(variant, "mode / target"), ...]}`` read back from a results.md: the rows of
    the tables whose header is the matrix's (``variant | server / target | ...``), per ``## `` section."""
    blocks: dict[str, list[tuple[str, str]]] = {}
    current, in_table = None, False
    for line in markdown.splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            blocks[current] = []
        if not line.startswith("|"):
            in_table = False
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[:2] == ["variant", "server / target"]:
            in_table = True
        elif current and in_table and not line.startswith("|--") and (cells[0], cells[1]) not in blocks[current]:
            blocks[current].append((cells[0], cells[1]))
    return blocks


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _generate(toy, rows, sections=None) -> dict[str, Path]:
    root, results, docs = toy
    _write(results / "records.jsonl", rows)
    return matrix.generate(results / "records.jsonl", docs, root, sections=sections)


def test_measured_and_never_measured_rows(toy):
    old = measured_record(timestamp="2026-11-29T10:00:00+00:00", perf_throughput=1.0, items_per_second=1.0)
    rows = [
        old,
        measured_record(),
        measured_record(concurrency=4, perf_throughput=80.0, items_per_second=80.0, ceiling_items_per_second=160.0),
    ]
    written = _generate(toy, rows)
    text = written["markdown"].read_text()
    blocks = table_blocks(text)
    # cpu benchmark: local (measured) and docker (never measured); npu benchmark: docker only
    assert blocks["toy"] == [("m-b1", "local / cpu"), ("m-b1", "docker / cpu"), ("m-npu", "docker / npu")]
    lines = [line for line in text.splitlines() if line.startswith("| m-")]
    cells = [c.strip() for c in lines[0].strip("|").split("|")]
    assert cells == ["m-b1", "local / cpu", "1", "50.0", "19.5", "30.2", "90 B / 1.6 kB", "–", "not run"]
    assert "| 1.0 " not in lines[0], "the older record of the same cell must lose"
    assert "| 50% " in lines[1], "of ceiling from ceiling_items_per_second"
    assert "not measured" in lines[2] and "1, 4" in lines[2]
    assert "not measured" in lines[3] and "16" in lines[3]
    assert "`local` server mode, measured 2026-11-30: Test CPU, 2 cores, Debian 12; tritonserver 2.51.0" in text
    assert "`docker` server mode: no run recorded yet" not in text
    assert "onnxruntime via harness Python backend" in text
    assert "harness-asyncio (tritonclient asyncio, `python -m harness bench`)" in text
    assert "> ceiling" not in text, "no row above its ceiling: no mark, no footnote"
    data = json.loads(written["json"].read_text())
    toy_rows = data["deployments"]["toy"]["rows"]
    assert [r["measured"] for r in toy_rows] == [True, True, False, False]
    assert toy_rows[0]["server_compute_ms"] == 15.5 and toy_rows[1]["ceiling_items_per_second"] == 160.0
    with written["csv"].open() as handle:
        assert len(list(csv.DictReader(handle))) == 4
    for kind in ("throughput", "latency", "bytes"):
        png = written[f"plot toy {kind}"]
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"plots/toy-{kind}.png" in text


def test_a_rate_above_its_ceiling_is_marked_and_explained_never_shown_above_100_percent(toy):
    rows = [measured_record(items_per_second=82.0, ceiling_items_per_second=50.0)]
    text = _generate(toy, rows)["markdown"].read_text()
    row = next(line for line in text.splitlines() if line.startswith("| m-b1") and "local / cpu" in line)
    assert "> ceiling" in row and "164%" not in text
    assert matrix.render.ABOVE_CEILING in text


def test_local_and_docker_rows_are_separate_tables_each_with_its_run_and_date(toy):
    rows = [
        measured_record(),
        measured_record(server_mode="docker", timestamp="2026-11-28T09:00:00+00:00", server_version="2.50.0"),
    ]
    text = _generate(toy, rows)["markdown"].read_text()
    section = text.split("## toy", 1)[1]
    local, docker = (
        section.index("`local` server mode, measured 2026-11-30"),
        section.index("`docker` server mode, measured 2026-11-28"),
    )
    tables = [i for i, line in enumerate(section.splitlines()) if line.startswith("| variant")]
    assert len(tables) == 2 and local < docker
    assert "tritonserver 2.50.0" in section[docker:]


def test_container_cost_pairs_docker_with_local_rows(toy):
    rows = [
        measured_record(),
        measured_record(
            server_mode="docker", timestamp="2026-11-30T10:30:00+00:00", perf_throughput=40.0, items_per_second=40.0
        ),
        measured_record(concurrency=4, perf_throughput=80.0, items_per_second=80.0),
        # a later local run of the same cell: shown in the table, but not the docker row's pair
        measured_record(timestamp="2026-11-30T15:00:00+00:00", perf_throughput=70.0, items_per_second=70.0),
    ]
    text = _generate(toy, rows)["markdown"].read_text()
    cost = text.split("Container cost", 1)[1].split("\n\n", 2)[1]
    cost_rows = [line for line in cost.splitlines() if line.startswith("| m-")]
    assert len(cost_rows) == 1, "only c=1 was measured in both modes"
    cells = [c.strip() for c in cost_rows[0].strip("|").split("|")]
    assert cells == ["m-b1", "cpu", "1", "50.0", "40.0", "0.80", "0.5"]
    assert "Container cost" not in _generate(toy, [measured_record()])["markdown"].read_text()


def test_nothing_measured_still_lists_every_row_and_no_plot(toy):
    written = _generate(toy, [])
    text = written["markdown"].read_text()
    assert table_blocks(text)["toy"] == [
        ("m-b1", "local / cpu"),
        ("m-b1", "docker / cpu"),
        ("m-npu", "docker / npu"),
    ]
    assert text.count("not measured") >= 3 and "no run recorded yet" in text
    assert not any(k.startswith("plot") for k in written)


def test_missing_level_and_perf_analyzer_rows(toy):
    rows = [
        measured_record(),
        measured_record(
            generator="perf_analyzer (perf_analyzer 2.60.0)",
            perf_throughput=55.0,
            items_per_second=55.0,
            bytes_received_per_request=None,
            perf_server_compute_input=None,
            perf_server_compute_infer=None,
            perf_server_compute_output=None,
        ),
    ]
    written = _generate(toy, rows)
    text = written["markdown"].read_text()
    lines = [line for line in text.splitlines() if line.startswith("| m-b1") and "local / cpu" in line]
    assert len(lines) == 4, lines  # c=1 and c=4 for each generator
    assert any("perf_analyzer" in line and "55.0" in line for line in lines)
    assert sum("not measured" in line for line in lines) == 2


def test_correctness_from_plugin_outcomes(toy):
    root, results, docs = toy
    outcomes = [
        {
            "timestamp": "2026-11-30T09:00:00+00:00",
            "param": "toy-m_matches_reference",
            "outcome": "failed",
            "target": "cpu",
            "server_mode": "local",
        },
        {
            "timestamp": "2026-11-30T11:00:00+00:00",
            "param": "toy-m_matches_reference",
            "outcome": "passed",
            "target": "cpu",
            "server_mode": "local",
        },
        {
            "timestamp": "2026-11-30T11:00:00+00:00",
            "param": "toy-bad_input",
            "outcome": "passed",
            "target": "cpu",
            "server_mode": "local",
        },
    ]
    _write(results / OUTCOMES_FILE, outcomes)
    text = _generate(toy, [measured_record()])["markdown"].read_text()
    row = next(line for line in text.splitlines() if line.startswith("| m-b1") and "local / cpu" in line)
    assert "pass 1/1" in row, row  # the check naming model m, latest outcome wins
    assert "correctness on cpu/local: 2/2 checks passed" in text
    assert "not run" in next(line for line in text.splitlines() if "docker / cpu" in line)

    _write(results / OUTCOMES_FILE, [{**outcomes[1], "timestamp": "2026-11-30T12:00:00+00:00", "outcome": "failed"}])
    text = _generate(toy, [measured_record()])["markdown"].read_text()
    assert "FAIL 1/1: m_matches_reference" in text


def test_config_variant_rows_show_the_checks_run_on_that_variant(toy):
    root, results, docs = toy
    manifest = root / "toy" / "deployment.toml"
    manifest.write_text(
        manifest.read_text() + '\n[[benchmarks]]\nid = "m-other"\nworkload = "checks.py:workload"\n'
        'concurrency = [1]\ntargets = ["cpu"]\n[benchmarks.config.m]\nmax_batch_size = 4\n'
    )

    def outcome(outcome, variant=None, check="m_matches_reference"):
        row = {"timestamp": "2026-11-30T11:00:00+00:00", "param": f"toy-{check}", "outcome": outcome}
        return {**row, "target": "cpu", "server_mode": "local", **({"config_variant": variant} if variant else {})}

    variant_row = measured_record(benchmark="m-other")
    _write(results / OUTCOMES_FILE, [outcome("passed")])
    text = _generate(toy, [measured_record(), variant_row])["markdown"].read_text()
    row = next(line for line in text.splitlines() if line.startswith("| m-other") and "local / cpu" in line)
    assert "not run" in row and "pass" not in row, "the default config's checks say nothing of a variant"

    _write(results / OUTCOMES_FILE, [outcome("passed"), outcome("failed", "m-other")])
    text = _generate(toy, [measured_record(), variant_row])["markdown"].read_text()
    row = next(line for line in text.splitlines() if line.startswith("| m-other") and "local / cpu" in line)
    assert "FAIL 1/1: m_matches_reference" in row, row
    default = next(line for line in text.splitlines() if line.startswith("| m-b1") and "local / cpu" in line)
    assert "pass 1/1" in default, default
    assert "correctness on cpu/local --config-variant m-other: 0/1 checks passed" in text

    # every check of the variant's run speaks for its rows, not only those named after the model
    outcomes = [outcome("passed"), outcome("passed", "m-other"), outcome("failed", "m-other", "bad_input")]
    _write(results / OUTCOMES_FILE, outcomes)
    text = _generate(toy, [measured_record(), variant_row])["markdown"].read_text()
    row = next(line for line in text.splitlines() if line.startswith("| m-other") and "local / cpu" in line)
    assert "FAIL 1/2: bad_input" in row, row


def test_outcome_plugin_records_checks(tmp_path):
    test_file = tmp_path / "test_fake.py"
    test_file.write_text(
        "import pytest\n"
        "@pytest.mark.parametrize('x', [1, 2], ids=['toy-good', 'toy-bad'])\n"
        "def test_check(x):\n    assert x == 1\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "harness.testing.outcomes",
            str(test_file),
            "-p",
            "no:cacheprovider",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "HARNESS_RESULTS_DIR": str(tmp_path / "r")},
    )
    assert "1 failed, 1 passed" in done.stdout, done.stdout + done.stderr
    rows = [json.loads(line) for line in (tmp_path / "r" / OUTCOMES_FILE).read_text().splitlines()]
    assert {(r["param"], r["outcome"]) for r in rows} == {("toy-good", "passed"), ("toy-bad", "failed")}


def _table_order(deployment) -> list[tuple[str, str]]:
    """The declared grid as the tables show it: a table per server mode, scenarios in manifest order."""
    grid = [(b, f"{m} / {t}") for b, t, m in matrix.expected_grid(deployment)]
    modes = list(dict.fromkeys(where.split(" / ")[0] for _, where in grid))
    return sorted(grid, key=lambda p: modes.index(p[1].split(" / ")[0]))


def test_the_renderer_lists_every_declared_row_of_every_deployment():
    """What `make matrix` writes for the manifests as they are now: one row block per declared
    scenario x target x server mode, in manifest order, measured or not (here: from no records)."""
    deployments = discover()
    text = matrix.render_markdown(matrix.build([], deployments, []), "no records", [], deployments)
    blocks = table_blocks(text)
    for deployment in deployments:
        assert blocks[deployment.name] == _table_order(deployment), deployment.name


def test_committed_results_md_rows_follow_the_manifests():
    """docs/results.md is regenerated from one full measuring run (`make bench matrix` on a quiet
    machine), not with each manifest change: until that run it may lack a scenario declared since
    (the test above shows it would appear, "not measured"), but it has a section per deployment and
    every row it shows is a declared scenario, those of each server / target in the manifest's order."""
    committed = (PROJECT_ROOT / "docs" / "results.md").read_text()
    blocks = table_blocks(committed)
    for deployment in discover():
        expected = _table_order(deployment)
        assert deployment.name in blocks, f"docs/results.md has no section {deployment.name}: run `make matrix`"
        shown = [(variant.split(" [")[0], where) for variant, where in blocks[deployment.name]]
        declared = {b.id for b in deployment.benchmarks}
        assert {v for v, _ in shown} <= declared, (
            f"docs/results.md shows scenarios {deployment.name} no longer declares"
        )
        for mode in {where for _, where in expected}:
            mine = [p for p in shown if p[1] == mode and p in expected]
            assert mine == [p for p in expected if p in mine], (
                f"docs/results.md rows of {deployment.name} on {mode} are out of its manifest's order: run `make matrix`"
            )


def test_run_footnote_says_whether_the_front_gate_was_in_front(toy):
    gated = measured_record(gate=True)
    direct = measured_record(gate=False, server_mode="docker", timestamp="2026-11-30T11:00:00+00:00")
    text = _generate(toy, [gated, direct])["markdown"].read_text()
    assert (
        "`local` server mode, measured 2026-11-30: Test CPU, 2 cores, Debian 12; tritonserver 2.51.0, behind the front gate"
        in text
    )
    assert (
        "`docker` server mode, measured 2026-11-30: Test CPU, 2 cores, Debian 12; tritonserver 2.51.0, no front gate"
        in text
    )


def test_the_matrix_replaces_its_own_figures_and_keeps_the_others(toy):
    _, _, docs = toy
    plots = docs / "plots"
    plots.mkdir(parents=True)
    (plots / "gone-throughput.png").write_bytes(b"stale figure of a deployment that no longer exists")
    (plots / "soak_toy-rss.png").write_bytes(b"a reliability figure lab/docs/reliability.md shows")
    _generate(toy, [measured_record()])
    assert not (plots / "gone-throughput.png").exists()
    assert (plots / "soak_toy-rss.png").exists(), "make matrix must not delete the reliability figures"
    assert (plots / "toy-throughput.png").exists()


def test_a_section_measured_at_another_commit_of_its_model_repository_says_so(toy):
    root, results, docs = toy
    (root / "toy" / "model_repository" / "m" / "config.pbtxt").write_text('name: "m"\n')

    def git(*args):
        return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "before")
    before = git("log", "-1", "--format=%h")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "the model repository")
    now = git("log", "-1", "--format=%h")
    from harness.provenance import repository_commit

    repository_commit.cache_clear()
    assert repository_commit(root / "toy" / "model_repository") == now
    fresh = _generate(toy, [measured_record(model_repository_commit=now)])["markdown"].read_text()
    assert "Freshness:" not in fresh
    stale = _generate(toy, [measured_record(model_repository_commit=before)])["markdown"].read_text()
    assert f"records of toy measured its model repository at commit {before}, not at {now} as now" in stale
    unknown = _generate(toy, [measured_record()])["markdown"].read_text()
    assert "1 of 1 records of toy do not say which commit of its model repository they measured" in unknown
    (root / "toy" / "model_repository" / "m" / "config.pbtxt").write_text('name: "m2"\n')
    repository_commit.cache_clear()
    assert repository_commit(root / "toy" / "model_repository") == now + "+dirty"


def test_records_say_which_commit_of_the_model_repository_they_measured(tmp_path):
    from harness.deployments import discover
    from harness.measuring.records import append_record, read_records
    from harness.provenance import repository_commit

    deployment = discover()[0]
    append_record(
        {
            "deployment": deployment.name,
            "benchmark": "b",
            "model": "m",
            "variant": "v",
            "target": "cpu",
            "generator": "g",
            "concurrency": 1,
            "items_per_second": 1.0,
        },
        tmp_path / "records.jsonl",
    )
    (record,) = read_records(tmp_path / "records.jsonl")
    assert record["model_repository_commit"] == repository_commit(deployment.model_repository)
    assert record["model_repository_commit"]


def test_without_a_records_file_the_command_says_so_and_writes_nothing(tmp_path, capsys):
    docs = tmp_path / "docs"
    assert matrix.main(["--records", str(tmp_path / "records.jsonl"), "--docs", str(docs)]) == 1
    err = capsys.readouterr().err
    assert f"no records at {tmp_path / 'records.jsonl'}" in err and "make bench" in err
    assert not docs.exists(), "docs/ left as they are"


def test_without_installed_sections_the_core_renders_its_own_and_names_none_of_theirs(toy):
    """The lab's sections (side-by-side, gate cost, perf_analyzer) come from its entry
    points: without them the pages hold the core's tables and costs lesson, and no word of theirs."""
    local = measured_record(timestamp="2026-11-30T10:00:00+00:00")
    docker = measured_record(timestamp="2026-11-30T10:10:00+00:00", server_mode="docker", items_per_second=45.0)
    written = _generate(toy, [local, docker], sections=[])
    text = written["markdown"].read_text()
    assert "## Headlines\n\n### What processing on the server and the container cost (1.00 = nothing)" in text
    assert "toy: docker / local 0.90x" in text
    assert "Load generators: harness-asyncio (tritonclient asyncio, `python -m harness bench`).\n" in text
    for word in ("perf_analyzer", "side by side", "gate-cost", "peers"):
        assert word not in text.lower(), word
    assert sorted(json.loads(written["json"].read_text())) == [
        "deployments",
        "headlines",
        "not_measured",
        "source",
    ]
