"""A tritonserver someone else started: the harness only connects to it."""

from __future__ import annotations

from harness.serving.launchers.base import ServerOptions, TritonServer


def _strip_scheme(url: str) -> str:
    return url.split("://", 1)[-1].rstrip("/")


class ExternalTritonServer(TritonServer):
    """An already running server at ``http_url`` (and optionally ``grpc_url``)."""

    mode = "external"

    def __init__(
        self, options: ServerOptions, http_url: str, grpc_url: str | None = None, metrics_url: str | None = None
    ):
        super().__init__(options)
        self._http_url = _strip_scheme(http_url)
        self._grpc_url = _strip_scheme(grpc_url) if grpc_url else None
        self._metrics_url = _strip_scheme(metrics_url) if metrics_url else None

    @property
    def http_url(self) -> str:
        return self._http_url

    @property
    def grpc_url(self) -> str | None:
        return self._grpc_url

    @property
    def metrics_url(self) -> str | None:
        return self._metrics_url

    def start(self) -> None:
        """Nothing to start: the server is already there."""

    def stop(self) -> None:
        """Nothing to stop: the server is not ours."""
