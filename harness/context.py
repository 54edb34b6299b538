"""What a deployment's checks and workloads get: the deployment, the running server, clients; and
the checks run against it outside pytest (``run_checks``: tune's gate)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pytest
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


@dataclass
class CheckOutcome:
    """The deployment's checks on one server: those that passed, those that do not apply (they
    skipped themselves; tune adds those that fail on the shipped config too), each failure's reason."""

    passed: list[str] = field(default_factory=list)
    not_applicable: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        counts = {"passed": self.passed, "failed": self.failed, "n/a": self.not_applicable}
        return ", ".join(f"{len(found)} {label}" for label, found in counts.items() if found or label == "passed")

    def reason(self) -> str:
        name, why = next(iter(self.failed.items()))
        return f"check {name} failed: {' '.join(why.split())[:300]}"


def run_checks(ctx: DeploymentContext, names: list[str] | None = None) -> CheckOutcome:
    """The deployment's checks (``names``: only those) against ``ctx``; one that skips itself is not applicable."""
    outcome = CheckOutcome()
    for name, check in ctx.deployment.checks().items():
        if names is not None and name not in names:
            continue
        try:
            check(ctx)
        except pytest.skip.Exception:
            outcome.not_applicable.append(name)
        except Exception as exc:  # noqa: BLE001 - a failing check is the outcome recorded
            outcome.failed[name] = f"{type(exc).__name__}: {exc}"
        else:
            outcome.passed.append(name)
    return outcome
