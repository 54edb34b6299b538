"""The gate on throwaway servers of their own: why the gate exists (Triton alone dies of the issue's
request), SIGTERM drain, and the issue's crashers on a
real server of each deployment. Each test starts and stops its own server."""

from __future__ import annotations

import json
import threading
import time

import pytest
import requests

from harness.serving.launchers import LocalTritonServer, ServerOptions
from harness.tests.gate_cases import (
    DEEP_PARAMETERS,
    GATE_POLICY,
    HUGE_SHAPE,
    health_ready,
    make_gate_repository,
    nested,
    post,
)


# -- Triton without the gate: why it exists ----------------------------------------------------
@pytest.mark.server
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


@pytest.mark.server
@pytest.mark.timeout(60)
def test_sigterm_drains_in_flight_requests(tmp_path):
    server = LocalTritonServer(
        ServerOptions(str(make_gate_repository(tmp_path)), required_models=["sink"], gate_policy=GATE_POLICY)
    )
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
        assert not health_ready(server)
        for t in threads:
            t.join(30)
        stopping.join(60)
        assert results == [200] * 4, results
        assert not server.is_running()
        assert "Signal (11)" not in server.logs()
    finally:
        server.stop()


@pytest.mark.server
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
    from harness.testing.servers import deployment_server, stop_server

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
        for deep_body in (deep.replace(b'"@"', nested(50000)), DEEP_PARAMETERS):
            began = time.monotonic()
            response = post(server, deep_body, model=model, headers=server.admin_headers)
            assert response.status_code == 400 and "nested" in response.json()["error"], response.text
            assert time.monotonic() - began < 1.0
        assert server.is_running()
        assert health_ready(server)
    finally:
        stop_server(server)


def test_host_other_than_loopback_warns(tmp_path):
    with pytest.warns(UserWarning, match="open to the network"):
        LocalTritonServer(ServerOptions(str(tmp_path)), host="0.0.0.0")
