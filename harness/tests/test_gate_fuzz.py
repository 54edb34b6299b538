"""Property tests of the gate's request checks (``make fuzz`` material): any body gives either
acceptance or a ``GateError`` with a 4xx, never another exception; a request is accepted
exactly when its declared shape, datatype and data agree with each other and the config."""

from __future__ import annotations

import json
import math
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.repository import config_from_json
from triton_gate.validate import GateError, validate_infer

CONFIG = config_from_json(
    {
        "name": "m",
        "max_batch_size": 4,
        "input": [
            {"name": "X", "data_type": "TYPE_FP32", "dims": [-1, 3]},
            {"name": "T", "data_type": "TYPE_STRING", "dims": [1], "optional": True},
        ],
    }
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=40,
)


def _refuses_cleanly(body: bytes, header_length=None) -> None:
    try:
        validate_infer("m", CONFIG, body, header_length)
    except GateError as exc:
        assert 400 <= exc.status < 500 and exc.message


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()), st.none() | st.integers(-5, 300))
def test_arbitrary_bodies_are_accepted_or_refused_with_a_4xx(body, header_length):
    _refuses_cleanly(body, header_length)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(json_values, max_size=3),
    st.dictionaries(st.sampled_from(["name", "shape", "datatype", "data", "parameters"]), json_values),
)
def test_malformed_inputs_are_refused_with_a_4xx(extra, item):
    _refuses_cleanly(json.dumps({"inputs": [item] + extra}).encode())


def _nest(values, shape):
    if len(shape) <= 1:
        return values
    step = len(values) // shape[0] if shape[0] else 0
    return [_nest(values[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


@settings(max_examples=300, deadline=None)
@given(
    batch=st.integers(0, 6),
    rows=st.integers(0, 5),
    cols=st.sampled_from([3, 2, 4]),
    extra=st.integers(-2, 2),
    nested=st.booleans(),
    binary=st.booleans(),
    huge=st.sampled_from([None, 2**31 - 1, 131072 * 131072]),
)
def test_accepted_exactly_when_shape_and_data_agree(batch, rows, cols, extra, nested, binary, huge):
    shape = [batch, huge if huge else rows, cols]
    declared = math.prod(shape)
    actual = max(0, batch * rows * cols + extra)
    values = [1.0] * actual
    if binary:
        item = {"name": "X", "shape": shape, "datatype": "FP32", "parameters": {"binary_data_size": 4 * actual}}
        header = json.dumps({"inputs": [item]}).encode()
        body, length = header + struct.pack(f"<{actual}f", *values), len(header)
    else:
        data = _nest(values, shape) if nested and extra == 0 and not huge else values
        body, length = (
            json.dumps({"inputs": [{"name": "X", "shape": shape, "datatype": "FP32", "data": data}]}).encode(),
            None,
        )
    consistent = 1 <= batch <= 4 and cols == 3 and declared == actual
    if consistent:
        validate_infer("m", CONFIG, body, length)
    else:
        with pytest.raises(GateError) as info:
            validate_infer("m", CONFIG, body, length)
        assert info.value.status == 400


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=20), min_size=1, max_size=4), st.integers(-1, 1), st.integers(0, 3))
def test_bytes_binary_sections_must_hold_exactly_the_declared_elements(items, count_delta, trailing):
    blob = b"".join(struct.pack("<I", len(i)) + i for i in items) + b"\0" * trailing
    declared = len(items) + count_delta
    header = json.dumps(
        {
            "inputs": [
                {"name": "X", "shape": [1, 0, 3], "datatype": "FP32", "parameters": {"binary_data_size": 0}},
                {
                    "name": "T",
                    "shape": [max(declared, 0), 1],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(blob)},
                },
            ]
        }
    ).encode()
    ok = declared == len(items) and trailing == 0 and 1 <= declared <= 4
    if ok:
        validate_infer("m", CONFIG, header + blob, len(header))
    else:
        with pytest.raises(GateError):
            validate_infer("m", CONFIG, header + blob, len(header))
