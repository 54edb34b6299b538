"""The front gate (harness.serving.gate): the crashing requests get a 4xx and the server stays up,
honest readiness with automatic reload of a model whose stub died, isolation from other
local users (checked as ``nobody``), internal models, SIGTERM drain.

Every end-to-end case runs against a throwaway server on a tiny repository, never a
deployment's shared session server (some of these requests kill an unprotected Triton).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import psutil
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc

from harness.reliability.faults import ECHO_CONFIG, ECHO_MODEL
from harness.reliability.soak import stub_processes
from harness.serving.gate.validate import GateError, body_limit, validate_infer
from harness.serving.launchers import LocalTritonServer, ServerOptions

SINK_CONFIG = """
name: "sink"
backend: "python"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1, -1 ] } ]
output [ { name: "N" data_type: TYPE_INT64 dims: [ 1 ] } ]
parameters { key: "gate_max_body_bytes" value: { string_value: "1048576" } }
"""
SINK_MODEL = '''
import time
from pathlib import Path
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Answers the number of elements it got; sleeps when the request parameter ``sleep`` is set."""

    def execute(self, requests):
        out = []
        for r in requests:
            params = r.parameters()
            if "sleep" in params:
                time.sleep(float(__import__("json").loads(params)["sleep"]))
            n = pb_utils.get_input_tensor_by_name(r, "X").as_numpy().size
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("N", np.array([[n]], dtype=np.int64))]))
        return out
'''
INTERNAL_PARAMETER = 'parameters { key: "gate_internal" value: { string_value: "true" } }\n'

# The requests of issue 16 that abort tritonserver 2.51 (std::bad_alloc, stack overflow).
HUGE_SHAPE = b'{"inputs":[{"name":"X","shape":[1,131072,131072],"datatype":"FP32","data":[1]}]}'
DEEP_DATA = b'{"inputs":[{"name":"X","shape":[1,1],"datatype":"FP32","data":' + b"[" * 50000 + b"]" * 50000 + b"}]}"
DEEP_PARAMETERS = (
    b'{"parameters":{"p":'
    + b"[" * 300000
    + b"]" * 300000
    + b'},"inputs":[{"name":"X","shape":[1,1,1],"datatype":"FP32","data":[1]}]}'
)


def make_gate_repository(root):
    repo = root / "model_repository"
    for name, config, model in [
        ("sink", SINK_CONFIG, SINK_MODEL),
        ("echo", ECHO_CONFIG, ECHO_MODEL),
        ("internal_echo", ECHO_CONFIG.replace('"echo"', '"internal_echo"') + INTERNAL_PARAMETER, ECHO_MODEL),
    ]:
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config)
        (repo / name / "1" / "model.py").write_text(model)
    return repo


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    repo = make_gate_repository(tmp_path_factory.mktemp("gate"))
    server = LocalTritonServer(ServerOptions(str(repo), required_models=["sink", "echo", "internal_echo"]))
    server.start()
    try:
        server.wait_ready(120)
        yield server
    finally:
        server.stop()


def post(server, body: bytes, model: str = "sink", headers: dict | None = None, timeout: float = 30):
    return requests.post(
        f"http://{server.http_url}/v2/models/{model}/infer", data=body, headers=headers or {}, timeout=timeout
    )


def assert_alive(server):
    assert server.is_running()
    with httpclient.InferenceServerClient(server.http_url) as client:
        x = httpclient.InferInput("X", [1, 2, 3], "FP32")
        x.set_data_from_numpy(np.ones((1, 2, 3), np.float32))
        assert client.infer("sink", [x]).as_numpy("N")[0, 0] == 6


# -- validation without a server --------------------------------------------------------------
SINK = {
    "name": "sink",
    "max_batch_size": 8,
    "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [-1, -1]}],
    "parameters": {},
}
TEXT = {"name": "t", "max_batch_size": 4, "input": [{"name": "TEXT", "data_type": "TYPE_STRING", "dims": [1]}]}


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
    assert body_limit({**SINK, "parameters": {"gate_max_body_bytes": {"string_value": "1000"}}}) == 1000
    fixed = {"max_batch_size": 2, "input": [{"name": "I", "data_type": "TYPE_FP32", "dims": [3, 8, 8]}]}
    assert body_limit(fixed) == 2 * 3 * 8 * 8 * 32 + 64 * 1024
    assert body_limit(TEXT, default=123) == 123


# -- Triton without the gate: why it exists ----------------------------------------------------
@pytest.mark.timeout(120)
def test_triton_alone_dies_of_the_huge_shape_request(tmp_path):
    server = LocalTritonServer(ServerOptions(str(make_gate_repository(tmp_path)), required_models=["sink"]), gate=False)
    server.start()
    try:
        server.wait_ready(120)
        with pytest.raises(requests.ConnectionError):
            post(server, HUGE_SHAPE)
        deadline = time.monotonic() + 20
        while server.is_running() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not server.is_running(), "tritonserver 2.51 survived the huge-shape request: the gate may be moot"
    finally:
        server.stop()


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


def test_other_json_endpoints_get_the_depth_check(gated):
    base = f"http://{gated.http_url}"
    deep = b'{"TEXT":' + b"[" * 50000 + b"]" * 50000 + b"}"
    for path in ("/v2/models/echo/generate", "/v2/repository/index"):
        response = requests.post(base + path, data=deep, headers=gated.admin_headers, timeout=10)
        assert response.status_code == 400 and "nested too deeply" in response.json()["error"], path
    response = requests.post(base + "/v2/models/internal_echo/generate", json={"TEXT": "x"}, timeout=10)
    assert response.status_code == 403
    assert_alive(gated)


def test_body_over_the_model_limit_is_refused_before_it_is_read(gated):
    began = time.monotonic()
    response = post(gated, b" " * (2 << 20))
    assert response.status_code == 413 and "gate_max_body_bytes" in response.json()["error"], response.text
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


def test_host_other_than_loopback_warns(tmp_path):
    with pytest.warns(UserWarning, match="open to the network"):
        LocalTritonServer(ServerOptions(str(tmp_path)), host="0.0.0.0")


# -- isolation from other local users ----------------------------------------------------------
def as_nobody(command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", command],
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as nobody and to isolate")
def test_another_local_user_sees_neither_the_token_nor_the_shared_memory_nor_tritonserver(gated):
    tree = [gated.process.pid] + [p.pid for p in psutil.Process(gated.process.pid).children(recursive=True)]
    seen = as_nobody(" ; ".join(f"tr '\\0' ' ' < /proc/{pid}/cmdline; echo" for pid in tree))
    assert str(tree[0]) and "harness.serving.gate" in seen.stdout and "tritonserver" in seen.stdout, seen
    assert gated.admin_token not in seen.stdout
    environ = as_nobody(" ; ".join(f"cat /proc/{pid}/environ" for pid in tree))
    assert gated.admin_token not in environ.stdout
    # The shared memory of the stubs: not in the host's /dev/shm, not reachable through /proc.
    assert gated.shm_regions(), "the stubs should have shared-memory regions"
    listing = as_nobody(f"ls -la /dev/shm/; ls /proc/{gated.process.pid}/root/dev/shm/ 2>&1")
    assert gated.shm_prefix not in listing.stdout, listing.stdout
    # tritonserver's own ports (and its internal token) are unreachable from the host namespace.
    for port in gated.private_ports:
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0, f"tritonserver's private port {port} is reachable"
    internal = {"x-triton-harness-admin": gated.internal_token}
    assert (
        requests.get(f"http://{gated.http_url}/v2/systemsharedmemory/status", headers=internal, timeout=10).status_code
        == 403
    )


# -- readiness, reload, drain (last: they disturb the server) ----------------------------------
@pytest.mark.timeout(60)
def test_a_killed_stub_turns_readiness_false_and_the_gate_reloads_the_model(gated):
    base = f"http://{gated.http_url}"
    stubs = stub_processes(gated.process.pid, "echo")
    assert len(stubs) == 2
    killed = time.monotonic()
    stubs[0].send_signal(signal.SIGKILL)
    not_ready = ready_again = None
    while time.monotonic() - killed < 30:
        ok = requests.get(base + "/v2/health/ready", timeout=5).status_code == 200
        if not ok and not_ready is None:
            not_ready = time.monotonic() - killed
        if ok and not_ready is not None:
            ready_again = time.monotonic() - killed
            break
        time.sleep(0.05)
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


@pytest.mark.timeout(60)
def test_sigterm_drains_in_flight_requests(tmp_path):
    server = LocalTritonServer(ServerOptions(str(make_gate_repository(tmp_path)), required_models=["sink"]))
    server.start()
    try:
        server.wait_ready(120)
        body = b'{"parameters":{"sleep":"0.5"},"inputs":[{"name":"X","shape":[1,1,1],"datatype":"FP32","data":[1]}]}'
        results = []
        threads = [threading.Thread(target=lambda: results.append(post(server, body).status_code)) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        stopping = threading.Thread(target=server.stop)
        stopping.start()
        time.sleep(0.3)
        assert requests.get(f"http://{server.http_url}/v2/health/ready", timeout=5).status_code != 200
        for t in threads:
            t.join(30)
        stopping.join(60)
        assert results == [200] * 4, results
        assert not server.is_running()
        assert "Signal (11)" not in server.logs()
    finally:
        server.stop()


# -- every model of every deployment -----------------------------------------------------------
def _deployment_configs():
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2

    from harness.deployments import discover

    for deployment in discover():
        for path in sorted(deployment.model_repository.glob("*/config.pbtxt")):
            config = text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())
            as_json = json_format.MessageToDict(config, preserving_proto_field_name=True)
            yield pytest.param(path.parent.name, as_json, id=f"{deployment.name}/{path.parent.name}")


@pytest.mark.parametrize("model,config", list(_deployment_configs()))
def test_crashers_are_refused_for_every_model_of_every_deployment(model, config):
    """For each input: a huge declared shape with one value, and 50,000 nested brackets."""
    max_batch = int(config.get("max_batch_size") or 0)
    for spec in config.get("input") or []:
        dims = [int(d) for d in spec.get("dims") or []]
        shape = ([1] if max_batch > 0 else []) + [131072 if d < 0 else d for d in dims]
        if all(d >= 0 for d in dims):  # fixed dims: a declared batch far over max_batch_size
            shape = [max(max_batch, 1) * 131072] + shape[1:] if max_batch > 0 else [131072] + shape
        datatype = "BYTES" if spec["data_type"] == "TYPE_STRING" else spec["data_type"][5:]
        item = {"name": spec["name"], "shape": shape, "datatype": datatype, "data": ["a" if datatype == "BYTES" else 1]}
        for body in (
            json.dumps({"inputs": [item]}).encode(),
            json.dumps({"inputs": [{**item, "data": "@"}]}).encode().replace(b'"@"', b"[" * 50000 + b"]" * 50000),
        ):
            with pytest.raises(GateError) as info:
                validate_infer(model, config, body, None)
            assert info.value.status == 400, info.value.message


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "deployment,model,body",
    [
        (
            "yolo11_ensemble",
            "postprocess",
            b'{"inputs":[{"name":"HEAD_OUTPUT","shape":[1,131072,131072],"datatype":"FP32","data":[1]},'
            b'{"name":"IMAGE_SIZES","shape":[1,4],"datatype":"INT32","data":[640,640,640,640]}]}',
        ),
        (
            "embedding_cpu",
            "embedding_onnx",
            b'{"inputs":[{"name":"input_ids","shape":[1,2147483647],"datatype":"INT64","data":[1]},'
            b'{"name":"attention_mask","shape":[1,1],"datatype":"INT64","data":[1]}]}',
        ),
        (
            "cn_clip",
            "text_embedding",
            b'{"inputs":[{"name":"TEXT","shape":[131072,131072],"datatype":"BYTES","data":["a"]}]}',
        ),
        (
            "resnet_npu",
            "resnet50",
            b'{"inputs":[{"name":"IMAGE","shape":[131072,3,224,224],"datatype":"FP32","data":[1]}]}',
        ),
    ],
)
def test_the_issue_crashers_on_a_throwaway_deployment_server(deployment, model, body):
    """The issue's huge-shape request, then 50,000 nested brackets in ``data`` and 300,000 in
    ``parameters``, on a real server of each deployment: 4xx every time, the server stays ready."""
    from harness.reliability.soak import deployment_server, stop_server

    server = deployment_server(deployment, [model])
    server.start()
    try:
        server.wait_ready(120)
        for headers in ({}, server.admin_headers):
            response = post(server, body, model=model, headers=headers)
            assert response.status_code in (400, 403), response.text
            assert "error" in response.json()
        assert post(server, body, model=model, headers=server.admin_headers).status_code == 400
        name = json.loads(body)["inputs"][0]["name"]
        deep = json.dumps({"inputs": [{"name": name, "shape": [1, 1], "datatype": "FP32", "data": "@"}]}).encode()
        for nested in (deep.replace(b'"@"', b"[" * 50000 + b"]" * 50000), DEEP_PARAMETERS):
            began = time.monotonic()
            response = post(server, nested, model=model, headers=server.admin_headers)
            assert response.status_code == 400 and "nested" in response.json()["error"], response.text
            assert time.monotonic() - began < 1.0
        assert server.is_running()
        assert requests.get(f"http://{server.http_url}/v2/health/ready", timeout=5).status_code == 200
    finally:
        stop_server(server)


def test_gate_max_dims_bounds_a_variable_input():
    detector = {
        "max_batch_size": 8,
        "input": [{"name": "images", "data_type": "TYPE_FP32", "dims": [3, -1, -1]}],
        "parameters": {"gate_max_dims:images": {"string_value": "3,1280,1280"}},
    }
    ok = {"inputs": [{"name": "images", "shape": [1, 3, 2, 2], "datatype": "FP32", "data": [0.0] * 12}]}
    validate_infer("yolo11_detector", detector, json.dumps(ok).encode(), None)
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
    with pytest.raises(GateError, match=r"over the bound \[3, 1280, 1280\].*gate_max_dims:images"):
        validate_infer("yolo11_detector", detector, header + bytes(4 * 3 * 2048 * 2048), len(header))


@pytest.mark.timeout(60)
def test_without_isolation_the_gate_still_validates_and_keeps_the_token_off_command_lines(tmp_path):
    """What a non-root user gets (the gate logs that it is not isolated)."""
    server = LocalTritonServer(
        ServerOptions(str(make_gate_repository(tmp_path)), required_models=["sink"]), isolate=False
    )
    server.start()
    try:
        server.wait_ready(120)
        assert post(server, HUGE_SHAPE).status_code == 400
        assert_alive(server)
        tree = [psutil.Process(server.process.pid)] + psutil.Process(server.process.pid).children(recursive=True)
        assert not any(server.admin_token in " ".join(p.cmdline()) for p in tree)
        assert "not isolated" in server.logs()
    finally:
        server.stop()


# -- standalone: python -m harness.serving.gate serve -- tritonserver ... (the CPU image's entry point) ---
def test_serve_rewrites_the_tritonserver_command():
    from harness.serving.gate.serve import gated_command

    user = [
        "tritonserver",
        "--model-repository=/models",
        "--http-port",
        "8000",
        "--grpc-port=8001",
        "--model-control-mode",
        "none",
        "--exit-timeout-secs=5",
        "--http-restricted-api=trace:h=v",
    ]
    out = gated_command(user, (1, 2, 3), "inner", ["shared-memory", "model-repository"], grpc=True)
    assert out[:2] == ["tritonserver", "--model-repository=/models"] and "--exit-timeout-secs=5" in out
    assert [a for a in out if a.startswith(("--http-port", "--grpc-port", "--metrics-port"))] == [
        "--http-port=1",
        "--grpc-port=2",
        "--metrics-port=3",
    ]
    assert "--http-address=127.0.0.1" in out and "--http-restricted-api=trace:h=v" not in out
    assert "--model-control-mode=explicit" in out and "--load-model=*" in out
    assert "--grpc-restricted-protocol=shared-memory,model-repository:x-triton-harness-admin=inner" in out
    explicit = gated_command(
        ["tritonserver", "--model-control-mode=explicit", "--load-model=a"], (1, 2, 3), "t", ["trace"], grpc=False
    )
    assert "--model-control-mode=explicit" in explicit and "--load-model=*" not in explicit
    assert not any(a.startswith("--grpc-restricted-protocol") for a in explicit)


@pytest.mark.timeout(120)
def test_serve_mode_gates_a_tritonserver_command_line(tmp_path):
    """What the CPU image runs: the gate binds the ports, starts the command behind it, reads the
    admin token from a file (then removes it), refuses the crashers and internal models."""
    from harness.serving.launchers.local import assemble_backend_dir, free_port, pytriton_root

    repo = make_gate_repository(tmp_path)
    backends = assemble_backend_dir(tmp_path / "backends")
    env = LocalTritonServer(ServerOptions(str(repo))).environment()
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    http, grpc_port, metrics = free_port(), free_port(), free_port()
    token = tmp_path / "token"
    token.write_text("s3cret-token")
    token.chmod(0o600)
    command = [
        sys.executable,
        "-m",
        "harness.serving.gate",
        "serve",
        "--host",
        "127.0.0.1",
        "--http-port",
        str(http),
        "--grpc-port",
        str(grpc_port),
        "--metrics-port",
        str(metrics),
        "--admin-token-file",
        str(token),
        "--",
        str(pytriton_root() / "bin" / "tritonserver"),
        f"--model-repository={repo}",
        f"--backend-directory={backends}",
        "--exit-timeout-secs",
        "5",
    ]
    log = tmp_path / "serve.log"
    process = subprocess.Popen(command, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=tmp_path)
    base = f"http://127.0.0.1:{http}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert process.poll() is None, log.read_text()[-3000:]
            try:
                if requests.get(base + "/v2/health/ready", timeout=5).status_code == 200:
                    break
            except requests.RequestException:  # not listening yet / busy machine
                pass
            time.sleep(0.2)
        else:
            raise AssertionError("never ready:\n" + log.read_text()[-3000:])
        assert not token.exists(), "the token file should be removed once read"
        for body in (HUGE_SHAPE, DEEP_DATA, DEEP_PARAMETERS):
            began = time.monotonic()
            response = requests.post(base + "/v2/models/sink/infer", data=body, timeout=30)
            assert response.status_code == 400 and time.monotonic() - began < 1.0, response.text
        text = json.dumps({"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["x"]}]})
        assert requests.post(base + "/v2/models/internal_echo/infer", data=text, timeout=10).status_code == 403
        assert (
            requests.post(
                base + "/v2/models/internal_echo/infer",
                data=text,
                timeout=10,
                headers={"x-triton-harness-admin": "s3cret-token"},
            ).status_code
            == 200
        )
        assert requests.get(base + "/v2/systemsharedmemory/status", timeout=10).status_code == 403
        with grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}") as client:
            assert client.is_server_ready()
        assert requests.get(f"http://127.0.0.1:{metrics}/metrics", timeout=10).status_code == 200
        seen = " ".join(
            " ".join(p.cmdline())
            for p in [psutil.Process(process.pid)] + psutil.Process(process.pid).children(recursive=True)
        )
        assert "s3cret-token" not in seen and "tritonserver" in seen
        assert process.poll() is None
    finally:
        process.terminate()
        code = process.wait(60)
    assert code == 0, log.read_text()[-3000:]
    assert "Signal (11)" not in log.read_text()
