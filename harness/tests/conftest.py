"""Fixtures of the docker-mode test modules (test_docker_*.py), shared without importing them."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def image(request) -> str:
    """The CPU image (``--image`` or the default); must exist where an engine answers."""
    from harness.serving.launchers.docker_images import CPU_IMAGE
    from harness.tests.docker_fixtures import ENGINE

    name = request.config.getoption("--image") or CPU_IMAGE
    try:
        ENGINE.images.get(name)
    except Exception:  # noqa: BLE001
        pytest.fail(f"a Docker engine answers but image {name} is missing: build it with `make image`")
    return name
