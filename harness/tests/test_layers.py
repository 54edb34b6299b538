"""The import directions hold: the contracts of pyproject.toml [tool.importlinter] (the core never
imports the lab or the stubs' helpers, the gate imports nothing of the harness, the core's layers
point down, no cycle between sibling packages), checked by import-linter as `make lint` does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness import PROJECT_ROOT


def test_import_contracts_are_kept():
    lint_imports = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run([str(lint_imports)], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
