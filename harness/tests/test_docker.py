"""Docker mode for real: the CPU image of ``make image`` serving tiny repositories, and the
launcher's one-line errors before any wait (engine, image, port, packed env Python).

Tests that need an engine are skipped, with the reason, only when no Docker engine answers
(`make docker-engine` starts one); where an engine answers, the image must have been built
(`make image`): a missing image is a failure, not a skip. CI (.ci/run) starts the engine and
builds the image before running these.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from harness.serving.launchers import ServerOptions, create_server
from harness.serving.launchers.docker import (
    CPU_IMAGE,
    OWNER_LABEL,
    OWNER_VALUE,
    PID_LABEL,
    DockerStartError,
    DockerTritonServer,
    cpu_image_profile,
    engine,
)
from harness.serving.launchers.local import free_port
from harness.tests.repositories import make_repository

START_BUDGET_S = 15  # every pre-flight error must come this fast: no waiting for readiness


def _engine_or_none():
    try:
        return engine(timeout_s=5)
    except DockerStartError:
        return None


ENGINE = _engine_or_none()
needs_engine = pytest.mark.skipif(ENGINE is None, reason="no Docker engine answers: `make docker-engine` starts one")


@pytest.fixture(scope="module")
def image(request) -> str:
    """The CPU image (``--image`` or the default); must exist where an engine answers."""
    name = request.config.getoption("--image") or CPU_IMAGE
    try:
        ENGINE.images.get(name)
    except Exception:  # noqa: BLE001
        pytest.fail(f"a Docker engine answers but image {name} is missing: build it with `make image`")
    return name


def _assert_one_line_error(server, *needles: str) -> str:
    began = time.monotonic()
    with pytest.raises(DockerStartError) as caught:
        server.start()
    elapsed = time.monotonic() - began
    message = str(caught.value)
    assert "\n" not in message, f"not one line: {message!r}"
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    assert elapsed < START_BUDGET_S, f"the error took {elapsed:.1f} s"
    assert server.container is None
    return message


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


def test_no_engine_is_a_one_line_error_naming_make_docker_engine(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    server = DockerTritonServer(ServerOptions(str(make_repository(tmp_path, ("double",))), required_models=["double"]))
    _assert_one_line_error(server, "no Docker engine answers", "make docker-engine")


@needs_engine
def test_missing_image_of_this_project_says_make_image(tmp_path):
    options = ServerOptions(str(make_repository(tmp_path, ("double",))), image="triton-harness/tritonserver-cpu:absent")
    server = DockerTritonServer(options)
    assert server.profile.built_here
    _assert_one_line_error(server, "triton-harness/tritonserver-cpu:absent", "make image")


@needs_engine
def test_image_that_cannot_be_pulled_says_make_image(tmp_path):
    options = ServerOptions(
        str(make_repository(tmp_path, ("double",))), image="registry.invalid/tritonserver:never-pushed"
    )
    _assert_one_line_error(DockerTritonServer(options), "cannot be pulled", "make image")


@needs_engine
@pytest.mark.parametrize("which", ["http", "grpc", "metrics"])
def test_port_in_use_is_a_one_line_error(tmp_path, image, which):
    ports = {"http": free_port(), "grpc": free_port(), "metrics": free_port()}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ports[which]))
        taken.listen()
        options = ServerOptions(str(make_repository(tmp_path, ("double",))), image=image)
        server = DockerTritonServer(options, ports=(ports["http"], ports["grpc"], ports["metrics"]))
        _assert_one_line_error(server, f"port {ports[which]}", "is in use", f"--{which}-port")


@needs_engine
def test_packed_env_of_another_python_is_a_one_line_error(tmp_path, image):
    (tmp_path / "envs").mkdir()
    tarball = _python310_env(tmp_path / "envs" / "py310.tar.gz")
    options = ServerOptions(str(make_repository(tmp_path, ("echo",))), image=image, python_env=str(tarball))
    _assert_one_line_error(DockerTritonServer(options), "Python 3.10", "stub is Python 3.11", "make pack-env")


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
    _assert_one_line_error(DockerTritonServer(options), "Python 3.10", "stub is Python 3.11")


def test_missing_packed_env_says_make_pack_env(tmp_path, monkeypatch):
    """No engine needed: the env is checked after engine and image, so fake those two."""
    server = DockerTritonServer(
        ServerOptions(
            str(make_repository(tmp_path, ("echo",))), python_env=str(tmp_path / "demo" / "envs" / "cpu-image.tar.gz")
        )
    )
    with pytest.raises(DockerStartError, match=r"make pack-env DEPLOYMENT=demo TARGET=cpu-image"):
        server._prepare_repository()


# --------------------------------------------------------------------------- end to end in the image

WHERE_CONFIG = """
name: "where"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

WHERE_MODEL = """
import json, sys
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        text = json.dumps({"numpy": np.__file__, "version": sys.version.split()[0], "prefix": sys.prefix})
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([text.encode()], dtype=np.object_))])
                for _ in requests]
"""


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


@needs_engine
def test_tiny_repository_served_in_the_cpu_image(tmp_path, image):
    """onnxruntime (the image's Python backend) and python models; ports honoured; labels read;
    the crashed run's container removed at start; ours removed at stop."""
    client = ENGINE
    leftover = _leftover(client, image)
    repo = make_repository(tmp_path)
    ports = (free_port(), free_port(), free_port())
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
    from harness.variants import variant_repository

    repo = make_repository(tmp_path / "src", models=("double",))
    variant = variant_repository(repo, {"double": {"instance_count": 2}}, tmp_path / "variant")
    assert (variant / "double" / "1").is_symlink()
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


@needs_engine
def test_python_model_runs_in_the_mounted_packed_env(tmp_path, image):
    """A packed env (harness.serving.packenv, target cpu-image) mounted beside a generated repository copy:
    the stub runs in it (numpy imported from the unpacked env), on the image's Python 3.11."""
    from harness.serving import packenv

    deployment = tmp_path / "demo"
    (deployment / "model_repository" / "where" / "1").mkdir(parents=True)
    (deployment / "model_repository" / "where" / "config.pbtxt").write_text(WHERE_CONFIG)
    (deployment / "model_repository" / "where" / "1" / "model.py").write_text(WHERE_MODEL)
    (deployment / "environment.yml").write_text(
        "name: demo\ndependencies:\n  - pip\n  - pip:\n      - numpy<2\npython_by_target:\n  cpu-image: '3.11'\n"
    )
    tarball = packenv.default_output(deployment, "cpu-image")
    packenv.pack(packenv.load_recipe(deployment), "cpu-image", tarball, log=lambda *_: None)
    options = ServerOptions(
        str(deployment / "model_repository"), required_models=["where"], image=image, python_env=str(tarball)
    )
    server = DockerTritonServer(options)
    server.start()
    try:
        server.wait_ready(120)
        http = httpclient.InferenceServerClient(server.http_url)
        tensor = httpclient.InferInput("IN", [1], "FP32")
        tensor.set_data_from_numpy(np.zeros(1, dtype=np.float32))
        seen = json.loads(http.infer("where", [tensor]).as_numpy("OUT")[0])
        http.close()
        assert seen["numpy"].startswith("/tmp/python_env_"), seen  # not /opt/venv: the packed env
        assert seen["version"].startswith("3.11."), seen
        spec = server.container_spec()
        assert spec["volumes"][str(server.envs_dir.resolve())] == {"bind": "/envs", "mode": "ro"}
    finally:
        server.stop()
    assert server.work_dir is None


def test_cpu_target_defaults_to_the_image_of_make_image(tmp_path):
    server = DockerTritonServer(ServerOptions(str(tmp_path)))
    assert server.profile.image == CPU_IMAGE and server.profile.stub_python == "3.11"
    assert cpu_image_profile().pack_target == "cpu-image"
    spec = server.container_spec()
    assert spec["labels"][OWNER_LABEL] == OWNER_VALUE and spec["labels"][PID_LABEL]
    assert "remove" not in spec  # removed by stop(), after its logs were read


# --------------------------------------------------------------------------- the CLI in docker mode


@needs_engine
def test_cli_serve_docker_names_the_missing_image(capsys):
    from harness.__main__ import main

    rc = main(
        [
            "serve",
            "resnet_npu",
            "--mode",
            "docker",
            "--image",
            "triton-harness/tritonserver-cpu:absent",
            "--http-port",
            str(free_port()),
            "--grpc-port",
            str(free_port()),
            "--metrics-port",
            str(free_port()),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "make image" in err[0], err


@needs_engine
def test_cli_serve_docker_honours_the_port_options(capsys, image):
    """The ports given on the command line are the ones checked (and published): a taken --grpc-port is named."""
    from harness.__main__ import main

    http, metrics = free_port(), free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        grpc = taken.getsockname()[1]
        rc = main(
            [
                "serve",
                "resnet_npu",
                "--mode",
                "docker",
                "--image",
                image,
                "--http-port",
                str(http),
                "--grpc-port",
                str(grpc),
                "--metrics-port",
                str(metrics),
            ]
        )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and f"port {grpc} (gRPC)" in err[0] and "--grpc-port" in err[0], err


# --------------------------------------------------------------------------- packed envs for the image


def test_every_recipe_packs_for_the_images_stub():
    from harness.deployments import discover
    from harness.serving import packenv

    for deployment in discover():
        if (deployment.path / packenv.RECIPE).exists():
            recipe = packenv.load_recipe(deployment.path)
            assert recipe.python_for("cpu-image") == cpu_image_profile().stub_python, recipe.path
            assert any(Path(s).name == "triton_helpers" for s in recipe.sources), (
                f"{recipe.path}: list ../../triton_helpers under sources (baked into the env)"
            )


def test_env_is_stale_when_its_baked_in_sources_change(tmp_path):
    """triton_helpers is copied into the env: editing it must repack, or docker mode serves old code."""
    from harness.serving import packenv

    (tmp_path / "helpers").mkdir()
    (tmp_path / "helpers" / "a.py").write_text("X = 1\n")
    (tmp_path / "environment.yml").write_text(
        "name: demo\ndependencies:\n  - pip:\n      - numpy<2\n"
        "python_by_target:\n  cpu-image: '3.11'\nsources:\n  - ./helpers\n"
    )
    recipe = packenv.load_recipe(tmp_path)
    tarball = tmp_path / "envs" / "cpu-image.tar.gz"
    tarball.parent.mkdir()
    tarball.write_bytes(b"not read")
    packenv.sidecar(tarball).write_text(
        json.dumps(
            {
                "recipe_sha256": recipe.digest(),
                "python": "3.11",
                "target": "cpu-image",
                "python_prefix": "/usr",
                "packer": packenv.PACKER_VERSION,
                "sources_sha256": recipe.sources_digest(),
            }
        )
    )
    assert packenv.is_stale(tarball, recipe, "cpu-image") is None
    (tmp_path / "helpers" / "a.py").write_text("X = 2\n")
    assert "local sources changed" in packenv.is_stale(tarball, recipe, "cpu-image")
