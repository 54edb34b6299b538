"""lab/docs/reliability.md's results section: written from the reports, never emptied by a checkout without them."""

from __future__ import annotations

import json
import re

import pytest

from harness_lab.reliability.faults import main as faults_main
from harness_lab.reliability.report import BEGIN, END, NoReports, write_docs

DOC = f"# Reliability\n\nintro\n\n{BEGIN}\nmeasured section\n{END}\n\nafter\n"


def test_no_reports_leaves_the_committed_section_as_it_is(tmp_path):
    docs = tmp_path / "reliability.md"
    docs.write_text(DOC)
    with pytest.raises(NoReports, match="make reliability"):
        write_docs(tmp_path / "results", docs)
    assert docs.read_text() == DOC


def test_faults_write_docs_without_reports_exits_non_zero(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("harness_lab.reliability.faults.write_docs", lambda: write_docs(tmp_path, tmp_path / "r.md"))
    assert faults_main(["--write-docs"]) == 2
    assert "no reliability reports" in capsys.readouterr().err


def test_a_fuzz_report_replaces_only_the_section(tmp_path):
    docs = tmp_path / "reliability.md"
    docs.write_text(DOC)
    results = tmp_path / "results"
    results.mkdir()
    fuzz = {"total": 7, "results": 3, "input_errors": 4, "slowest_s": 0.1, "per_function": {"decode_rgb": 7}}
    (results / "fuzz.json").write_text(json.dumps(fuzz))
    write_docs(results, docs)
    text = docs.read_text()
    assert text.startswith("# Reliability\n\nintro\n\n") and text.endswith("\n\nafter\n")
    assert "measured section" not in text
    assert "7 generated hostile inputs" in text and re.search(r"^\| `decode_rgb` +\| 7 +\|$", text, re.M)
