"""The gate standalone, ``python -m triton_gate serve -- tritonserver ...``: the CPU image's
entry point, run here on the local tritonserver."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import requests
import tritonclient.grpc as grpcclient

from harness.serving.launchers import LocalTritonServer, ServerOptions
from harness.tests.gate_cases import DEEP_DATA, DEEP_PARAMETERS, GATE_POLICY, HUGE_SHAPE, make_gate_repository
from triton_gate.policy import write_policy


def test_serve_rewrites_the_tritonserver_command():
    from triton_gate.serve import gated_command

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


@pytest.mark.server
@pytest.mark.timeout(120)
def test_serve_mode_gates_a_tritonserver_command_line(tmp_path):
    """What the CPU image runs: the gate binds the ports, starts the command behind it, reads the
    admin token from a file (then removes it), refuses the crashers and internal models."""
    from harness.serving.launchers.local import assemble_backend_dir, pytriton_root
    from triton_gate.serve import free_ports

    repo = make_gate_repository(tmp_path)
    backends = assemble_backend_dir(tmp_path / "backends")
    env = LocalTritonServer(ServerOptions(str(repo))).environment()
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    http, grpc_port, metrics = free_ports(3)
    token = tmp_path / "token"
    token.write_text("s3cret-token")
    token.chmod(0o600)
    policy = write_policy(GATE_POLICY, tmp_path / "gate-policy.json")
    command = [
        sys.executable,
        "-m",
        "triton_gate",
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
        "--policy-file",
        str(policy),
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
