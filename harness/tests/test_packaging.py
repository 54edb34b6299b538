"""pyproject.toml tells the truth: the Python it needs, and every package the code imports."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from harness import PROJECT_ROOT

PYPROJECT = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
#: Imported by the code but installed --no-deps (requirements/no-deps.txt) or only inside the stub
#: (batched_runs: copied beside the backends' model.py, backends/).
NOT_FROM_PYPROJECT = {
    "cn_clip",
    "triton_python_backend_utils",
    "batched_runs",
    "harness",
    "harness_lab",
    "triton_helpers",
    "triton_gate",
}
#: Imported by serving code only inside a function that export scripts call.
EXPORT_ONLY = {"torchvision": "make_fixtures.py and the tests (the reference transforms)"}


def _declared(*extras: str) -> set[str]:
    names = {Requirement(r).name for r in PYPROJECT["dependencies"]}
    for extra in extras:
        names |= {Requirement(r).name for r in PYPROJECT["optional-dependencies"][extra]}
    return {re.sub(r"[-_.]+", "-", n).lower() for n in names}


def _imports(folders: list[str], skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Top-level third-party modules imported by the code under ``folders``: module -> first file."""
    found = {}
    deployments = PROJECT_ROOT / "deployments"
    # the deployments' own modules and packages (deployments/<d>/<package>/, installed from their folders)
    local = {p.stem for p in deployments.rglob("*.py")} | {p.parent.name for p in deployments.glob("*/*/__init__.py")}
    for folder in folders:
        root = PROJECT_ROOT / folder
        for path in [root] if root.is_file() else sorted(root.rglob("*.py")):
            if skip and (set(skip) & set(path.parts) or path.name == "conftest.py"):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in NOT_FROM_PYPROJECT | local:
                        found.setdefault(top, str(path.relative_to(PROJECT_ROOT)))
    return found


def test_requires_python_is_what_the_harness_needs():
    spec = SpecifierSet(PYPROJECT["requires-python"])
    assert "3.10" not in spec, "the harness uses tomllib (3.11+)"
    assert f"{sys.version_info.major}.{sys.version_info.minor}" in spec


def test_every_import_of_the_harness_and_helpers_is_a_declared_dependency():
    """Serving needs no extra beyond `serve` (exporters and the tests may need the others)."""
    distributions = packages_distributions()
    missing = []
    for module, where in _imports(["harness", "backends", "triton_helpers"], skip=("tests", "testing")).items():
        if module in EXPORT_ONLY:
            continue
        declared = _declared("serve")
        dists = {re.sub(r"[-_.]+", "-", d).lower() for d in distributions.get(module, [module])}
        if not dists & declared:
            missing.append(f"{module} (imported by {where}; distributions {sorted(dists)})")
    assert not missing, "imported but not declared in pyproject.toml dependencies/serve/test:\n  " + "\n  ".join(
        missing
    )


def test_exporters_clients_and_tests_need_only_declared_packages():
    distributions = packages_distributions()
    declared = _declared("serve", "test", "export")
    missing = []
    for module, where in _imports(
        ["deployments", "harness/tests", "harness/testing", "harness/conftest.py", "triton_helpers/tests"]
    ).items():
        dists = {re.sub(r"[-_.]+", "-", d).lower() for d in distributions.get(module, [module])}
        if not dists & declared:
            missing.append(f"{module} (imported by {where}; distributions {sorted(dists)})")
    assert not missing, "imported but not declared in pyproject.toml:\n  " + "\n  ".join(missing)
