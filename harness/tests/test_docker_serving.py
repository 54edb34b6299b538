"""Docker mode for real: the CPU image of ``make image`` serving tiny repositories (onnxruntime and
Python models, ports, labels, a crashed run's container removed) and a config variant of links."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from harness.serving.launchers import ServerOptions, create_server
from harness.serving.launchers.docker import DockerTritonServer
from harness.serving.launchers.docker_engine import OWNER_LABEL, OWNER_VALUE, PID_LABEL
from harness.tests.docker_fixtures import ENGINE, needs_engine
from harness.tests.repositories import make_repository
from triton_gate.serve import free_ports

pytestmark = pytest.mark.server


def _leftover(client, image) -> str:
    """A container labelled as a harness run whose owner process is dead (a crashed run)."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    container = client.containers.create(
        image,
        ["sleep", "600"],
        labels={OWNER_LABEL: OWNER_VALUE, PID_LABEL: str(dead.pid), "triton-harness.host": socket.gethostname()},
    )
    return container.id


def _assert_pinning_reaches_the_container(server) -> None:
    """HARNESS_PIN's server CPUs land on tritonserver inside the container, not only on docker-proxy."""
    import os

    import psutil

    from harness.measuring.pinning import pin_server

    cpu = max(os.sched_getaffinity(0))
    assert pin_server(server.grpc_url, {cpu}) >= 2
    server.container.reload()
    init = psutil.Process(server.container.attrs["State"]["Pid"])
    names = {}
    for process in [init, *init.children(recursive=True)]:
        names[process.name()] = process.cpu_affinity()
    assert "tritonserver" in names, f"container processes: {sorted(names)}"
    assert all(affinity == [cpu] for affinity in names.values()), names


@needs_engine
def test_tiny_repository_served_in_the_cpu_image(tmp_path, image):
    """onnxruntime (the image's Python backend) and python models; ports honoured; labels read;
    the crashed run's container removed at start; ours removed at stop."""
    client = ENGINE
    leftover = _leftover(client, image)
    repo = make_repository(tmp_path)
    ports = free_ports(3)
    server = create_server("docker", ServerOptions(str(repo), required_models=["double", "echo"], image=image))
    server = DockerTritonServer(server.options, ports=ports)
    began = time.monotonic()
    server.start()
    try:
        assert not client.containers.list(all=True, filters={"id": leftover}), "crashed run's container still there"
        waited = server.wait_ready(120)
        print(f"start to ready in docker: {time.monotonic() - began:.1f} s (wait {waited:.1f} s)")
        assert server.http_url == f"127.0.0.1:{ports[0]}" and server.grpc_url == f"127.0.0.1:{ports[1]}"
        assert server.metrics_url == f"127.0.0.1:{ports[2]}"
        http = httpclient.InferenceServerClient(server.http_url)
        data = np.arange(8, dtype=np.float32).reshape(2, 4)
        tensor = httpclient.InferInput("INPUT", [2, 4], "FP32")
        tensor.set_data_from_numpy(data)
        np.testing.assert_array_equal(http.infer("double", [tensor]).as_numpy("OUTPUT"), data * 2)
        http.close()
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        text = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
        text.set_data_from_numpy(np.array([[b"hello"]], dtype=np.object_))
        assert grpc.infer("echo", [text]).as_numpy("TEXT_OUT").reshape(-1)[0] == b"hello"
        grpc.close()
        _assert_pinning_reaches_the_container(server)
        assert "harness Python backend" in server.backend_implementation("onnxruntime")
        assert server.profile.stub_python == "3.11" and server.profile.pack_target == "cpu-image"
        info = server.describe()
        assert info["server_mode"] == "docker" and info["server_version"] == "2.51.0" and info["image"] == image
        container_id = server.container.id
    finally:
        server.stop()
    assert not client.containers.list(all=True, filters={"id": container_id}), "container not removed on stop"
    assert not client.containers.list(all=True, filters={"id": leftover})


@needs_engine
def test_config_variant_of_links_is_served_in_the_container(tmp_path, image):
    """A config variant (links to the original files, as benchmarks make them) must not dangle in the
    container: the launcher serves a hard-linked copy, with the variant's config."""
    from harness.manifest import ConfigOverrides
    from harness.variants import variant_repository

    repo = make_repository(tmp_path / "src", models=("double",))
    variant = variant_repository(repo, {"double": ConfigOverrides(instance_count=2)}, tmp_path / "variant")
    assert (variant / "double" / "1" / "model.onnx").is_symlink()
    server = DockerTritonServer(ServerOptions(str(variant), required_models=["double"], image=image))
    server.start()
    try:
        server.wait_ready(120)
        with httpclient.InferenceServerClient(server.http_url) as http:
            assert http.get_model_config("double")["instance_group"][0]["count"] == 2
            data = np.ones((1, 4), dtype=np.float32)
            tensor = httpclient.InferInput("INPUT", [1, 4], "FP32")
            tensor.set_data_from_numpy(data)
            np.testing.assert_array_equal(http.infer("double", [tensor]).as_numpy("OUTPUT"), data * 2)
    finally:
        server.stop()
