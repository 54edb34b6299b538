"""Packed envs in docker mode: a Python model runs in the deployment's packed env mounted beside a
generated repository copy; every recipe packs for the image's stub; an env whose baked-in sources
changed is stale."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.serving.launchers import ServerOptions
from harness.serving.launchers.docker import DockerTritonServer
from harness.serving.launchers.docker_images import cpu_image_profile
from harness.tests.docker_fixtures import needs_engine
from harness.tests.repositories import ask_whoami, write_whoami


@pytest.mark.server
@needs_engine
def test_python_model_runs_in_the_mounted_packed_env(tmp_path, image):
    """A packed env (harness.serving.packenv, target cpu-image) mounted beside a generated repository copy:
    the stub runs in it (numpy imported from the unpacked env), on the image's Python 3.11."""
    from harness.serving import packenv

    deployment = tmp_path / "demo"
    write_whoami(deployment / "model_repository")
    (deployment / "environment.yml").write_text(
        "name: demo\ndependencies:\n  - pip\n  - pip:\n      - numpy<2\npython_by_target:\n  cpu-image: '3.11'\n"
    )
    tarball = packenv.default_output(deployment, "cpu-image")
    packenv.pack(packenv.load_recipe(deployment), "cpu-image", tarball, log=lambda *_: None)
    options = ServerOptions(
        str(deployment / "model_repository"), required_models=["whoami"], image=image, python_env=str(tarball)
    )
    server = DockerTritonServer(options)
    server.start()
    try:
        server.wait_ready(120)
        seen = ask_whoami(server.http_url, "numpy")
        assert seen["modules"]["numpy"].startswith("/tmp/python_env_"), seen  # not /opt/venv: the packed env
        assert seen["python"] == "3.11", seen
        spec = server.container_spec()
        assert spec["volumes"][str(server.envs_dir.resolve())] == {"bind": "/envs", "mode": "ro"}
    finally:
        server.stop()
    assert server.work_dir is None


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
    # pip's in-tree build of the source folder (build/, *.egg-info) is not a change of the sources
    (tmp_path / "helpers" / "build" / "lib").mkdir(parents=True)
    (tmp_path / "helpers" / "build" / "lib" / "a.py").write_text("X = 1\n")
    (tmp_path / "helpers" / "helpers.egg-info").mkdir()
    (tmp_path / "helpers" / "helpers.egg-info" / "SOURCES.txt").write_text("a.py\n")
    assert packenv.is_stale(tarball, recipe, "cpu-image") is None
    (tmp_path / "helpers" / "a.py").write_text("X = 2\n")
    assert "local sources changed" in packenv.is_stale(tarball, recipe, "cpu-image")
