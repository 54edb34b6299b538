"""What a deployment's checks and workloads get: the deployment, the running server, clients."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from harness.deployments import Deployment
from harness.serving.launchers import TritonServer
from harness.tensors import make_inputs, make_outputs, result_arrays

#: gRPC status codes of a client's mistake (tritonclient reports them as ``StatusCode.X``).
CLIENT_ERROR_CODES = {
    "StatusCode.INVALID_ARGUMENT",
    "StatusCode.NOT_FOUND",
    "StatusCode.PERMISSION_DENIED",
    "StatusCode.RESOURCE_EXHAUSTED",
    "StatusCode.OUT_OF_RANGE",
}


@dataclass
class DeploymentContext:
    """A deployment served by a running server, on one target."""

    deployment: Deployment
    server: TritonServer
    target: str = "cpu"

    def http_client(self, **kwargs) -> httpclient.InferenceServerClient:
        """A new HTTP client (not thread-safe: one per thread)."""
        return httpclient.InferenceServerClient(self.server.http_url, **kwargs)

    def grpc_client(self, **kwargs) -> grpcclient.InferenceServerClient:
        """A new gRPC client."""
        if not self.server.grpc_url:
            raise RuntimeError(f"the {self.server.mode} server has no gRPC endpoint")
        return grpcclient.InferenceServerClient(self.server.grpc_url, **kwargs)

    def infer(
        self,
        model: str,
        inputs: dict[str, np.ndarray],
        outputs: list[str] | None = None,
        protocol: str = "http",
        parameters: dict | None = None,
    ) -> dict[str, np.ndarray]:
        """One inference; returns ``{output name: array}``; raises InferenceServerException."""
        with self.http_client() if protocol == "http" else self.grpc_client() as client:
            result = client.infer(
                model, make_inputs(protocol, inputs), outputs=make_outputs(protocol, outputs), parameters=parameters
            )
            return result_arrays(result, outputs)

    def fixture(self, name: str) -> Path:
        """``fixtures/<name>`` of the deployment (the reference's outputs, test images ...)."""
        path = self.deployment.fixtures_path / name
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: run {self.deployment.path / 'make_fixtures.py'}")
        return path

    def expect_error(
        self,
        model: str,
        inputs: dict[str, np.ndarray],
        *fragments: str,
        parameters: dict | None = None,
        protocol: str = "http",
        within_s: float | None = None,
        outputs: list[str] | None = None,
    ) -> str:
        """Send bad input; it must be refused with a client error (HTTP 4xx / gRPC INVALID_ARGUMENT
        and kin) whose message names one of ``fragments`` and is no internal error. Returns it."""
        began = time.monotonic()
        try:
            self.infer(model, inputs, outputs, parameters=parameters, protocol=protocol)
        except InferenceServerException as exc:
            message, status = str(exc), str(exc.status())
            assert any(f.lower() in message.lower() for f in fragments), (
                f"{model}: error {message!r} names none of {fragments}"
            )
            assert "internal error" not in message, f"{model}: bad input reached an internal error: {message}"
            client_error = status.startswith("4") or status in CLIENT_ERROR_CODES
            assert client_error, f"{model}: bad input answered {status}, not a client error: {message}"
            if within_s is not None:
                took = time.monotonic() - began
                assert took < within_s, f"{model}: the refusal took {took:.1f} s (over {within_s} s)"
            return message
        raise AssertionError(f"{model}: bad input was accepted: {sorted(inputs)} {parameters or ''}")

    def assert_healthy(self, models: list[str] | None = None) -> None:
        """The server is live and ready and the given (default: entry) models are ready."""
        models = models if models is not None else self.deployment.entry_models
        with self.http_client() as client:
            assert client.is_server_live(), "server is not live"
            assert client.is_server_ready(), "server is not ready"
            not_ready = [m for m in models if not client.is_model_ready(m)]
            assert not not_ready, f"models not ready: {not_ready}\n{self.server.logs()[-3000:]}"
