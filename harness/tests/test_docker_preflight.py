"""Docker mode's one-line errors before any wait: no engine, a missing image (of this project, or one
that cannot be pulled), a port in use, a packed env of another Python, a missing packed env; the
same through the command line (``python -m harness serve --mode docker``)."""

from __future__ import annotations

import socket
import tarfile
from pathlib import Path

import pytest

from harness.serving.launchers import ServerOptions
from harness.serving.launchers.docker import DockerTritonServer
from harness.serving.launchers.docker_engine import OWNER_LABEL, OWNER_VALUE, PID_LABEL, DockerStartError
from harness.serving.launchers.docker_images import CPU_IMAGE, cpu_image_profile
from harness.tests.docker_fixtures import assert_one_line_error, needs_engine
from harness.tests.repositories import make_repository
from triton_gate.serve import free_port, free_ports


def _python310_env(path: Path) -> Path:
    """A tarball that looks like a venv-pack env of Python 3.10 (what inspect_env reads)."""
    member = path.parent / "METADATA"
    member.write_text("Name: numpy\nVersion: 1.26.4\n")
    with tarfile.open(path, "w:gz") as archive:
        archive.add(member, "lib/python3.10/site-packages/numpy-1.26.4.dist-info/METADATA")
        cfg = path.parent / "pyvenv.cfg"
        cfg.write_text("home = /usr/bin\nversion = 3.10.12\n")
        archive.add(cfg, "pyvenv.cfg")
    return path


# --------------------------------------------------------------------------- one-line errors


@pytest.mark.server  # start() is called (and must fail at once)
def test_no_engine_is_a_one_line_error_naming_make_docker_engine(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    server = DockerTritonServer(ServerOptions(str(make_repository(tmp_path, ("double",))), required_models=["double"]))
    assert_one_line_error(server, "no Docker engine answers", "make docker-engine")


@pytest.mark.server
@needs_engine
def test_missing_image_of_this_project_says_make_image(tmp_path):
    options = ServerOptions(str(make_repository(tmp_path, ("double",))), image="triton-harness/tritonserver-cpu:absent")
    server = DockerTritonServer(options)
    assert server.profile.built_here
    assert_one_line_error(server, "triton-harness/tritonserver-cpu:absent", "make image")


@pytest.mark.server
@needs_engine
def test_image_that_cannot_be_pulled_says_make_image(tmp_path):
    options = ServerOptions(
        str(make_repository(tmp_path, ("double",))), image="registry.invalid/tritonserver:never-pushed"
    )
    assert_one_line_error(DockerTritonServer(options), "cannot be pulled", "make image")


@pytest.mark.server
@needs_engine
@pytest.mark.parametrize("which", ["http", "grpc", "metrics"])
def test_port_in_use_is_a_one_line_error(tmp_path, image, which):
    ports = dict(zip(("http", "grpc", "metrics"), free_ports(3)))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ports[which]))
        taken.listen()
        options = ServerOptions(str(make_repository(tmp_path, ("double",))), image=image)
        server = DockerTritonServer(options, ports=(ports["http"], ports["grpc"], ports["metrics"]))
        assert_one_line_error(server, f"port {ports[which]}", "is in use", f"--{which}-port")


@pytest.mark.server
@needs_engine
def test_packed_env_of_another_python_is_a_one_line_error(tmp_path, image):
    (tmp_path / "envs").mkdir()
    tarball = _python310_env(tmp_path / "envs" / "py310.tar.gz")
    options = ServerOptions(str(make_repository(tmp_path, ("echo",))), image=image, python_env=str(tarball))
    assert_one_line_error(DockerTritonServer(options), "Python 3.10", "stub is Python 3.11", "make pack-env")


@pytest.mark.server
@needs_engine
def test_repository_env_path_of_another_python_is_a_one_line_error(tmp_path, image):
    """A config of the repository itself pointing at an env built for another stub (e.g. NGC's 3.12)."""
    repo = make_repository(tmp_path, ("echo",))
    (tmp_path / "envs").mkdir()
    _python310_env(tmp_path / "envs" / "npu.tar.gz")
    config = repo / "echo" / "config.pbtxt"
    config.write_text(
        config.read_text() + 'parameters { key: "EXECUTION_ENV_PATH" value: '
        '{ string_value: "$$TRITON_MODEL_DIRECTORY/../../envs/npu.tar.gz" } }\n'
    )
    options = ServerOptions(str(repo), image=image, mounts={str(tmp_path / "envs"): "/envs"})
    assert_one_line_error(DockerTritonServer(options), "Python 3.10", "stub is Python 3.11")


def test_missing_packed_env_says_make_pack_env(tmp_path, monkeypatch):
    """No engine needed: the env is checked after engine and image, so fake those two."""
    server = DockerTritonServer(
        ServerOptions(
            str(make_repository(tmp_path, ("echo",))), python_env=str(tmp_path / "demo" / "envs" / "cpu-image.tar.gz")
        )
    )
    with pytest.raises(DockerStartError, match=r"make pack-env DEPLOYMENT=demo TARGET=cpu-image"):
        server._prepare_repository()


def test_cpu_target_defaults_to_the_image_of_make_image(tmp_path):
    server = DockerTritonServer(ServerOptions(str(tmp_path)))
    assert server.profile.image == CPU_IMAGE and server.profile.stub_python == "3.11"
    assert cpu_image_profile().pack_target == "cpu-image"
    spec = server.container_spec()
    assert spec["labels"][OWNER_LABEL] == OWNER_VALUE and spec["labels"][PID_LABEL]
    assert "remove" not in spec  # removed by stop(), after its logs were read


# --------------------------------------------------------------------------- the CLI in docker mode


def _serve_in_docker(image: str, http: int, grpc: int, metrics: int) -> int:
    """``python -m harness serve resnet_npu --mode docker`` with ``image`` and these ports: its exit status."""
    from harness.__main__ import main

    ports = ["--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    return main(["serve", "resnet_npu", "--mode", "docker", "--image", image, *ports])


@pytest.mark.server
@needs_engine
def test_cli_serve_docker_names_the_missing_image(capsys):
    rc = _serve_in_docker("triton-harness/tritonserver-cpu:absent", free_port(), free_port(), free_port())
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "make image" in err[0], err


@pytest.mark.server
@needs_engine
def test_cli_serve_docker_honours_the_port_options(capsys, image):
    """The ports given on the command line are the ones checked (and published): a taken --grpc-port is named."""
    http, metrics = free_ports(2)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        grpc = taken.getsockname()[1]
        rc = _serve_in_docker(image, http, grpc, metrics)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and f"port {grpc} (gRPC)" in err[0] and "--grpc-port" in err[0], err
