"""``python -m harness refresh NAME``: export, fixtures, then what reads the fixtures, in that order."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from harness.__main__ import main
from harness.deployments import load_deployment
from harness.refresh import refresh

STEP = "import sys, pathlib; pathlib.Path('steps.log').open('a').write(sys.argv[1] + '\\n'); sys.exit(int(sys.argv[2]))"


def _deployment(root, gate_exit: int = 0, fixtures_exit: int = 0):
    folder = root / "toy"
    (folder / "model_repository" / "m" / "1").mkdir(parents=True)
    (folder / "step.py").write_text(STEP)
    (folder / "export.py").write_text(
        "import pathlib, runpy, sys\n"
        "pathlib.Path('model_repository/m/1/model.onnx').write_text('x')\n"
        "sys.argv = ['step.py', 'export', '0']; runpy.run_path('step.py', run_name='__main__')\n"
    )
    (folder / "deployment.toml").write_text(
        textwrap.dedent(f"""
        name = "toy"
        entry_models = ["m"]
        [export]
        command = ["{{python}}", "export.py"]
        outputs = ["model_repository/m/1/model.onnx"]
        fixtures = ["{{python}}", "step.py", "fixtures", "{fixtures_exit}"]
        after_fixtures = [["{{python}}", "step.py", "gate", "{gate_exit}"]]
        """)
    )
    return load_deployment(folder)


def _steps(deployment) -> list[str]:
    return (deployment.path / "steps.log").read_text().split()


def test_refresh_runs_export_fixtures_then_the_gate(tmp_path):
    deployment = _deployment(tmp_path)
    assert refresh(deployment, sys.executable) == []
    assert _steps(deployment) == ["export", "fixtures", "gate"]
    (deployment.path / "steps.log").unlink()
    assert deployment.export(force=True, python=sys.executable)
    assert _steps(deployment) == ["export", "gate"], "export runs the steps that read the committed fixtures"


def test_a_missed_gate_is_reported_a_failed_fixtures_step_is_an_error(tmp_path, capsys, monkeypatch):
    missed = _deployment(tmp_path / "a", gate_exit=1)
    assert refresh(missed, sys.executable) == ["{python} step.py gate 1"]
    monkeypatch.setenv("HARNESS_DEPLOYMENTS_DIR", str(tmp_path / "a"))
    assert main(["refresh", "toy"]) == 0
    assert "`{python} step.py gate 1` wrote nothing" in capsys.readouterr().out
    broken = _deployment(tmp_path / "b", fixtures_exit=3)
    with pytest.raises(subprocess.CalledProcessError, match="step.py"):
        refresh(broken, sys.executable)
    assert _steps(broken) == ["export", "fixtures"], "nothing runs after failed fixtures"
