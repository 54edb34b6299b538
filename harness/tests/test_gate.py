"""The front gate (triton_gate): the crashing requests get a 4xx and the server stays up,
honest readiness with automatic reload of a model whose stub died, the admin token hidden from
other local users (checked as ``nobody``), internal models, metrics, SIGTERM drain.

Every end-to-end case runs against a throwaway server on a tiny repository, never a
deployment's shared session server (some of these requests kill an unprotected Triton).
"""

from __future__ import annotations

import json
import os
import re
import time

import grpc
import numpy as np
import psutil
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc

from harness.serving.launchers import LocalTritonServer, ServerOptions
from harness.testing.processes import stub_processes
from harness.tests.gate_cases import (
    DEEP_DATA,
    DEEP_PARAMETERS,
    GATE_POLICY,
    HUGE_SHAPE,
    as_nobody,
    assert_alive,
    kill_and_time_readiness,
    make_gate_repository,
    nested,
    post,
)


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    repo = make_gate_repository(tmp_path_factory.mktemp("gate"))
    with LocalTritonServer(
        ServerOptions(str(repo), required_models=["sink", "echo", "internal_echo"], gate_policy=GATE_POLICY)
    ) as server:
        yield server


# -- through the gate --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "body",
    [
        HUGE_SHAPE,
        DEEP_DATA,
        DEEP_PARAMETERS,
        b'{"inputs":[{"name":"X","shape":[1,1,2147483647],"datatype":"FP32","data":[1]}]}',
    ],
    ids=["huge_shape", "deep_data", "deep_parameters", "int32_max_dim"],
)
def test_crashing_requests_get_a_4xx_and_the_server_stays_up(gated, body):
    began = time.monotonic()
    response = post(gated, body)
    assert response.status_code == 400, response.text
    assert "error" in response.json()
    assert time.monotonic() - began < 1.0
    assert_alive(gated)


def test_binary_requests_pass_and_inconsistent_ones_are_refused(gated):
    with httpclient.InferenceServerClient(gated.http_url) as client:
        x = httpclient.InferInput("X", [2, 3, 4], "FP32")
        x.set_data_from_numpy(np.ones((2, 3, 4), np.float32), binary_data=True)
        assert client.infer("sink", [x]).as_numpy("N")[0, 0] == 24
        text = httpclient.InferInput("TEXT", [1, 1], "BYTES")
        text.set_data_from_numpy(np.array([[b"hello"]], dtype=object), binary_data=True)
        assert client.infer("echo", [text]).as_numpy("TEXT_OUT")[0, 0] == b"hello"
    header = json.dumps(
        {
            "inputs": [
                {"name": "X", "shape": [1, 65536, 65536], "datatype": "FP32", "parameters": {"binary_data_size": 4}}
            ]
        }
    ).encode()
    response = post(gated, header + bytes(4), headers={"Inference-Header-Content-Length": str(len(header))})
    assert response.status_code == 400 and "binary_data_size is 4" in response.json()["error"]
    assert_alive(gated)


def test_compressed_requests_are_validated_as_triton_reads_them(gated):
    import gzip

    with httpclient.InferenceServerClient(gated.http_url) as client:
        x = httpclient.InferInput("X", [1, 2, 2], "FP32")
        x.set_data_from_numpy(np.ones((1, 2, 2), np.float32))
        result = client.infer("sink", [x], request_compression_algorithm="gzip")
        assert result.as_numpy("N")[0, 0] == 4
    response = post(gated, gzip.compress(HUGE_SHAPE), headers={"Content-Encoding": "gzip"})
    assert response.status_code == 400 and "'data' holds 1" in response.json()["error"]
    bomb = gzip.compress(b" " * (64 << 20))  # 64 KiB that inflate over the model's 1 MiB limit
    response = post(gated, bomb, headers={"Content-Encoding": "gzip"})
    assert response.status_code == 413, response.text
    assert_alive(gated)


def test_a_reply_is_compressed_only_when_the_client_asks(gated):
    """Triton gzips an inference reply whenever the request has Accept-Encoding: the gate must
    forward the client's own header, never add one (a client that asked for nothing got gzip)."""
    import gzip
    import http.client

    body = json.dumps({"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["hello"]}]})
    host, port = gated.http_url.rsplit(":", 1)
    for accept in (None, "gzip"):
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        connection.putrequest("POST", "/v2/models/echo/infer", skip_accept_encoding=True)
        connection.putheader("Content-Length", str(len(body)))
        if accept:
            connection.putheader("Accept-Encoding", accept)
        connection.endheaders(body.encode())
        response = connection.getresponse()
        raw = response.read()
        connection.close()
        assert response.status == 200, raw
        assert response.getheader("Content-Encoding") == accept
        reply = json.loads(gzip.decompress(raw) if accept else raw)
        assert reply["outputs"][0]["data"] == ["hello"]
    with httpclient.InferenceServerClient(gated.http_url) as client:
        text = httpclient.InferInput("TEXT", [1, 1], "BYTES")
        text.set_data_from_numpy(np.array([[b"hello"]], dtype=object))
        result = client.infer("echo", [text], response_compression_algorithm="deflate")
        assert result.as_numpy("TEXT_OUT")[0, 0] == b"hello"


def test_other_json_endpoints_get_the_depth_check(gated):
    base = f"http://{gated.http_url}"
    deep = b'{"TEXT":' + nested(50000) + b"}"
    for path in ("/v2/models/echo/generate", "/v2/repository/index"):
        response = requests.post(base + path, data=deep, headers=gated.admin_headers, timeout=10)
        assert response.status_code == 400 and "nested too deeply" in response.json()["error"], path
    response = requests.post(base + "/v2/models/internal_echo/generate", json={"TEXT": "x"}, timeout=10)
    assert response.status_code == 403
    assert_alive(gated)


def test_body_over_the_model_limit_is_refused_before_it_is_read(gated):
    began = time.monotonic()
    response = post(gated, b" " * (2 << 20))
    assert response.status_code == 413 and "1048576-byte limit of model 'sink'" in response.json()["error"]
    assert time.monotonic() - began < 1.0


def test_grpc_gets_the_same_bounds(gated):
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(gated.grpc_url))
    tensor = service_pb2.ModelInferRequest.InferInputTensor
    for request, message in [
        (
            service_pb2.ModelInferRequest(
                model_name="sink",
                inputs=[tensor(name="X", datatype="FP32", shape=[1, 131072, 131072])],
                raw_input_contents=[bytes(4)],
            ),
            "4 sent",
        ),
        (
            service_pb2.ModelInferRequest(
                model_name="sink",
                inputs=[
                    tensor(
                        name="X",
                        datatype="FP32",
                        shape=[1, 131072, 131072],
                        contents=service_pb2.InferTensorContents(fp32_contents=[1.0]),
                    )
                ],
            ),
            "contents hold 1",
        ),
    ]:
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelInfer(request, timeout=10)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and message in info.value.details()
    big = service_pb2.ModelInferRequest(
        model_name="sink",
        inputs=[tensor(name="X", datatype="FP32", shape=[1, 5000, 5000])],
        raw_input_contents=[bytes(100_000_000)],
    )
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(big, timeout=30)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    client = grpcclient.InferenceServerClient(gated.grpc_url)
    x = grpcclient.InferInput("X", [1, 2, 2], "FP32")
    x.set_data_from_numpy(np.ones((1, 2, 2), np.float32))
    assert client.infer("sink", [x]).as_numpy("N")[0, 0] == 4 and client.is_server_ready()
    with pytest.raises(Exception, match="restricted"):
        client.get_system_shared_memory_status()
    admin = {f"triton-grpc-protocol-{k}": v for k, v in gated.admin_headers.items()}
    assert client.get_system_shared_memory_status(headers=admin) is not None
    assert_alive(gated)


def test_internal_models_are_refused_to_clients(gated):
    body = json.dumps({"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["x"]}]}).encode()
    response = post(gated, body, model="internal_echo")
    assert response.status_code == 403 and "internal" in response.json()["error"]
    assert post(gated, body, model="internal_echo", headers=gated.admin_headers).status_code == 200
    assert post(gated, body, model="echo").status_code == 200


def test_metrics_count_the_requests_through_the_gate(gated):
    def echo_successes() -> float:
        text = requests.get(f"http://{gated.metrics_url}/metrics", timeout=10).text
        match = re.search(r'nv_inference_request_success\{model="echo",version="1"\} (\S+)', text)
        return float(match.group(1)) if match else 0.0

    before = echo_successes()
    body = json.dumps({"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["x"]}]}).encode()
    for _ in range(5):
        assert post(gated, body, model="echo").status_code == 200
    deadline = time.monotonic() + 10
    while echo_successes() < before + 5 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert echo_successes() == before + 5


# -- the admin token and other local users -------------------------------------------------------
def test_the_admin_token_is_on_no_command_line(gated):
    tree = [psutil.Process(gated.process.pid)] + psutil.Process(gated.process.pid).children(recursive=True)
    assert any("tritonserver" in " ".join(p.cmdline()) for p in tree)
    assert not any(gated.admin_token in " ".join(p.cmdline()) for p in tree)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as nobody")
def test_another_local_user_sees_not_the_admin_token(gated):
    tree = [gated.process.pid] + [p.pid for p in psutil.Process(gated.process.pid).children(recursive=True)]
    seen = as_nobody(" ; ".join(f"tr '\\0' ' ' < /proc/{pid}/cmdline; echo" for pid in tree))
    assert "triton_gate" in seen.stdout and "tritonserver" in seen.stdout, seen
    assert gated.admin_token not in seen.stdout
    environ = as_nobody(" ; ".join(f"cat /proc/{pid}/environ" for pid in tree))
    assert gated.admin_token not in environ.stdout


# -- readiness, reload, drain (last: they disturb the server) ----------------------------------
@pytest.mark.timeout(60)
def test_a_killed_stub_turns_readiness_false_and_the_gate_reloads_the_model(gated):
    stubs = stub_processes(gated.process.pid, "echo")
    assert len(stubs) == 2
    not_ready, ready_again = kill_and_time_readiness(gated, stubs[0], 30)
    print(f"kill -> not ready {not_ready:.2f} s, kill -> ready again {ready_again:.2f} s")
    assert not_ready is not None and not_ready < 3.0
    assert ready_again is not None and ready_again < 20.0
    # The old version's surviving stub exits shortly after the reload; it must not look like a death.
    deadline = time.monotonic() + 20
    while len(after := stub_processes(gated.process.pid, "echo")) != 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(after) == 2 and not {p.pid for p in stubs} & {p.pid for p in after}
    time.sleep(1.5)  # three rounds of the gate's stub watch
    body = json.dumps({"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["x"]}]}).encode()
    answers = [post(gated, body, model="echo") for _ in range(8)]
    assert all(a.status_code == 200 for a in answers), [(a.status_code, a.text) for a in answers]
    assert [e["event"] for e in gated.gate_events()][-2:] == ["stub_died", "reloaded"]
