"""The harness names no deployment: tools take deployment, model and workload from their
arguments or the deployment's manifest, so a copied or new deployment needs no harness edit.

Checked on the code, not its prose: no string literal in non-test harness (or lab) code is a
deployment's folder name or the name of one of its models, and no function, class or variable
is named after a deployment.
"""

from __future__ import annotations

import ast
from pathlib import Path

from harness import PROJECT_ROOT
from harness.deployments import discover

#: The core and, where it is installed beside it, the lab.
PACKAGES = [PROJECT_ROOT / "harness", PROJECT_ROOT / "lab" / "harness_lab"]


def deployment_names() -> tuple[set[str], set[str]]:
    """(deployment folder names, every entry model and model folder of them)."""
    folders, models = set(), set()
    for deployment in discover():
        folders.add(deployment.path.name)
        models.update(deployment.entry_models)
        models.update(p.name for p in deployment.model_repository.iterdir() if p.is_dir())
    return folders, models


def code_files() -> list[Path]:
    return sorted(
        p for package in PACKAGES if package.is_dir() for p in package.rglob("*.py") if "tests" not in p.parts
    )


def names_in_code(path: Path, folders: set[str], models: set[str]) -> list[str]:
    """``path:line: name`` for each literal naming a deployment or model, and each identifier naming a deployment."""
    found, where = [], path.relative_to(PROJECT_ROOT) if path.is_relative_to(PROJECT_ROOT) else path
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in folders | models:
            found.append(f"{where}:{node.lineno}: {node.value!r}")
        name = getattr(node, "name", None) or getattr(node, "id", None) or getattr(node, "attr", None)
        if isinstance(name, str) and any(folder in name.lower() for folder in folders):
            found.append(f"{where}:{node.lineno}: {name}")
    return found


def test_every_deployment_and_model_is_searched_for():
    folders, models = deployment_names()
    assert len(folders) == len(discover()) and models >= {m for d in discover() for m in d.entry_models}


def test_the_search_finds_a_name(tmp_path):
    folders, models = deployment_names()
    model = sorted(models)[0]
    sample = tmp_path / "sample.py"
    sample.write_text(f"def {sorted(folders)[0]}_workload():\n    return {model!r}\n")
    assert len(names_in_code(sample, folders, models)) == 2


def test_no_harness_code_names_a_deployment_or_its_models():
    folders, models = deployment_names()
    found = [hit for path in code_files() for hit in names_in_code(path, folders, models)]
    assert not found, (
        f"{len(found)} deployment or model names in non-test harness code (take them from an argument or the "
        "deployment's manifest):\n" + "\n".join(found)
    )
