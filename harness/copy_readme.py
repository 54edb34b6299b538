"""The README of a copy (``harness new``), rendered from its deployment's ``README.md.j2``.

The template (jinja2) describes the deployment by what the copy has, never by the original's
runs: the entry models it serves (``models``, ``entry_models``), the weights its own export
settings name (``export_args``: the ``--flag value`` pairs of ``[export] command`` and
``fixtures``; ``exists(path)``, ``path_text(path)`` of a file of the copy), the commands for this copy
(``deploy``, ``test``, ``path``) and its figures: the results block of ``make matrix``, "not
measured yet" until ``docs/results.json`` has rows of the copy. ``new``, ``rename`` and
``python -m harness readme NAME`` (after a swap and ``refresh``) write it.
"""

from __future__ import annotations

import json
from pathlib import Path

import jinja2

from harness import PROJECT_ROOT
from harness.deployments import Deployment, get_deployment
from harness.measuring.matrix.readme import readme_block

__all__ = ["GENERATED", "TEMPLATE", "add_arguments", "export_args", "readme_command", "render_readme", "write_readme"]

TEMPLATE = "README.md.j2"
#: The last line of a README this module wrote: one without it is written by hand and kept.
GENERATED = f"<!-- written from {TEMPLATE} by `python -m harness readme`: edit the template, not this file -->"
RESULTS_JSON = PROJECT_ROOT / "docs" / "results.json"


def export_args(deployment: Deployment) -> dict[str, str]:
    """``{flag without dashes: value}`` of the manifest's export and fixtures commands
    (``--onnx my/model.onnx`` -> ``{"onnx": "my/model.onnx"}``; a flag alone -> ``"true"``)."""
    spec = deployment.manifest.export
    found: dict[str, str] = {}
    for command in [spec.command, spec.fixtures] if spec else []:
        for i, part in enumerate(command):
            if part.startswith("--"):
                value = command[i + 1] if i + 1 < len(command) and not command[i + 1].startswith("--") else "true"
                found.setdefault(part[2:].replace("-", "_"), value)
    return found


def _results_rows(name: str, results_json: Path) -> list[dict]:
    if not results_json.exists():
        return []
    return json.loads(results_json.read_text()).get("deployments", {}).get(name, {}).get("rows", [])


def render_readme(deployment: Deployment, results_json: Path = RESULTS_JSON) -> str:
    """The copy's README text from its ``README.md.j2``."""
    template = (deployment.path / TEMPLATE).read_text()
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    name = deployment.name
    models = sorted(p.name for p in deployment.model_repository.iterdir() if p.is_dir())
    return (
        environment.from_string(template)
        .render(
            name=name,
            path=f"deployments/{name}",
            entry_models=deployment.entry_models,
            models=models,
            internal_models=[m for m in models if m not in deployment.entry_models],
            benchmarks=[b.id for b in deployment.benchmarks],
            export_args=export_args(deployment),
            exists=lambda relative: (deployment.path / relative).exists(),
            path_text=lambda relative: (deployment.path / relative).read_text(),
            deploy=f"make deploy DEPLOYMENT={name}",
            test=f".venv/bin/pytest harness/ deployments/{name}/ -k {name}",
            results=readme_block(name, _results_rows(name, results_json)),
        )
        .rstrip("\n")
        + f"\n\n{GENERATED}\n"
    )


def write_readme(deployment: Deployment, results_json: Path = RESULTS_JSON, replace: bool = False) -> Path | None:
    """Write the copy's README.md from its template; None where the deployment has no template or
    its README is written by hand (an original's), unless ``replace`` (``new``: the copied one)."""
    readme = deployment.path / "README.md"
    hand_written = readme.exists() and GENERATED not in readme.read_text()
    if not (deployment.path / TEMPLATE).exists() or (hand_written and not replace):
        return None
    readme.write_text(render_readme(deployment, results_json))
    return readme


def add_arguments(parser) -> None:
    parser.add_argument("deployment")


def readme_command(args) -> int:
    deployment = get_deployment(args.deployment)
    written = write_readme(deployment)
    if written is None:
        print(f"{deployment.name}: no {TEMPLATE}, or a README.md written by hand (kept)")
        return 2
    print(f"{deployment.name}: wrote {written}")
    return 0
