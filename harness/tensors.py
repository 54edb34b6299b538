"""numpy <-> tritonclient InferInput conversion shared by checks, clients and the load generator."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import np_to_triton_dtype

PROTOCOLS = {"http": httpclient, "grpc": grpcclient}


def client_module(protocol: str) -> ModuleType:
    """``tritonclient.http`` or ``tritonclient.grpc``."""
    try:
        return PROTOCOLS[protocol]
    except KeyError:
        raise ValueError(f"protocol must be one of {sorted(PROTOCOLS)}, got {protocol!r}") from None


def as_triton_array(value) -> np.ndarray:
    """numpy array as Triton expects it: ``str``/``bytes`` become an object (BYTES) array."""
    array = np.asarray(value)
    if array.dtype.kind in ("U", "S"):
        array = np.vectorize(lambda v: v.encode() if isinstance(v, str) else bytes(v), otypes=[object])(array)
    return array


def make_inputs(protocol: str, tensors: dict[str, np.ndarray]) -> list:
    """InferInput objects (binary data: tritonclient.http's default) for ``{name: array}``."""
    module = client_module(protocol)
    inputs = []
    for name, value in tensors.items():
        array = as_triton_array(value)
        infer_input = module.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        infer_input.set_data_from_numpy(array)
        inputs.append(infer_input)
    return inputs


def make_outputs(protocol: str, names: list[str] | None) -> list | None:
    """InferRequestedOutput objects (binary data: tritonclient.http's default), or None for all outputs."""
    if not names:
        return None
    return [client_module(protocol).InferRequestedOutput(n) for n in names]


def result_arrays(result, names: list[str] | None = None) -> dict[str, np.ndarray]:
    """All (or the named) outputs of an InferResult as numpy arrays."""
    response = result.get_response()
    if isinstance(response, dict):
        available = [o["name"] for o in response.get("outputs", [])]
    else:
        available = [o.name for o in response.outputs]
    return {n: result.as_numpy(n) for n in (names or available)}


def request_bytes(protocol: str, model: str, inputs: list, outputs: list | None, parameters: dict | None = None) -> int:
    """Size of the request body on the wire (HTTP body with binary tensors / gRPC message)."""
    if protocol == "http":
        body, _ = httpclient.InferenceServerClient.generate_request_body(inputs, outputs=outputs, parameters=parameters)
        return len(body)
    from tritonclient.grpc._utils import _get_inference_request

    message = _get_inference_request(
        model_name=model,
        inputs=inputs,
        model_version="",
        request_id="",
        outputs=outputs,
        sequence_id=0,
        sequence_start=False,
        sequence_end=False,
        priority=0,
        timeout=None,
        parameters=parameters,
    )
    return message.ByteSize()


def response_bytes(result) -> int:
    """Size of the response on the wire (JSON header + binary tensors / gRPC message)."""
    response = result.get_response()
    if isinstance(response, dict):
        import json

        header = len(json.dumps(response))
        binary = sum(o.get("parameters", {}).get("binary_data_size", 0) for o in response.get("outputs", []))
        return header + binary
    return response.ByteSize()
