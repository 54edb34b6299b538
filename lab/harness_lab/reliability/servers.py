"""What the reliability runs load by default: the deployment's ``[reliability]`` table (its entry
model and its checked workload); the servers themselves are in ``harness.testing.servers``."""

from __future__ import annotations

from harness_lab.reliability.load import CheckedWorkload, echo_workload


def add_target_arguments(parser) -> None:
    """``--deployment``, ``--model`` and ``--workload`` of a reliability command (``defaults``)."""
    parser.add_argument("--deployment", default=None, help="default: the one with a [reliability] table")
    parser.add_argument("--model", default=None, help="default: its [reliability] model; echo: the toy echo model")
    parser.add_argument("--workload", default=None, help="file.py:function (default: its [reliability] workload)")


def chosen_target(parser, args) -> tuple[str, str]:
    """(deployment, model) of ``args`` as ``defaults`` completes them; a manifest without them: a usage error."""
    from harness.deployments import ManifestError

    try:
        return defaults(args.deployment, args.model)
    except ManifestError as exc:
        parser.error(str(exc))


def defaults(deployment: str | None, model: str | None) -> tuple[str, str]:
    """(deployment, model) of a run: as given, else the one deployment with a ``[reliability]``
    table and its ``model``; ``echo`` needs no deployment."""
    from harness.deployments import ManifestError, declaring, get_deployment

    if model == "echo":
        return deployment or "", model
    dep = get_deployment(deployment) if deployment else declaring("reliability")
    if model is None:
        if dep.manifest.reliability is None:
            raise ManifestError(f"{dep.name} has no [reliability] table in its deployment.toml: pass --model")
        model = dep.manifest.reliability.model
    return dep.name, model


def checked_workload(deployment: str, model: str, http_url: str, reference: str | None = None) -> CheckedWorkload:
    """The checked workload of ``model`` served at ``http_url``: ``echo`` answers its own text; any other
    model gets ``reference`` (``"file.py:function"`` of the deployment folder) or else the deployment's
    ``[reliability] workload``, called as ``function(http_url, model)``."""
    if model == "echo":
        return echo_workload()
    from harness.deployments import ManifestError, get_deployment

    dep = get_deployment(deployment)
    reference = reference or (dep.manifest.reliability.workload if dep.manifest.reliability else None)
    if reference is None:
        raise ManifestError(f"{dep.name} has no [reliability] workload in its deployment.toml: pass --workload")
    return dep.resolve(reference)(http_url, model)
