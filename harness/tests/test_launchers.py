"""The launchers: start/ready/stop of a real local server, fail-fast, docker spec, external."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import psutil
import pytest
import tritonclient.http as httpclient

from harness import PROJECT_ROOT
from harness.serving.launchers import (
    DockerTritonServer,
    ExternalTritonServer,
    LocalTritonServer,
    ServerOptions,
    create_server,
)
from harness.serving.launchers.base import ServerStartError
from harness.serving.launchers.docker_images import ascend_profile, ngc_profile
from harness.serving.packenv import stub_python_of
from harness.tests.repositories import make_repository, ready_server


@pytest.fixture(scope="module")
def running_server(tmp_path_factory):
    repo = make_repository(tmp_path_factory.mktemp("launcher"))
    with ready_server(repo, ["double", "echo"], env={"HARNESS_TEST_ENV": "from-options"}) as server:
        yield server


def test_local_server_serves_python_and_onnxruntime_models(running_server):
    with httpclient.InferenceServerClient(running_server.http_url) as client:
        infer_input = httpclient.InferInput("INPUT", [2, 4], "FP32")
        infer_input.set_data_from_numpy(np.arange(8, dtype=np.float32).reshape(2, 4))
        result = client.infer("double", [infer_input]).as_numpy("OUTPUT")
        np.testing.assert_array_equal(result, np.arange(8, dtype=np.float32).reshape(2, 4) * 2)
        text = httpclient.InferInput("TEXT", [1, 1], "BYTES")
        text.set_data_from_numpy(np.array([["héllo".encode()]], dtype=object))
        assert client.infer("echo", [text]).as_numpy("TEXT_OUT")[0, 0].decode() == "héllo"


def test_the_options_env_reaches_the_server_and_its_stubs(running_server):
    """``ServerOptions.env`` (a manifest's ``[target.<t>] env``, e.g. glibc's malloc settings) is in
    the environment of tritonserver and of each Python-backend stub it started."""
    root = psutil.Process(running_server.process.pid)
    served = [
        p for p in [root, *root.children(recursive=True)] if p.name() in ("tritonserver", "triton_python_backend_stub")
    ]
    assert {p.name() for p in served} == {"tritonserver", "triton_python_backend_stub"}, served
    for process in served:
        assert process.environ().get("HARNESS_TEST_ENV") == "from-options", process


def test_local_server_binds_loopback_only(running_server):
    command = " ".join(running_server.command())
    assert "--http-address=127.0.0.1" in command and "--grpc-address=127.0.0.1" in command
    assert running_server.http_url.startswith("127.0.0.1:")
    assert f"shm-region-prefix-name={running_server.shm_prefix}" in command


def test_server_metadata_reports_version(running_server):
    described = running_server.describe()
    assert described["server_mode"] == "local" and described["server_version"]


def test_external_mode_uses_a_running_server_without_owning_it(running_server):
    external = create_server(
        "external", ServerOptions("unused", required_models=["double"]), url=f"http://{running_server.http_url}"
    )
    assert isinstance(external, ExternalTritonServer)
    external.start()
    external.wait_ready(10)
    external.stop()
    assert running_server.is_running()


@pytest.mark.server
def test_broken_config_fails_fast_with_the_servers_error(tmp_path):
    repo = make_repository(tmp_path, models=("double",))
    (repo / "double" / "config.pbtxt").write_text(
        (repo / "double" / "config.pbtxt")
        .read_text()
        .replace("TYPE_FP32 dims: [ 4 ] } ]\noutput", "TYPE_NOT_A_TYPE dims: [ 4 ] } ]\noutput")
    )
    server = LocalTritonServer(ServerOptions(str(repo), required_models=["double"]))
    began = time.monotonic()
    try:
        with pytest.raises(ServerStartError) as failure:
            server.start()  # the config is parsed before tritonserver starts
    finally:
        server.stop()
    assert time.monotonic() - began < 5
    assert "TYPE_NOT_A_TYPE" in str(failure.value) and "double/config.pbtxt" in str(failure.value)


def _fails_to_get_ready(server: LocalTritonServer, match: str) -> None:
    """``server`` starts, then fails its readiness wait with ``match`` within 30 s, not the wait's 120 s."""
    began = time.monotonic()
    server.start()
    try:
        with pytest.raises(ServerStartError, match=match):
            server.wait_ready(120)
    finally:
        server.stop()
    assert time.monotonic() - began < 30


@pytest.mark.server
def test_missing_model_file_fails_fast_naming_the_file(tmp_path):
    repo = make_repository(tmp_path, models=("double",))
    (repo / "double" / "1" / "model.onnx").unlink()
    _fails_to_get_ready(LocalTritonServer(ServerOptions(str(repo), required_models=["double"])), "no model file")


@pytest.mark.server
def test_stub_that_cannot_start_fails_fast_instead_of_hanging(tmp_path):
    """A stub built for another Python never starts; Triton would wait forever in 'loading'."""
    repo = make_repository(tmp_path, models=("echo",))
    other = "3.8" if sys.version_info[:2] != (3, 8) else "3.9"
    server = LocalTritonServer(ServerOptions(str(repo), required_models=["echo"]), stub_python=other)
    _fails_to_get_ready(server, "libpython|stub")


@pytest.mark.server
def test_stop_leaves_no_process_or_shared_memory(tmp_path):
    repo = make_repository(tmp_path, models=("echo",))
    server = LocalTritonServer(ServerOptions(str(repo), required_models=["echo"]))
    server.start()
    server.wait_ready(120)
    children = psutil.Process(server.process.pid).children(recursive=True)
    assert children, "the python stub should be a child of the server"
    assert server.shm_regions(), "the server should have created its shm region"
    server.stop()
    assert not server.is_running()
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert server.shm_regions() == []
    assert not server.work_dir.exists(), f"the server's own work dir {server.work_dir} was left behind"
    assert "successfully loaded 'echo'" in server.logs(), "the log stays readable after stop"


@pytest.mark.server
def test_server_dies_with_its_parent(tmp_path):
    repo = make_repository(tmp_path, models=("double",))
    script = textwrap.dedent(f"""
        import sys, time
        from harness.serving.launchers import LocalTritonServer, ServerOptions
        server = LocalTritonServer(ServerOptions({str(repo)!r}, required_models=["double"]))
        server.start()
        server.wait_ready(120)
        print(server.process.pid, flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        server_pid = int(parent.stdout.readline())
        assert psutil.pid_exists(server_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 30
        while psutil.pid_exists(server_pid) and psutil.Process(server_pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "tritonserver outlived its parent"
            time.sleep(0.2)
    finally:
        parent.kill()


def test_docker_spec_for_ngc_cpu_mounts_repository_read_only(tmp_path):
    options = ServerOptions(
        str(tmp_path),
        required_models=["m"],
        model_config_name="cpu",
        backend_config=["onnxruntime,default-max-batch-size=4"],
    )
    server = DockerTritonServer(options, profile=ngc_profile())
    spec = server.container_spec()
    assert spec["image"].startswith("nvcr.io/nvidia/tritonserver:") and spec["image"].endswith("-py3")
    assert spec["volumes"][str(tmp_path.resolve())] == {"bind": "/models", "mode": "ro"}
    assert set(spec["ports"]) == {"8000/tcp", "8001/tcp", "8002/tcp"}
    assert all(host == "127.0.0.1" for host, _ in spec["ports"].values())
    assert "--model-config-name=cpu" in spec["command"]
    assert "--backend-config=onnxruntime,default-max-batch-size=4" in spec["command"]
    assert spec["devices"] == []


def test_docker_spec_for_ascend_npu(tmp_path):
    options = ServerOptions(
        str(tmp_path), target="npu", model_config_name="npu", backend_config=['npu_ge,ge.aicoreNum="12|10"']
    )
    server = DockerTritonServer(options, profile=ascend_profile(image="example/npu_ge:8.3", device_ids=[2, 3]))
    spec = server.container_spec()
    devices = [d.split(":")[0] for d in spec["devices"]]
    assert devices == ["/dev/davinci2", "/dev/davinci3", "/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]
    assert "--allow-grpc=false" in spec["command"] and server.grpc_url is None
    assert "8001/tcp" not in spec["ports"]
    assert '--backend-config=npu_ge,ge.aicoreNum="12|10"' in spec["command"]
    assert server.profile.stub_python == "3.10"
    assert spec["volumes"]["/usr/local/Ascend/driver"]["mode"] == "ro"


def test_unknown_mode_and_missing_url_are_clear_errors():
    with pytest.raises(ValueError, match="unknown server mode"):
        create_server("kubernetes", ServerOptions("x"))
    env = dict(os.environ)
    os.environ.pop("TRITON_SERVER_URL", None)
    try:
        with pytest.raises(ValueError, match="needs a server URL"):
            create_server("external", ServerOptions("x"))
    finally:
        os.environ.clear()
        os.environ.update(env)


def test_npu_target_of_a_manifest_reaches_the_container_spec():
    from harness.deployments import get_deployment

    deployment = get_deployment("resnet_npu")
    table = deployment.manifest.target["npu"]
    server = DockerTritonServer(deployment.server_options("npu"))
    spec = server.container_spec()
    assert spec["image"] == table.image
    assert f"--model-config-name={table.model_config_name}" in spec["command"]
    assert [d.split(":")[0] for d in spec["devices"]][: len(table.device_ids)] == [
        f"/dev/davinci{i}" for i in table.device_ids
    ]
    assert server.profile.stub_python == stub_python_of("npu")  # the one table of stub Pythons
    assert "--allow-grpc=false" in spec["command"]
    assert spec["volumes"][str(deployment.model_repository)] == {"bind": "/models", "mode": "ro"}


def test_packed_envs_of_a_deployment_are_mounted_where_configs_look(tmp_path):
    """configs say $$TRITON_MODEL_DIRECTORY/../../envs/...; with /models/<model> that is /envs."""
    import shutil

    from harness.deployments import ENVS_MOUNT, load_deployment

    copy = tmp_path / "resnet_npu"
    shutil.copytree(PROJECT_ROOT / "deployments" / "resnet_npu", copy, ignore=shutil.ignore_patterns("*.onnx", "envs"))
    (copy / "envs").mkdir()
    spec = DockerTritonServer(load_deployment(copy).server_options("npu")).container_spec()
    assert spec["volumes"][str((copy / "envs").resolve())] == {"bind": ENVS_MOUNT, "mode": "ro"}
    config = (copy / "model_repository" / "resnet50_preprocess" / "configs" / "npu.pbtxt").read_text()
    assert "$$TRITON_MODEL_DIRECTORY/../../envs/npu.tar.gz" in config
