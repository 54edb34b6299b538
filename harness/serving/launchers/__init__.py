"""Server launchers behind one interface; ``create_server`` picks one by mode."""

from __future__ import annotations

import os

from harness.serving.launchers.base import ExternalTritonServer, ServerOptions, TritonServer
from harness.serving.launchers.docker import DockerTritonServer
from harness.serving.launchers.local import LocalTritonServer

MODES = ("local", "docker", "external")


def default_mode() -> str:
    """The server mode when none is asked for: ``$TRITON_SERVER_MODE``, else ``local`` (the one place)."""
    return os.environ.get("TRITON_SERVER_MODE") or "local"


def create_server(
    mode: str | None, options: ServerOptions, url: str | None = None, grpc_url: str | None = None, **launch
) -> TritonServer:
    """A server of the given mode (default: $TRITON_SERVER_MODE, else ``local``); ``launch``: the local
    or docker launcher's own arguments (ports, host)."""
    mode = mode or default_mode()
    if mode == "local":
        return LocalTritonServer(options, **launch)
    if mode == "docker":
        return DockerTritonServer(options, **launch)
    if mode == "external":
        url = url or os.environ.get("TRITON_SERVER_URL")
        if not url:
            raise ValueError("external mode needs a server URL (--server-url or TRITON_SERVER_URL)")
        return ExternalTritonServer(options, url, grpc_url or os.environ.get("TRITON_GRPC_URL"))
    raise ValueError(f"unknown server mode {mode!r}; choose one of {MODES}")
