"""Packed Python-backend environments: pack a tiny env, refuse mismatches before a server starts.

The packing tests build a real env (numpy<2 + tinydb, a small pure-Python package the
project venv does not have) with venv + venv-pack; serving from a packed env is docker mode's
(test_docker_packed_envs.py).
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
import time
from pathlib import Path

import pytest

from harness import repository
from harness.deployments import Deployment, discover
from harness.manifest import Manifest
from harness.serving import packenv
from harness.serving.launchers import LocalTritonServer
from harness.serving.launchers.base import ServerOptions, ServerStartError
from harness.serving.launchers.docker_images import ascend_profile, ngc_profile
from harness.tests.repositories import make_repository, write_whoami

MARKER = "tinydb"

RECIPE = """
name: packenv_test
dependencies:
  - python=3.11
  - pip
  - pip:
      - numpy<2
      - {marker}
python_by_target:
  cpu: local
"""


def write_deployment(root, pip=("numpy<2", MARKER), python_cpu="local"):
    """A minimal deployment folder: whoami (python) + double (onnxruntime) and its environment.yml."""
    root.mkdir(parents=True, exist_ok=True)
    repo = make_repository(root, models=("double",))
    write_whoami(repo)
    pip_lines = "\n".join(f"      - {p}" for p in pip)
    (root / "environment.yml").write_text(
        f"name: {root.name}\ndependencies:\n  - python=3.11\n  - pip\n  - pip:\n{pip_lines}\n"
        f"python_by_target:\n  cpu: {python_cpu}\n"
    )
    (root / "deployment.toml").write_text(f'name = "{root.name}"\nentry_models = ["whoami", "double"]\n')
    return Deployment(path=root.resolve(), manifest=Manifest(name=root.name, entry_models=["whoami", "double"]))


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """A tiny deployment and its env packed for the local server."""
    deployment = write_deployment(tmp_path_factory.mktemp("packenv") / "tiny")
    result = packenv.pack(deployment.path, "cpu", compress_level=1, compile_bytecode=False, log=lambda _: None)
    return deployment, result


def test_pack_builds_a_tarball_with_the_stubs_python_and_numpy_below_2(packed):
    deployment, result = packed
    tarball = deployment.path / "envs" / "cpu.tar.gz"
    assert result.output == str(tarball) and tarball.stat().st_size == result.size_bytes > 0
    assert result.tool == "venv-pack"
    assert result.python == packenv.local_python()
    assert MARKER in result.packages and int(result.packages["numpy"].split(".")[0]) < 2
    assert json.loads(packenv.sidecar(tarball).read_text())["tool"] == result.tool
    packenv.sidecar(tarball).unlink()  # read the archive itself this time
    try:
        info = packenv.inspect_env(tarball)
    finally:
        packenv.sidecar(tarball).write_text(json.dumps({**result.__dict__}))
    assert (info.python, info.numpy) == (result.python, result.packages["numpy"])
    assert packenv.is_stale(tarball, packenv.load_recipe(deployment.path), "cpu") is None


@pytest.mark.server
def test_local_server_refuses_a_packed_env_and_names_docker_mode(packed, tmp_path):
    """Local mode serves Python models with the project's venv; a packed env is served in docker mode."""
    deployment, result = packed
    options = deployment.server_options("cpu", python_env=result.output, required_models=["whoami"])
    server = LocalTritonServer(options, work_dir=tmp_path)
    try:
        with pytest.raises(ServerStartError, match="--mode docker"):
            server.start()
        assert server.process is None
    finally:
        server.stop()


@pytest.mark.server
def test_env_of_another_python_is_refused_before_start_with_a_clear_message(tmp_path):
    """A config naming an env of another Python stops the local server before it starts."""
    repo = make_repository(tmp_path, models=("echo",))
    config = repo / "echo" / "config.pbtxt"
    reference = "$$TRITON_MODEL_DIRECTORY/../../envs/cpu.tar.gz"
    repository.write_config(
        repository.set_parameter(repository.read_config(config), "EXECUTION_ENV_PATH", reference), config
    )
    (tmp_path / "envs").mkdir()
    _fake_env(tmp_path / "envs" / "cpu.tar.gz", "3.6", "1.19.5")
    began = time.monotonic()
    server = LocalTritonServer(ServerOptions(str(repo), required_models=["echo"]), work_dir=tmp_path / "served")
    try:
        with pytest.raises(ServerStartError) as refused:
            server.start()
        assert server.process is None
    finally:
        server.stop()
    assert time.monotonic() - began < 15
    message = str(refused.value)
    assert "is Python 3.6" in message and f"stub is Python {packenv.local_python()}" in message
    assert "make pack-env DEPLOYMENT=<name> TARGET=cpu" in message
    # The pre-flight alone finds the same problem, without a server.
    assert packenv.check_repository(repo, packenv.local_python()) == [message.splitlines()[-1].strip()]


def test_missing_python_is_a_clear_error_before_anything_is_built(tmp_path):
    deployment = write_deployment(tmp_path / "nopython", python_cpu='"3.99"')
    began = time.monotonic()
    with pytest.raises(packenv.PackEnvError, match=r"(?s)Python 3\.99 is needed .*pyenv install 3\.99"):
        packenv.pack(deployment.path, "cpu", log=lambda _: None)
    assert time.monotonic() - began < 30
    assert not (deployment.path / "envs" / "cpu.tar.gz").exists()


def _fake_env(path, python: str, numpy: str | None) -> None:
    """A tarball laid out like a venv-pack env (no sidecar): enough for the pre-flight."""
    with tarfile.open(path, "w:gz") as archive:
        names = ["pyvenv.cfg", f"lib/python{python}/site-packages/x.py"]
        if numpy:
            names.append(f"lib/python{python}/site-packages/numpy-{numpy}.dist-info/METADATA")
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = 1
            archive.addfile(info, io.BytesIO(b"x"))


def test_preflight_names_each_known_failure(tmp_path):
    repo = make_repository(tmp_path, models=("echo",))
    config = repo / "echo" / "config.pbtxt"
    base = config.read_text()

    def with_env(value: str) -> None:
        repository.write_config(
            repository.set_parameter(repository.read_config(config), "EXECUTION_ENV_PATH", value), config
        )

    local = packenv.local_python()
    envs = tmp_path / "envs"
    envs.mkdir()
    _fake_env(envs / "ok.tar.gz", local, "1.26.4")
    _fake_env(envs / "numpy2.tar.gz", local, "2.1.0")
    _fake_env(envs / "py36.tar.gz", "3.6", "1.19.5")
    cases = {
        "$$TRITON_MODEL_DIRECTORY/../../envs/ok.tar.gz": None,
        "envs/ok.tar.gz": "is relative",
        "$TRITON_MODEL_DIRECTORY/../../envs/ok.tar.gz": "two dollar signs",
        "$$TRITON_MODEL_DIRECTORY/../../envs/absent.tar.gz": "does not exist; build it with `make pack-env",
        "$$TRITON_MODEL_DIRECTORY/../../envs/numpy2.tar.gz": "numpy 2.1.0",
        "$$TRITON_MODEL_DIRECTORY/../../envs/py36.tar.gz": f"is Python 3.6 but the server's Python backend stub is Python {local}",
    }
    for value, expected in cases.items():
        config.write_text(base)
        with_env(value)
        problems = packenv.check_repository(repo, local)
        if expected is None:
            assert problems == [], problems
        else:
            assert len(problems) == 1 and expected in problems[0], (value, problems)
    config.write_text(base)
    assert packenv.check_repository(repo, local) == []


def test_packed_repository_touches_only_python_backend_configs(tmp_path):
    repo = make_repository(tmp_path / "src")
    (repo / "echo" / "configs").mkdir()
    (repo / "echo" / "configs" / "npu.pbtxt").write_text(
        (repo / "echo" / "config.pbtxt").read_text()
        + 'parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "/opt/old.tar.gz" } }\n'
    )
    tarball = tmp_path / "npu.tar.gz"
    _fake_env(tarball, "3.10", "1.26.4")
    before = {p: p.read_text() for p in repo.rglob("*.pbtxt")}
    copy = packenv.packed_repository(repo, tarball, tmp_path / "out")
    reference = "$$TRITON_MODEL_DIRECTORY/../../envs/npu.tar.gz"

    def env_path(path):
        return repository.parameter(repository.read_config(path), "EXECUTION_ENV_PATH")

    assert env_path(copy / "echo" / "config.pbtxt") == reference
    npu_text = (copy / "echo" / "configs" / "npu.pbtxt").read_text()
    assert env_path(copy / "echo" / "configs" / "npu.pbtxt") == reference and npu_text.count("EXECUTION_ENV_PATH") == 1
    assert env_path(copy / "double" / "config.pbtxt") is None
    assert (tmp_path / "out" / "envs" / "npu.tar.gz").exists()
    assert repository.python_models(copy) == ["echo"]
    assert {p: p.read_text() for p in repo.rglob("*.pbtxt")} == before, "the original repository must not change"
    assert packenv.check_repository(copy, "3.10", model_config_name="npu") == []


def test_a_conda_only_dependency_is_refused_with_where_to_list_it(tmp_path):
    """venv-pack is the one tool: a dependency outside ``pip:`` could never reach the env."""
    deployment = write_deployment(tmp_path / "condadep")
    recipe_path = deployment.path / "environment.yml"
    recipe_path.write_text(recipe_path.read_text().replace("  - pip\n", "  - pip\n  - libstdcxx-ng\n", 1))
    with pytest.raises(packenv.PackEnvError, match="libstdcxx-ng.*under `pip:`"):
        packenv.load_recipe(deployment.path)


DEPLOYMENTS = [d for d in discover() if (d.path / "environment.yml").exists()]


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=[d.name for d in DEPLOYMENTS])
def test_deployment_recipes_are_packable(deployment):
    """Each recipe: numpy<2, triton_helpers, a Python per target matching the servers, torch only when imported."""
    recipe = packenv.load_recipe(deployment.path)
    assert "numpy<2" in recipe.pip, f"{recipe.path}: pin numpy<2"
    from harness import PROJECT_ROOT

    helpers = str(PROJECT_ROOT / "triton_helpers")
    assert helpers in recipe.pip + recipe.pip_no_deps, f"{recipe.path}: install ../../triton_helpers"
    assert str(PROJECT_ROOT) not in recipe.pip + recipe.pip_no_deps, (
        f"{recipe.path}: install triton_helpers, not the project"
    )
    assert recipe.python_for("cpu") == packenv.local_python()
    assert recipe.python_for("ngc") == ngc_profile().stub_python
    assert recipe.python_for("npu") == ascend_profile().stub_python
    sources = "".join(p.read_text() for p in deployment.model_repository.glob("*/1/model.py"))
    wants_torch = "import torch" in sources
    has_torch = any(p.split("=")[0].split("<")[0].strip() == "torch" for p in recipe.pip)
    assert has_torch == wants_torch, f"{recipe.path}: torch listed={has_torch}, imported by a model.py={wants_torch}"


def test_every_deployment_with_python_models_has_a_recipe():
    missing = [
        d.name
        for d in discover()
        if repository.python_models(d.model_repository) and not (d.path / "environment.yml").exists()
    ]
    assert not missing, f"deployments with Python-backend models but no environment.yml: {missing}"


def test_cli_reports_a_target_whose_python_is_absent(capsys):
    name = DEPLOYMENTS[0].name if DEPLOYMENTS else pytest.skip("no deployment recipe")
    from harness.__main__ import main

    assert (
        main(
            [
                "pack-env",
                name,
                "--target",
                "npu",
                "--python",
                "/nonexistent/python3.10",
                "--output",
                "/tmp/never-written.tar.gz",
                "--force",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "Python 3.10 is needed for target npu" in err and "/nonexistent/python3.10" in err


def test_a_python_of_another_version_is_refused_before_anything_is_installed(tmp_path):
    """``--python`` of the wrong minor version: the venv it made says so, and nothing is packed."""
    deployment = write_deployment(tmp_path / "wrongpython", python_cpu='"3.99"')
    with pytest.raises(packenv.PackEnvError, match=rf"(?s)Python 3\.99 is needed .*is Python {sys.version_info[0]}\."):
        packenv.pack(deployment.path, "cpu", python=sys.executable, log=lambda _: None)
    assert not (deployment.path / "envs" / "cpu.tar.gz").exists()


def test_local_folders_are_installed_from_copies_without_build_outputs(tmp_path):
    """pip builds a local folder in place and setuptools packs an older build/lib too: the env
    must get the folder's current files only."""
    from harness.serving.packenv import _clean_copies

    source = tmp_path / "helpers"
    (source / "build" / "lib" / "helpers").mkdir(parents=True)
    (source / "build" / "lib" / "helpers" / "removed_module.py").write_text("")
    (source / "helpers.egg-info").mkdir()
    (source / "a.py").write_text("X = 1\n")
    [copy, requirement] = _clean_copies([str(source), "numpy<2"], tmp_path / "copies")
    assert requirement == "numpy<2"
    assert sorted(p.name for p in Path(copy).iterdir()) == ["a.py"]
