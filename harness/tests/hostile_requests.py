"""Requests that abort tritonserver 2.51 (std::bad_alloc, stack overflow): the gate tests send them, and
the hostile-input tool of the lab (``triton_gate.tests.hostile_cases``) builds its deep-JSON cases from them."""

from __future__ import annotations

HUGE_SHAPE = b'{"inputs":[{"name":"X","shape":[1,131072,131072],"datatype":"FP32","data":[1]}]}'


def nested(depth: int) -> bytes:
    """``depth`` nested JSON arrays: Triton 2.51's recursive parser overflows its stack on 50,000."""
    return b"[" * depth + b"]" * depth


def with_deep_parameters(inputs: bytes) -> bytes:
    """A request of ``inputs`` (a JSON list) whose ``parameters`` nest 300,000 deep."""
    return b'{"parameters":{"p":' + nested(300000) + b'},"inputs":' + inputs + b"}"


DEEP_DATA = b'{"inputs":[{"name":"X","shape":[1,1],"datatype":"FP32","data":' + nested(50000) + b"}]}"
DEEP_PARAMETERS = with_deep_parameters(b'[{"name":"X","shape":[1,1,1],"datatype":"FP32","data":[1]}]')
