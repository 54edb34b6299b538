"""``python -m harness refresh NAME``: regenerate a deployment's files in the order they depend on.

1. the export (``[export] command`` with its ``force_args``): the model files, stamped with their
   weights' identity; an export removes the files it derived from the ones it replaced;
2. the fixtures from the reference (``[export] fixtures``), on the weights just exported;
3. what reads those fixtures (``[export] after_fixtures``: quantization gates, each writing its
   file only where its gate holds: a missed gate is reported, not an error).

Each command runs in the deployment's folder with ``{python}`` replaced by this interpreter.
"""

from __future__ import annotations

from harness.deployments import Deployment, ManifestError, get_deployment

__all__ = ["refresh"]


def refresh(deployment: Deployment, python: str | None = None) -> list[str]:
    """Export, fixtures, then the steps that read the fixtures; returns the after-fixture steps
    that wrote nothing (missed gates). Raises when the export or the fixtures fail."""
    spec = deployment.manifest.export
    if spec is None:
        raise ManifestError(f"{deployment.name}: no [export] table, nothing to regenerate")
    deployment.export(force=True, python=python, after_fixtures=False)
    if spec.fixtures:
        deployment.run_step(spec.fixtures, python)
    return [" ".join(step) for step in spec.after_fixtures if deployment.run_step(step, python, check=False) != 0]


def add_arguments(parser) -> None:
    parser.add_argument("deployment")


def refresh_command(args) -> int:
    deployment = get_deployment(args.deployment)
    for step in refresh(deployment):
        print(f"{deployment.name}: `{step}` wrote nothing (its gate, above)")
    print(f"{deployment.name}: refreshed; next: pytest harness/ {deployment.path} -k {deployment.name}")
    return 0
