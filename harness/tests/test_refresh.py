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


def test_refresh_writes_the_values_the_model_gives_into_the_manifest(tmp_path, capsys):
    """The checks module's ``manifest_values``, read after the export, land in deployment.toml with
    its comments kept; a key whose table the manifest lacks is left out."""
    deployment = _deployment(tmp_path)
    manifest = deployment.path / "deployment.toml"
    manifest.write_text(
        manifest.read_text()
        + textwrap.dedent("""
        [tests]
        module = "checks.py"
        # the front gate's bounds
        [gate]
        max_dims = { m = { ids = [512] } }  # the model's positions
        """)
    )
    export = deployment.path / "export.py"
    export.write_text("import pathlib\npathlib.Path('positions.txt').write_text('128')\n" + export.read_text())
    (deployment.path / "checks.py").write_text(
        "import pathlib\n"
        "def manifest_values(deployment):\n"
        "    positions = int((deployment.path / 'positions.txt').read_text())\n"
        "    return {'gate.max_dims.m.ids': [positions], 'openai.models.m.tokens.vocab_size': 7}\n"
    )
    refresh(load_deployment(deployment.path), sys.executable)
    written = manifest.read_text()
    assert "max_dims = { m = { ids = [128] } }  # the model's positions" in written, written
    assert "# the front gate's bounds" in written and "openai" not in written, written
    assert load_deployment(deployment.path).manifest.gate.max_dims == {"m": {"ids": [128]}}
    assert "gate.max_dims.m.ids: [512] -> [128]" in capsys.readouterr().out
