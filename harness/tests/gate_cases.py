"""The gate tests' tiny repository and requests: a ``sink`` model, ``echo`` and an internal echo
(``GATE_POLICY``),
the oversized requests that abort tritonserver 2.51, and small helpers shared with test_docker_gate.py."""

from __future__ import annotations

import signal
import subprocess
import time

import numpy as np
import requests
import tritonclient.http as httpclient

from harness.testing.toy_models import ECHO_CONFIG, ECHO_MODEL, echo_config, model_config, write_model
from harness.tests.hostile_requests import DEEP_DATA as DEEP_DATA
from harness.tests.hostile_requests import DEEP_PARAMETERS as DEEP_PARAMETERS
from harness.tests.hostile_requests import HUGE_SHAPE as HUGE_SHAPE
from harness.tests.hostile_requests import nested as nested
from harness.tests.hostile_requests import with_deep_parameters as with_deep_parameters
from triton_gate.policy import GatePolicy

SINK_CONFIG = model_config("sink", [("X", "FP32", (-1, -1))], [("N", "INT64", (1,))], max_batch_size=8)
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
#: The gate's policy for this repository: ``internal_echo`` is internal, ``sink`` takes 1 MiB at most.
GATE_POLICY = GatePolicy(public=["sink", "echo"], max_body_bytes={"sink": 1 << 20})


def make_gate_repository(root):
    repo = root / "model_repository"
    for name, config, model in [
        ("sink", SINK_CONFIG, SINK_MODEL),
        ("echo", ECHO_CONFIG, ECHO_MODEL),
        ("internal_echo", echo_config("internal_echo"), ECHO_MODEL),
    ]:
        write_model(repo, name, config, model)
    return repo


def health_ready(server) -> bool:
    """Whether the server answers 200 on ``/v2/health/ready`` (False when it does not answer at all)."""
    try:
        return requests.get(f"http://{server.http_url}/v2/health/ready", timeout=5).status_code == 200
    except requests.RequestException:
        return False


def kill_and_time_readiness(server, stub, timeout_s: float) -> tuple[float | None, float | None]:
    """SIGKILL ``stub``; seconds until ``/v2/health/ready`` turns false, and until it is true again
    (None for what did not happen within ``timeout_s``)."""
    killed = time.monotonic()
    stub.send_signal(signal.SIGKILL)
    not_ready = None
    while time.monotonic() - killed < timeout_s:
        ok = health_ready(server)
        if not ok and not_ready is None:
            not_ready = time.monotonic() - killed
        if ok and not_ready is not None:
            return not_ready, time.monotonic() - killed
        time.sleep(0.05)
    return not_ready, None


def as_nobody(command: str) -> subprocess.CompletedProcess:
    """``sh -c command`` as the user nobody (another local user; needs root)."""
    return subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", command],
        capture_output=True,
        text=True,
        timeout=30,
    )


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
