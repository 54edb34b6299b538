"""Many replicas for real: two replicas of embedding_cpu in the CPU image behind nginx (Docker
Compose), one killed with SIGKILL while requests are in flight; no request may be lost with the
client's stated retry policy (harness.tools.scaleout.run.RETRY), and traffic must move to the survivor.

Runs where a Docker engine answers (skipped with the reason otherwise, as test_docker.py); CI runs
it in the docker stage (`make test-docker`), after the image and the packed envs are built.
"""

from __future__ import annotations

import shutil

import pytest

from harness import PROJECT_ROOT
from harness.deployments import get_deployment
from harness.serving.launchers.docker_engine import DockerStartError, engine
from harness.serving.launchers.docker_images import CPU_IMAGE
from harness.tools.scaleout.compose import ScaleoutError, Stack, compose_command
from harness.tools.scaleout.run import RETRY, kill_under_load


def _engine_or_none():
    try:
        return engine(timeout_s=5)
    except DockerStartError:
        return None


ENGINE = _engine_or_none()
pytestmark = [
    pytest.mark.skipif(ENGINE is None, reason="no Docker engine answers: `make docker-engine` starts one"),
    pytest.mark.timeout(600),
]


@pytest.fixture(scope="module")
def stack(request):
    image = request.config.getoption("--image") or CPU_IMAGE
    try:
        ENGINE.images.get(image)
    except Exception:  # noqa: BLE001
        pytest.fail(f"a Docker engine answers but image {image} is missing: build it with `make image`")
    try:
        compose_command()
    except ScaleoutError as exc:  # `make test-docker` installs it first; a plain `make test` may lack it
        pytest.skip(str(exc))
    stack = Stack(
        get_deployment("embedding_cpu"),
        replicas=2,
        image=image,
        project="triton-scaleout-test",
        work_dir=PROJECT_ROOT / "build" / "scaleout" / "test-embedding_cpu",
    )
    stack.prepare()
    try:
        stack.up()
        yield stack
    finally:
        stack.down()
        shutil.rmtree(stack.work_dir, ignore_errors=True)


def test_killing_a_replica_under_load_loses_no_request(stack):
    result = kill_under_load(stack, concurrency=8, before_s=3.0, after_s=8.0, victim="t2", rejoin=False)
    client = result["client"]
    assert client["requests"] > 20, result
    # Both replicas served before the kill: the kill hit a replica that had traffic.
    assert result["served_by_before_kill"]["t1"] > 0 and result["served_by_before_kill"]["t2"] > 0, result
    assert client["lost"] == 0, (
        f"{client['lost']} requests lost with {RETRY['tries']} tries ({client['first_error']}): {result}"
    )
    # Something was absorbed by a retry (nginx's next-upstream or the client's): the kill was felt.
    assert result["nginx_failovers_total"] + client["retried_by_client"] >= 1, result
    # After the kill every answer came from the survivor, and it kept answering.
    assert result["served_by_after_kill"]["t2"] == 0 and result["served_by_after_kill"]["t1"] > 0, result
    assert result["after_kill"]["requests"] > 10, result
    assert result["traffic_moved_s"] < stack.fail_timeout_s, result


def test_replicas_serve_behind_the_front_gate(stack):
    """Through nginx, each replica's gate answers: the shared-memory API is closed (plain
    tritonserver lists and registers shared-memory regions for anyone), readiness is the gate's."""
    import requests

    assert stack.gate and stack.server_command()[:4] == ["python3", "-m", "harness.serving.gate", "serve"]
    for _ in range(4):  # round robin: both replicas answer
        status = requests.get(f"{stack.url}/v2/systemsharedmemory/status", timeout=10)
        assert status.status_code == 403 and "restricted" in status.text, status.text
    assert requests.get(f"{stack.url}/v2/health/ready", timeout=10).status_code == 200
