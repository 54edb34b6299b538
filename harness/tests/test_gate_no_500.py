"""A client's bad input answers a 4xx with a message that says what was wrong, never a 500.

Each request below answered HTTP 500 through the gate before (Triton's own parse errors passed
through, aiohttp's "Server got itself in trouble", a key read two ways), or crashes a Triton
without the gate. Through the gate each one gets a 4xx with a JSON error message, and the server
still answers a good request afterwards. The onnxruntime backend's and the deployments' models'
own bad-input answers are tested beside them (test_onnxruntime_backend.py, each checks.py).
"""

from __future__ import annotations

import gzip
import http.client
import json

import pytest
import requests

from harness.serving.launchers import LocalTritonServer, ServerOptions
from harness.tests.gate_cases import GATE_POLICY, HUGE_SHAPE, assert_alive, make_gate_repository

X = {"name": "X", "shape": [1, 1, 1], "datatype": "FP32", "data": [1]}


def request(**top) -> bytes:
    return json.dumps({"inputs": [X], **top}).encode()


def with_input(**fields) -> bytes:
    return json.dumps({"inputs": [{**X, **fields}]}).encode()


#: (name, body, extra headers, path suffix): every one a client's mistake.
CLIENT_ERRORS = [
    ("request parameter timeout -1", request(parameters={"timeout": -1}), {}, "infer"),
    ("request parameter priority a string", request(parameters={"priority": "high"}), {}, "infer"),
    ("request parameter sequence_id a float", request(parameters={"sequence_id": 1.5}), {}, "infer"),
    ("request parameter sequence_start a string", request(parameters={"sequence_start": "yes"}), {}, "infer"),
    ("request parameter binary_data_output 1", request(parameters={"binary_data_output": 1}), {}, "infer"),
    ("request id a number", request(id=5), {}, "infer"),
    ("output without a name", request(outputs=[{}]), {}, "infer"),
    ("output binary_data a string", request(outputs=[{"name": "N", "parameters": {"binary_data": "y"}}]), {}, "infer"),
    ("output classification -1", request(outputs=[{"name": "N", "parameters": {"classification": -1}}]), {}, "infer"),
    ("FP32 data holding strings", with_input(data=["a"]), {}, "infer"),
    ("FP32 data holding true", with_input(data=[True]), {}, "infer"),
    ("FP32 data holding null", with_input(data=[None]), {}, "infer"),
    ("NaN in the JSON", b'{"inputs":[{"name":"X","shape":[1,1,1],"datatype":"FP32","data":[NaN]}]}', {}, "infer"),
    (
        "a key twice (datatype)",
        b'{"inputs":[{"name":"X","datatype":"INT32","datatype":"FP32","shape":[1,1,1],"data":[1]}]}',
        {},
        "infer",
    ),
    (
        "a key twice (shape, huge first)",
        b'{"inputs":[{"name":"X","shape":[1,131072,131072],"shape":[1,1,1],"datatype":"FP32","data":[1]}]}',
        {},
        "infer",
    ),
    ("not UTF-8", b'{"inputs":[{"name":"X\xff","shape":[1,1,1],"datatype":"FP32","data":[1]}]}', {}, "infer"),
    (
        "a lone surrogate escape",
        b'{"id":"\\ud800","inputs":[{"name":"X","shape":[1,1,1],"datatype":"FP32","data":[1]}]}',
        {},
        "infer",
    ),
    ("Content-Encoding br", b"not brotli", {"Content-Encoding": "br"}, "infer"),
    ("gzip that does not inflate", b"not gzip at all", {"Content-Encoding": "gzip"}, "infer"),
    ("header length not a number", request(), {"Inference-Header-Content-Length": "12abc"}, "infer"),
    ("huge shape behind an escaped path", HUGE_SHAPE, {}, "inf%65r"),
    ("a key twice in a generate call", b'{"text":"a","text":"b"}', {}, "generate"),
]


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    repo = make_gate_repository(tmp_path_factory.mktemp("no500"))
    options = ServerOptions(str(repo), required_models=["sink", "echo"], allow_grpc=False, gate_policy=GATE_POLICY)
    with LocalTritonServer(options) as server:
        yield server


@pytest.mark.server
@pytest.mark.parametrize("name,body,headers,suffix", CLIENT_ERRORS, ids=[c[0] for c in CLIENT_ERRORS])
def test_a_client_error_is_a_4xx_with_a_message(gated, name, body, headers, suffix):
    path = f"/v2/models/sink/{suffix}"
    response = requests.post(f"http://{gated.http_url}{path}", data=body, headers=headers, timeout=30)
    assert 400 <= response.status_code < 500, f"{name}: {response.status_code} {response.text[:300]}"
    assert response.json().get("error"), f"{name}: no message in {response.text[:300]}"
    assert_alive(gated)


@pytest.mark.server
def test_a_repeated_framing_header_is_a_400(gated):
    host, port = gated.http_url.rsplit(":", 1)
    body = request()
    for name, values in [
        ("Inference-Header-Content-Length", [str(len(body)), str(len(body) - 1)]),
        ("Content-Encoding", ["identity", "gzip"]),
    ]:
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        connection.putrequest("POST", "/v2/models/sink/infer")
        connection.putheader("Content-Length", str(len(body)))
        for value in values:
            connection.putheader(name, value)
        connection.endheaders(body)
        response = connection.getresponse()
        text = response.read()
        connection.close()
        assert response.status == 400 and b"more than once" in text, (name, response.status, text)
    assert_alive(gated)


@pytest.mark.server
def test_gzip_requests_still_work(gated):
    response = requests.post(
        f"http://{gated.http_url}/v2/models/sink/infer",
        data=gzip.compress(request()),
        headers={"Content-Encoding": "gzip"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    assert response.json()["outputs"][0]["data"] == [1]
