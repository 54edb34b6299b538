"""Docker mode behind the front gate: the CPU image's entry point is ``python -m triton_gate serve``.

The issue's crashing requests get a 4xx and the container stays up; internal models and the
restricted APIs need the admin header (its token reaches the container in a read-only mounted
0600 file, on no command line); a killed stub inside the container turns readiness false and
the gate reloads the model. Runs in the docker CI stage (`make test-docker`) against the
yolo11_ensemble deployment in the image (its packed env is made by `make pack-env-image`).
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
import psutil
import pytest
import requests
import tritonclient.http as httpclient

from harness.tests.docker_fixtures import needs_engine
from harness.tests.gate_cases import as_nobody, health_ready, kill_and_time_readiness, nested, with_deep_parameters

DEPLOYMENT = "yolo11_ensemble"
#: The 193-byte request of the issue that aborts tritonserver 2.51 (std::bad_alloc).
HUGE_SHAPE = (
    b'{"inputs":[{"name":"HEAD_OUTPUT","shape":[1,131072,131072],"datatype":"FP32","data":[1]},'
    b'{"name":"IMAGE_SIZES","shape":[1,4],"datatype":"INT32","data":[640,640,640,640]}]}'
)
DEEP_DATA = b'{"inputs":[{"name":"IMAGE_BYTES","shape":[1,1],"datatype":"BYTES","data":' + nested(50000) + b"}]}"
DEEP_PARAMETERS = with_deep_parameters(b'[{"name":"IMAGE_BYTES","shape":[1,1],"datatype":"BYTES","data":["x"]}]')


@pytest.fixture(scope="module")
def gated_container(image):
    from harness.deployments import get_deployment
    from harness.serving.launchers.docker import DockerTritonServer
    from harness.serving.launchers.docker_envs import attach_packed_env

    deployment = get_deployment(DEPLOYMENT)
    deployment.export()
    options = deployment.server_options("cpu", image=image)
    attach_packed_env(deployment, options)
    server = DockerTritonServer(options)
    server.start()
    try:
        server.wait_ready(300)
        yield server
    finally:
        server.stop()


def post(server, model: str, body: bytes, headers: dict | None = None):
    began = time.monotonic()
    response = requests.post(
        f"http://{server.http_url}/v2/models/{model}/infer", data=body, headers=headers or {}, timeout=60
    )
    return response, time.monotonic() - began


def detect(server) -> int:
    """One real inference through the ensemble: the number of boxes found on bus.jpg."""
    from harness.deployments import get_deployment

    data = (get_deployment(DEPLOYMENT).fixtures_path / "images" / "bus.jpg").read_bytes()
    with httpclient.InferenceServerClient(server.http_url) as client:
        tensor = httpclient.InferInput("IMAGE_BYTES", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[data]], dtype=object))
        return int(client.infer(DEPLOYMENT, [tensor]).as_numpy("SCORES").size)


def container_processes(server) -> list[psutil.Process]:
    """The container's processes as the host sees them (gate, tritonserver, stubs)."""
    server.container.reload()
    root = psutil.Process(server.container.attrs["State"]["Pid"])
    return [root] + root.children(recursive=True)


@needs_engine
def test_the_image_runs_the_gate_in_front_of_tritonserver(gated_container):
    assert gated_container.gate is True
    names = [" ".join(p.cmdline()[:4]) for p in container_processes(gated_container)]
    assert "triton_gate serve" in names[0], names
    assert any("tritonserver" in n for n in names[1:]), names
    gates = [n for n in names if "triton_gate serve" in n]
    assert len(gates) == 1, f"expected one gate process, got {names}"


@needs_engine
@pytest.mark.parametrize(
    "model,body",
    [("postprocess", HUGE_SHAPE), (DEPLOYMENT, DEEP_DATA), (DEPLOYMENT, DEEP_PARAMETERS)],
    ids=["huge_shape", "deep_data", "deep_parameters"],
)
def test_crashing_requests_get_a_4xx_and_the_container_stays_up(gated_container, model, body):
    boxes = detect(gated_container)
    for headers in ({}, gated_container.admin_headers):
        response, elapsed = post(gated_container, model, body, headers)
        assert 400 <= response.status_code < 500, response.text[:300]
        assert "error" in response.json() and elapsed < 1.0, (response.text[:300], elapsed)
    assert post(gated_container, model, body, gated_container.admin_headers)[0].status_code == 400
    time.sleep(0.5)
    assert gated_container.is_running(), gated_container.logs()[-2000:]
    assert health_ready(gated_container) and detect(gated_container) == boxes


@needs_engine
def test_internal_models_and_restricted_apis_need_the_admin_header(gated_container):
    sizes = json.dumps(
        {
            "inputs": [
                {"name": "HEAD_OUTPUT", "shape": [1, 6, 8400], "datatype": "FP32", "data": [0.0] * 6 * 8400},
                {"name": "IMAGE_SIZES", "shape": [1, 4], "datatype": "INT32", "data": [640, 640, 640, 640]},
            ]
        }
    ).encode()
    refused, _ = post(gated_container, "postprocess", sizes)
    assert refused.status_code == 403 and "internal" in refused.json()["error"]
    url = f"http://{gated_container.http_url}/v2/systemsharedmemory/status"
    assert requests.get(url, timeout=10).status_code == 403
    assert requests.get(url, headers=gated_container.admin_headers, timeout=10).status_code == 200


@needs_engine
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as nobody")
def test_another_local_user_reads_neither_the_token_nor_the_container_shared_memory(gated_container):
    token = gated_container.admin_token
    pids = [p.pid for p in container_processes(gated_container)]
    seen = as_nobody(
        " ; ".join(f"tr '\\0' ' ' < /proc/{pid}/cmdline; echo" for pid in pids)
        + f" ; cat {gated_container.secret_dir}/admin-token"
    )
    assert "triton_gate" in seen.stdout and token not in seen.stdout + seen.stderr
    # The stubs' IPC regions live in the container's own /dev/shm: not in the host's, and the
    # container's is out of reach through /proc/<pid>/root.
    region = next(
        a
        for p in container_processes(gated_container)
        for a in p.cmdline()
        if a.startswith("triton_python_backend_shm_region")
    )
    shm = as_nobody(f"ls -la /dev/shm; ls /proc/{pids[1]}/root/dev/shm")
    assert region not in shm.stdout and shm.returncode != 0 and "denied" in shm.stderr, (shm.stdout, shm.stderr)
    attrs = gated_container.container.attrs
    assert token not in json.dumps(attrs["Config"]) and token not in json.dumps(attrs["Args"])


@needs_engine
@pytest.mark.timeout(120)
def test_a_killed_stub_in_the_container_turns_readiness_false_and_the_gate_reloads(gated_container):
    stubs = [
        p
        for p in container_processes(gated_container)
        if p.cmdline() and p.cmdline()[0].endswith("triton_python_backend_stub") and "/preprocess/" in p.cmdline()[1]
    ]
    assert stubs, [p.cmdline()[:2] for p in container_processes(gated_container)]
    not_ready, ready_again = kill_and_time_readiness(gated_container, stubs[0], 90)
    print(f"docker: kill -> not ready {not_ready} s, kill -> ready again {ready_again} s")
    assert not_ready is not None and not_ready < 3.0
    assert ready_again is not None
    assert gated_container.is_running() and detect(gated_container) > 0
