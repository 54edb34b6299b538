"""Faults under verified load (kill a stub, unload + reload, restart) and the servers' safe defaults."""

from __future__ import annotations

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from harness.serving.launchers import LocalTritonServer, ServerOptions
from harness.testing.toy_models import echo_repository
from harness.tests.repositories import ready_server
from harness_lab.reliability.faults import format_fault, kill_stub, restart_server, unload_reload
from harness_lab.reliability.workloads import echo_workload
from triton_gate.config import ADMIN_HEADER


@pytest.fixture(scope="module")
def explicit_server(tmp_path_factory):
    repo = echo_repository(tmp_path_factory.mktemp("faults"))
    # gate=False: these scenarios document what tritonserver itself does (the gate's own
    # recovery is tested in test_gate.py).
    holder = {
        "server": LocalTritonServer(
            ServerOptions(str(repo), required_models=["echo"], model_control_mode="explicit"), gate=False
        )
    }
    holder["server"].start()
    try:
        holder["server"].wait_ready(120)
        yield holder
    finally:
        holder["server"].stop()


@pytest.mark.timeout(120)
def test_killed_stub_is_not_restarted_by_triton_and_a_reload_brings_it_back(explicit_server):
    report = kill_stub(explicit_server["server"], echo_workload(), concurrency=16, unattended_s=3.0, after_s=2.0)
    print(format_fault(report))
    assert report["wrong_answers"] == 0, report["wrong_examples"]
    assert report["timeouts"] == 0
    # What Triton 2.51 does (lab/docs/reliability.md): requests to the dead instance fail, the model stays READY.
    assert not report["stub_restarted_by_triton"] and not report["recovered_by_itself"]
    assert report["errors"] > 0
    assert report["ready_flag_while_broken"] is True
    assert any("not healthy" in m for m in report["error_messages"]), report["error_messages"]
    # The remedy (reload) brings every instance back: no error after the load call returned.
    assert report["recovered"] and report["errors_after_remedy_done"] == 0
    assert report["killed_pid"] not in report["stubs_after"]


@pytest.mark.timeout(120)
def test_unload_and_reload_under_load_loses_nothing(explicit_server):
    report = unload_reload(explicit_server["server"], echo_workload(), concurrency=16, after_s=2.0)
    print(format_fault(report))
    assert report["wrong_answers"] == 0 and report["timeouts"] == 0
    assert report["recovered"], report
    assert report["last_error_s"] is None or report["last_error_s"] <= report["load_returned_s"] + 0.5


@pytest.mark.timeout(180)
def test_server_restart_under_load_loses_nothing(explicit_server):
    report, new_server = restart_server(explicit_server["server"], echo_workload(), concurrency=16, after_s=2.0)
    explicit_server["server"] = new_server
    print(format_fault(report))
    assert report["wrong_answers"] == 0 and report["timeouts"] == 0
    assert report["recovered"], report
    assert report["service_back_s"] is not None and report["service_back_s"] <= report["ready_again_s"] + 2


# -- safe defaults ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def default_server(tmp_path_factory):
    repo = echo_repository(tmp_path_factory.mktemp("defaults"))
    with ready_server(repo, ["echo"]) as server:
        yield server


def test_default_server_refuses_model_load_and_unload(default_server):
    with httpclient.InferenceServerClient(default_server.http_url) as client:
        for call in (client.unload_model, client.load_model):
            with pytest.raises(InferenceServerException):
                call("echo")
            with pytest.raises(InferenceServerException):  # even with the admin header: mode none
                call("echo", headers=default_server.admin_headers)
        assert client.is_model_ready("echo")
    base = f"http://{default_server.http_url}"
    response = requests.post(
        f"{base}/v2/repository/models/echo/load", json={"parameters": {"file:1/model.py": "aW1wb3J0IG9z"}}, timeout=10
    )
    assert response.status_code in (403, 503), response.text


def test_default_server_restricts_admin_apis_to_the_harness(default_server):
    base = f"http://{default_server.http_url}"
    for method, path, body in [
        ("get", "/v2/systemsharedmemory/status", None),
        (
            "post",
            "/v2/systemsharedmemory/region/r/register",
            {"key": "/triton_python_backend_shm_region_1", "offset": 0, "byte_size": 64},
        ),
        ("get", "/v2/trace/setting", None),
        ("post", "/v2/logging", {"log_verbose_level": 1}),
        ("post", "/v2/repository/index", {}),
    ]:
        response = getattr(requests, method)(base + path, json=body, timeout=10)
        assert response.status_code == 403, f"{path}: {response.status_code} {response.text}"
    allowed = requests.get(base + "/v2/systemsharedmemory/status", headers=default_server.admin_headers, timeout=10)
    assert allowed.status_code == 200
    command = default_server.command()
    assert any(c.startswith("--http-restricted-api=shared-memory,trace,logging,model-repository:") for c in command)
    assert any(c.startswith("--grpc-restricted-protocol=") and ADMIN_HEADER in c for c in command)


def test_default_server_serves_inference_and_metadata_without_the_header(default_server):
    with httpclient.InferenceServerClient(default_server.http_url) as client:
        text = httpclient.InferInput("TEXT", [1, 1], "BYTES")
        text.set_data_from_numpy(np.array([[b"hello"]], dtype=object))
        assert client.infer("echo", [text]).as_numpy("TEXT_OUT")[0, 0] == b"hello"
        assert client.get_model_metadata("echo")["name"] == "echo"
        assert client.get_inference_statistics("echo")["model_stats"]


def test_file_locations_cannot_be_changed_over_the_network(default_server):
    base = f"http://{default_server.http_url}"
    for path, body in [
        ("/v2/trace/setting", {"trace_file": "/tmp/triton-harness-pwned"}),
        ("/v2/logging", {"log_file": "/tmp/triton-harness-pwned"}),
    ]:
        response = requests.post(base + path, json=body, headers=default_server.admin_headers, timeout=10)
        assert response.status_code >= 400, f"{path} accepted a file location: {response.text}"


def test_explicit_mode_opens_the_model_repository_api_only_when_asked(explicit_server):
    server = explicit_server["server"]
    assert "model-repository" not in server.restricted_apis()
    with httpclient.InferenceServerClient(server.http_url) as client:
        assert {m["name"] for m in client.get_model_repository_index()} == {"echo"}
