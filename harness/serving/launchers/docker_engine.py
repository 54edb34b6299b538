"""The Docker engine the launcher talks to, and the harness's own containers on it.

``engine`` answers a client or a one-line ``DockerStartError`` saying how to start an engine.
Containers the harness starts carry ``started-by=triton-harness`` plus the owner's PID and host;
``remove_leftovers`` removes those whose owner process is gone (a crashed run).
"""

from __future__ import annotations

import os
import socket

from harness.serving.launchers.base import ServerStartError

OWNER_LABEL = "started-by"
OWNER_VALUE = "triton-harness"
PID_LABEL = "triton-harness.pid"
HOST_LABEL = "triton-harness.host"


class DockerStartError(ServerStartError):
    """A container cannot be started; one line that says what to do."""


def one_line(text: object) -> str:
    """``text`` on one line (a Docker error can span several)."""
    return " ".join(str(text).split())


def engine(timeout_s: int = 10):
    """A Docker client whose engine answers, or DockerStartError saying how to start one."""
    import docker

    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env(timeout=timeout_s)
        client.ping()
        return client
    except Exception as exc:  # noqa: BLE001 - any failure here means "no engine"
        reason = one_line(exc)[:160]
        raise DockerStartError(
            f"no Docker engine answers at {host} ({reason}): start one with `make docker-engine` "
            f"(root, Debian) or point DOCKER_HOST at a running engine"
        ) from None


def image_labels(image: str) -> dict[str, str] | None:
    """Labels of a local image, or None when no engine answers or the image is not there."""
    try:
        return engine(timeout_s=5).images.get(image).labels or {}
    except Exception:  # noqa: BLE001
        return None


def _owner_alive(labels: dict[str, str]) -> bool:
    if labels.get(HOST_LABEL) not in (None, socket.gethostname()):
        return True  # another machine's container on a shared engine: not ours to judge
    try:
        pid = int(labels.get(PID_LABEL, ""))
    except ValueError:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_leftovers(client, log=None) -> list[str]:
    """Remove containers started by the harness whose owner process is gone (a crashed run)."""
    removed = []
    for container in client.containers.list(all=True, filters={"label": f"{OWNER_LABEL}={OWNER_VALUE}"}):
        if _owner_alive(container.labels):
            continue
        try:
            container.remove(force=True)
            removed.append(container.name)
        except Exception:  # noqa: BLE001 - removed meanwhile
            continue
    if removed and log:
        log(f"removed {len(removed)} container(s) left by a crashed harness run: {', '.join(removed)}")
    return removed
