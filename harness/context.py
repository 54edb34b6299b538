"""What a deployment's checks and workloads get: the deployment, the running server, clients."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from harness.deployments import Deployment
from harness.serving.launchers import TritonServer
from harness.tensors import make_inputs, make_outputs, result_arrays


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
        client = self.http_client() if protocol == "http" else self.grpc_client()
        try:
            result = client.infer(
                model, make_inputs(protocol, inputs), outputs=make_outputs(protocol, outputs), parameters=parameters
            )
            return result_arrays(result, outputs)
        finally:
            client.close()

    def assert_healthy(self, models: list[str] | None = None) -> None:
        """The server is live and ready and the given (default: entry) models are ready."""
        models = models if models is not None else self.deployment.entry_models
        with self.http_client() as client:
            assert client.is_server_live(), "server is not live"
            assert client.is_server_ready(), "server is not ready"
            not_ready = [m for m in models if not client.is_model_ready(m)]
            assert not not_ready, f"models not ready: {not_ready}\n{self.server.logs()[-3000:]}"
