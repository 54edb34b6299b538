"""The gate's request validation (triton_gate.validate) without a server: clear 400s for the
requests that abort tritonserver 2.51, binary sections checked against the declared shape, body
limits from the config, and the crashers refused for every model of every deployment."""

from __future__ import annotations

import json
import struct

import pytest

from harness.repository import config_from_json, read_config
from harness.tests.gate_cases import DEEP_DATA, DEEP_PARAMETERS, HUGE_SHAPE, nested
from triton_gate.validate import GateError, body_limit, triton_datatype, validate_infer

SINK = config_from_json(
    {"name": "sink", "max_batch_size": 8, "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [-1, -1]}]}
)
TEXT = config_from_json(
    {"name": "t", "max_batch_size": 4, "input": [{"name": "TEXT", "data_type": "TYPE_STRING", "dims": [1]}]}
)


@pytest.mark.parametrize(
    "body,message",
    [
        (HUGE_SHAPE, "declares 17179869184 values of FP32, 'data' holds 1"),
        (DEEP_DATA, "nested too deeply"),
        (DEEP_PARAMETERS, "nested too deeply"),
        (b'{"inputs":[{"name":"X","shape":[1,2147483647],"datatype":"FP32","data":[1]}]}', "rank 2"),
        (b'{"inputs":[{"name":"X","shape":[9,1,1],"datatype":"FP32","data":[1]}]}', "has batch size 9, outside 1..8"),
        (b'{"inputs":[{"name":"X","shape":[1,1,2],"datatype":"FP32","data":[[[1,[2]]]]}]}', "nested deeper"),
        (b'{"inputs":[{"name":"X","shape":[1,1,1],"datatype":"INT64","data":[1]}]}', "expects FP32"),
        (b'{"inputs":[{"name":"Y","shape":[1,1,1],"datatype":"FP32","data":[1]}]}', "unexpected inference input"),
        (
            b'{"parameters":{"p":[1]},"inputs":[{"name":"X","shape":[1,1,1],"datatype":"FP32","data":[1]}]}',
            "must be a string, number or boolean",
        ),
        (b'{"inputs":[{"name":"X","shape":[1,1,1],"datatype":"FP32"}]}', "has no 'data'"),
        (b'{"inputs":[{"name":"X","shape":[1,1,-1],"datatype":"FP32","data":[1]}]}', "negative"),
    ],
)
def test_validation_refuses_with_a_clear_message(body, message):
    with pytest.raises(GateError, match=None) as info:
        validate_infer("sink", SINK, body, None)
    assert info.value.status == 400 and message in info.value.message, info.value.message


def test_validation_checks_binary_sections_against_the_declared_shape():
    def request(shape, nbytes, binary, datatype="FP32", name="X"):
        header = json.dumps(
            {
                "inputs": [
                    {"name": name, "shape": shape, "datatype": datatype, "parameters": {"binary_data_size": nbytes}}
                ]
            }
        ).encode()
        return header + binary, len(header)

    validate_infer("sink", SINK, *request([1, 2, 2], 16, bytes(16)))
    for shape, nbytes, binary, message in [
        ([1, 65536, 65536], 4, bytes(4), "is 17179869184 bytes"),
        ([1, 2, 2], 16, bytes(8), "runs past"),
        ([1, 2, 2], 16, bytes(20), "4 bytes of binary data"),
    ]:
        with pytest.raises(GateError, match=message):
            validate_infer("sink", SINK, *request(shape, nbytes, binary))
    element = struct.pack("<I", 3) + b"abc"
    validate_infer("t", TEXT, *request([2, 1], 14, element * 2, "BYTES", "TEXT"))
    with pytest.raises(GateError, match="declares 4 BYTES elements"):
        validate_infer("t", TEXT, *request([4, 1], 7, element, "BYTES", "TEXT"))
    with pytest.raises(GateError, match="past the end"):
        validate_infer("t", TEXT, *request([1, 1], 7, struct.pack("<I", 1 << 30) + b"abc", "BYTES", "TEXT"))


def test_body_limit_comes_from_the_config():
    assert body_limit(SINK, explicit=1000) == 1000
    fixed = config_from_json(
        {"max_batch_size": 2, "input": [{"name": "I", "data_type": "TYPE_FP32", "dims": [3, 8, 8]}]}
    )
    assert body_limit(fixed) == 2 * 3 * 8 * 8 * 32 + 64 * 1024
    assert body_limit(TEXT, default=123) == 123


# -- every model of every deployment -----------------------------------------------------------
def _deployment_configs():
    from harness.deployments import discover

    for deployment in discover():
        for path in sorted(deployment.model_repository.glob("*/config.pbtxt")):
            yield pytest.param(path.parent.name, read_config(path), id=f"{deployment.name}/{path.parent.name}")


@pytest.mark.parametrize("model,config", list(_deployment_configs()))
def test_crashers_are_refused_for_every_model_of_every_deployment(model, config):
    """For each input: a huge declared shape with one value, and 50,000 nested brackets."""
    max_batch = config.max_batch_size
    for spec in config.input:
        dims = list(spec.dims)
        shape = ([1] if max_batch > 0 else []) + [131072 if d < 0 else d for d in dims]
        if all(d >= 0 for d in dims):  # fixed dims: a declared batch far over max_batch_size
            shape = [max(max_batch, 1) * 131072] + shape[1:] if max_batch > 0 else [131072] + shape
        datatype = triton_datatype(spec.data_type)
        item = {"name": spec.name, "shape": shape, "datatype": datatype, "data": ["a" if datatype == "BYTES" else 1]}
        for body in (
            json.dumps({"inputs": [item]}).encode(),
            json.dumps({"inputs": [{**item, "data": "@"}]}).encode().replace(b'"@"', nested(50000)),
        ):
            with pytest.raises(GateError) as info:
                validate_infer(model, config, body, None)
            assert info.value.status == 400, info.value.message


def test_policy_max_dims_bound_a_variable_input():
    detector = config_from_json(
        {"max_batch_size": 8, "input": [{"name": "images", "data_type": "TYPE_FP32", "dims": [3, -1, -1]}]}
    )
    bounds = {"images": [3, 1280, 1280]}
    ok = {"inputs": [{"name": "images", "shape": [1, 3, 2, 2], "datatype": "FP32", "data": [0.0] * 12}]}
    validate_infer("detector", detector, json.dumps(ok).encode(), None, bounds)
    big = {
        "inputs": [
            {
                "name": "images",
                "shape": [1, 3, 2048, 2048],
                "datatype": "FP32",
                "parameters": {"binary_data_size": 4 * 3 * 2048 * 2048},
            }
        ]
    }
    header = json.dumps(big).encode()
    with pytest.raises(GateError, match=r"over the bound \[3, 1280, 1280\] of model 'detector'"):
        validate_infer("detector", detector, header + bytes(4 * 3 * 2048 * 2048), len(header), bounds)
