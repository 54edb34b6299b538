"""``python -m harness refresh NAME``: regenerate a deployment's files in the order they depend on.

1. the export (``[export] command`` with its ``force_args``): the model files, stamped with their
   weights' identity; an export removes the files it derived from the ones it replaced;
2. the fixtures from the reference (``[export] fixtures``), on the weights just exported;
3. what reads those fixtures (``[export] after_fixtures``: quantization gates, each writing its
   file only where its gate holds: a missed gate is reported, not an error);
4. the manifest's values that follow from the model (a vocabulary size, the gate's bounds): the
   deployment's checks module says them (``manifest_values(deployment)``, dotted keys of
   ``deployment.toml``), and they are written in place, comments and layout kept.

Each command runs in the deployment's folder with ``{python}`` replaced by this interpreter.
"""

from __future__ import annotations

from pathlib import Path

from harness.deployments import Deployment, ManifestError, get_deployment

__all__ = ["derived_manifest_values", "refresh", "write_manifest_values"]


def refresh(deployment: Deployment, python: str | None = None) -> list[str]:
    """Export, fixtures, then the steps that read the fixtures; returns the after-fixture steps
    that wrote nothing (missed gates). Raises when the export or the fixtures fail."""
    spec = deployment.manifest.export
    if spec is None:
        raise ManifestError(f"{deployment.name}: no [export] table, nothing to regenerate")
    deployment.export(force=True, python=python, after_fixtures=False)
    if spec.fixtures:
        deployment.run_step(spec.fixtures, python)
    missed = [" ".join(step) for step in spec.after_fixtures if deployment.run_step(step, python, check=False) != 0]
    for change in write_manifest_values(deployment.path / "deployment.toml", derived_manifest_values(deployment)):
        print(f"{deployment.name}: deployment.toml {change}")
    return missed


def derived_manifest_values(deployment: Deployment) -> dict[str, object]:
    """``{dotted key: value}`` of the manifest's values that follow from the exported model, from the
    checks module's ``manifest_values(deployment)``; none where it has no such function."""
    hook = getattr(deployment.checks_module, "manifest_values", None)
    return hook(deployment) if hook else {}


def write_manifest_values(path: Path, values: dict[str, object]) -> list[str]:
    """Set each dotted key of ``values`` in the TOML file ``path`` (comments and layout kept); a key
    whose table the file lacks is left out (the deployment dropped that feature). Returns
    ``"key: old -> new"`` for each value changed."""
    import tomlkit

    document = tomlkit.parse(path.read_text())
    changes = []
    for dotted, value in values.items():
        *tables, leaf = dotted.split(".")
        table = document
        for key in tables:
            table = table.get(key) if hasattr(table, "get") else None
        if table is None:
            continue
        old = table.get(leaf)
        old = old.unwrap() if hasattr(old, "unwrap") else old
        if old != value:
            table[leaf] = value
            changes.append(f"{dotted}: {old} -> {value}")
    if changes:
        path.write_text(tomlkit.dumps(document))
    return changes


def add_arguments(parser) -> None:
    parser.add_argument("deployment")


def refresh_command(args) -> int:
    deployment = get_deployment(args.deployment)
    for step in refresh(deployment):
        print(f"{deployment.name}: `{step}` wrote nothing (its gate, above)")
    print(f"{deployment.name}: refreshed; next: pytest harness/ {deployment.path} -k {deployment.name}")
    return 0
