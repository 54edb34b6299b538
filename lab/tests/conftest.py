"""Fixtures shared by the lab's tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def swarm_image(request) -> str:
    """The CPU image for a swarm run: skipped unless in docker mode with an engine; fails when it is missing."""
    from harness.serving.launchers.docker_engine import DockerStartError, engine
    from harness.serving.launchers.docker_images import CPU_IMAGE

    if request.config.getoption("--server-mode") != "docker":
        pytest.skip("a swarm run needs the image and the packed envs: make test-docker (--server-mode docker)")
    try:
        docker_engine = engine(timeout_s=5)
    except DockerStartError:
        pytest.skip("no Docker engine answers: `make docker-engine` starts one")
    image = request.config.getoption("--image") or CPU_IMAGE
    try:
        docker_engine.images.get(image)
    except Exception:  # noqa: BLE001
        pytest.fail(f"a Docker engine answers but image {image} is missing: build it with `make image`")
    return image


@pytest.fixture(scope="session")
def kustomized():
    """``kustomized(folder)``: the objects ``kubectl kustomize <folder>`` renders (Debian's kubernetes-client:
    `make kubectl`), cached per folder."""
    import functools
    import shutil
    import subprocess

    import yaml

    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is missing: `make kubectl` installs Debian's kubernetes-client")

    @functools.cache
    def render(folder) -> tuple[dict, ...]:
        done = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return tuple(yaml.safe_load_all(done.stdout))

    return render
