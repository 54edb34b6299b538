"""Local tritonservers of a deployment's subset: its named models and the models they call, on a
derived repository of links (removed when the server stops), or the toy ``echo`` model alone (the
cheapest model there is: the worst case for any per-request overhead)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from harness.repository import dependencies, derive
from harness.testing.toy_models import echo_repository


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
