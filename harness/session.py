"""Serving deployments: export what is missing, start a server per deployment, hand out contexts."""

from __future__ import annotations

import os
import time

from harness.context import DeploymentContext
from harness.deployments import Deployment
from harness.launchers import create_server


class ServerPool:
    """One server per deployment, started lazily on first use and stopped by ``close``."""

    def __init__(self, mode: str | None = None, target: str = "cpu", url: str | None = None,
                 grpc_url: str | None = None):
        self.mode = mode
        self.target = target
        self.url = url
        self.grpc_url = grpc_url
        self._contexts: dict[str, DeploymentContext] = {}
        self.start_times: dict[str, float] = {}

    def context(self, deployment: Deployment) -> DeploymentContext:
        """The deployment served on a ready server (export and start on first call)."""
        if deployment.name not in self._contexts:
            if (self.mode or os.environ.get("TRITON_SERVER_MODE", "local")) in ("local", "docker"):
                deployment.export()
            server = create_server(self.mode, deployment.server_options(self.target), url=self.url,
                                   grpc_url=self.grpc_url)
            began = time.monotonic()
            server.start()
            try:
                server.wait_ready()
            except BaseException:
                server.stop()
                raise
            self.start_times[deployment.name] = time.monotonic() - began
            self._contexts[deployment.name] = DeploymentContext(deployment, server, self.target)
        return self._contexts[deployment.name]

    def release(self, name: str) -> None:
        """Stop the server of one deployment."""
        context = self._contexts.pop(name, None)
        if context is not None:
            context.server.stop()

    def close(self) -> None:
        """Stop every server this pool started."""
        for name in list(self._contexts):
            self.release(name)
