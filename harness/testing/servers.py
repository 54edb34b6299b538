"""Local tritonservers of a deployment's subset: its named models and the models they call (or all of
them), with config overrides, on a derived repository of links (removed by ``stop_server``), or the
toy ``echo`` model alone (the cheapest model there is: the worst case for any per-request overhead)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from harness.manifest import ConfigOverrides
from harness.repository import dependencies
from harness.testing.toy_models import echo_repository


def deployment_server(
    deployment,
    models: list[str] | None = None,
    *,
    overrides: dict[str, ConfigOverrides] | None = None,
    model_control_mode: str = "none",
    gate: bool = True,
):
    """A LocalTritonServer (not started, target cpu) of ``deployment`` (a name or a Deployment): ``models`` and
    their dependencies (all models when None) with ``overrides`` (``harness.variants``) applied."""
    from harness.deployments import get_deployment
    from harness.serving.launchers import LocalTritonServer
    from harness.variants import variant_repository

    dep = get_deployment(deployment) if isinstance(deployment, str) else deployment
    dep.export()
    served = dependencies(dep.model_repository, models) if models else ()
    repo = variant_repository(dep.model_repository, overrides or {}, models=served)
    options = dep.server_options("cpu", model_repository=str(repo), model_control_mode=model_control_mode)
    if models:  # explicit mode loads only what is named: all of them
        options.required_models = sorted(p.name for p in repo.iterdir())
    server = LocalTritonServer(options, gate=gate)
    server.cleanup_dirs = [repo.parent]  # type: ignore[attr-defined]
    return server


def model_server(deployment: str, model: str, *, model_control_mode: str = "none", gate: bool = True):
    """``deployment_server`` for ``model``; ``echo``: a repository of the toy echo model alone."""
    if model != "echo":
        return deployment_server(deployment, [model], model_control_mode=model_control_mode, gate=gate)
    root = Path(tempfile.mkdtemp(prefix="triton-echo-"))
    server = repository_server(echo_repository(root), ["echo"], model_control_mode=model_control_mode, gate=gate)
    server.cleanup_dirs = [root]  # type: ignore[attr-defined]
    return server


def repository_server(repository, required_models=(), *, model_control_mode: str = "none", gate: bool = True):
    """A LocalTritonServer (not started) of a model repository as it is (kept when it stops)."""
    from harness.serving.launchers import LocalTritonServer, ServerOptions

    options = ServerOptions(
        str(Path(repository).resolve()), required_models=list(required_models), model_control_mode=model_control_mode
    )
    return LocalTritonServer(options, gate=gate)


def restarted(server):
    """A new LocalTritonServer (not started) of ``server``'s options on its ports; it serves (and
    removes) the same repository."""
    from harness.serving.launchers import LocalTritonServer

    ports = (server.http_port, server.grpc_port, server.metrics_port)
    new = LocalTritonServer(server.options, ports=ports, gate=server.gate, exit_timeout_s=server.exit_timeout_s)
    new.cleanup_dirs = getattr(server, "cleanup_dirs", [])  # type: ignore[attr-defined]
    return new


def started(server, timeout_s: float | None = None):
    """``server`` started and ready; stopped (and its repository removed) when it is not."""
    server.start()
    try:
        server.wait_ready(timeout_s)
    except BaseException:
        stop_server(server)
        raise
    return server


def stop_server(server) -> None:
    server.stop()
    for path in getattr(server, "cleanup_dirs", []):
        shutil.rmtree(path, ignore_errors=True)
