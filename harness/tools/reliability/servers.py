"""The servers the reliability runs load: a deployment's models, and the models they call, on a
local tritonserver of their own (a derived repository of links, removed when it stops), or the
toy ``echo`` model (the cheapest model there is: the worst case for any per-request overhead);
and what they load by default: the deployment's ``[reliability]`` table (its entry model and its
checked workload)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from harness.repository import dependencies, derive
from harness.testing.toy_models import echo_repository
from harness.tools.reliability.load import CheckedWorkload, echo_workload


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


def deployment_server(
    deployment: str, models: list[str], *, model_control_mode: str = "none", target: str = "cpu", gate: bool = True
):
    """A LocalTritonServer on a subset of a deployment's repository (the models + dependencies)."""
    from harness.deployments import get_deployment
    from harness.serving.launchers import LocalTritonServer

    dep = get_deployment(deployment)
    dep.export()
    repo = derive(dep.model_repository, models=dependencies(dep.model_repository, models), prefix="triton-subset-")
    every = sorted(p.name for p in repo.iterdir())  # explicit mode loads only what is named: all of them
    options = dep.server_options(
        target, model_repository=str(repo), required_models=every, model_control_mode=model_control_mode
    )
    server = LocalTritonServer(options, gate=gate)
    server.cleanup_dirs = [repo.parent]  # type: ignore[attr-defined]
    return server


def model_server(deployment: str, model: str, *, model_control_mode: str = "none", gate: bool = True):
    """``deployment_server`` for ``model``; ``echo``: a repository of the toy echo model alone."""
    if model != "echo":
        return deployment_server(deployment, [model], model_control_mode=model_control_mode, gate=gate)
    from harness.serving.launchers import LocalTritonServer, ServerOptions

    root = Path(tempfile.mkdtemp(prefix="triton-echo-"))
    options = ServerOptions(str(echo_repository(root)), required_models=["echo"], model_control_mode=model_control_mode)
    server = LocalTritonServer(options, gate=gate)
    server.cleanup_dirs = [root]  # type: ignore[attr-defined]
    return server


def stop_server(server) -> None:
    server.stop()
    for path in getattr(server, "cleanup_dirs", []):
        shutil.rmtree(path, ignore_errors=True)
