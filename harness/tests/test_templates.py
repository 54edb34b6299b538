"""A deployment folder is a template a user reads: shared code is truly shared, model.py shows the model."""

from __future__ import annotations

import ast
import re

from harness import PROJECT_ROOT
from harness.deployments import discover

HELPERS = PROJECT_ROOT / "triton_helpers"


def test_every_triton_helpers_module_serves_two_deployments_or_more():
    """What only one deployment uses lives in that deployment's folder, not in triton_helpers."""
    deployments = discover()
    lonely = {}
    for module in sorted(p.stem for p in HELPERS.glob("*.py") if p.stem != "__init__"):
        pattern = re.compile(rf"\btriton_helpers(\.{module}\b|\s+import\s+[^\n]*\b{module}\b)")
        users = [d.name for d in deployments if any(pattern.search(f.read_text()) for f in d.path.rglob("*.py"))]
        if len(users) < 2:
            lonely[module] = users
    assert lonely == {}, f"triton_helpers modules used by fewer than two deployments: {lonely}"


def test_every_model_py_shows_its_model():
    """Each Python model defines TritonPythonModel with its own initialize and execute (no bare subclass)."""
    thin = []
    for deployment in discover():
        for path in sorted(deployment.model_repository.glob("*/1/model.py")):
            tree = ast.parse(path.read_text())
            classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TritonPythonModel"]
            methods = {
                f.name for c in classes for f in c.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            }
            if not classes or not {"initialize", "execute"} <= methods:
                thin.append(f"{path.relative_to(PROJECT_ROOT)}: defines {sorted(methods)}")
    assert thin == [], "model.py files that do not show initialize and execute:\n  " + "\n  ".join(thin)


def test_deployment_readmes_are_short():
    """A README a user reads in minutes: what it shows, which model for what, commands, headline numbers."""
    long = {d.name: n for d in discover() if (n := len((d.path / "README.md").read_text().splitlines())) > 120}
    assert long == {}, f"READMEs over 120 lines (lab notes go to docs/tuning.md): {long}"
