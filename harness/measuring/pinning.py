"""Pinning the server's process tree and the load generator to CPUs (``HARNESS_PIN``)."""

from __future__ import annotations

import os
from pathlib import Path

#: ``HARNESS_PIN="server=0 generator=1"``: the server's process tree and this generator pinned per level.
PIN_ENV = "HARNESS_PIN"


def pin_plan(text: str | None = None) -> dict[str, set[int]]:
    """``{"server": cpus, "generator": cpus}`` from ``HARNESS_PIN`` (empty: no pinning)."""
    text = os.environ.get(PIN_ENV, "") if text is None else text
    plan = {}
    for part in text.replace(";", " ").split():
        role, _, cpus = part.partition("=")
        if role not in ("server", "generator") or not cpus:
            raise ValueError(
                f"{PIN_ENV}: expected 'server=CPUS generator=CPUS' (CPUS like 0 or 0-1 or 0,2), got {text!r}"
            )
        chosen = set()
        for piece in cpus.split(","):
            low, _, high = piece.partition("-")
            chosen.update(range(int(low), int(high or low) + 1))
        plan[role] = chosen
    return plan


def pin_threads(pid: int, cpus: set[int]) -> int:
    """Pin every thread of ``pid`` (threads started later inherit it); returns how many."""
    pinned = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
            pinned += 1
        except (ProcessLookupError, PermissionError):
            continue
    return pinned


def container_pids(port: int) -> set[int]:
    """The init process of each running container that publishes ``port`` (docker mode: the
    port's listener is the engine's docker-proxy, tritonserver runs under the container's init)."""
    import docker

    client = docker.from_env()
    try:
        containers = client.containers.list(filters={"publish": str(port), "status": "running"})
        pids = {int(c.attrs["State"]["Pid"]) for c in containers}
    finally:
        client.close()
    if not pids:
        raise RuntimeError(f"{PIN_ENV}: port {port} is docker-proxy's, and no running container publishes it")
    return pids


def pin_server(url: str, cpus: set[int]) -> int:
    """Pin the process listening on ``url``'s port and all its descendants (with the container's
    processes when the listener is docker-proxy); returns the process count."""
    import psutil

    port = int(url.rsplit(":", 1)[1])
    owners = {
        c.pid
        for c in psutil.net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid
    }
    if not owners:
        raise RuntimeError(f"{PIN_ENV}: no process of this machine listens on port {port}")
    if any(psutil.Process(pid).name() == "docker-proxy" for pid in owners):
        owners |= container_pids(port)
    processes = set()
    for pid in owners:
        root = psutil.Process(pid)
        processes.update([root, *root.children(recursive=True)])
    for process in processes:
        pin_threads(process.pid, cpus)
    return len(processes)


def apply_pinning(url: str, plan: dict[str, set[int]] | None = None) -> str:
    """Pin server and generator as ``plan`` (default: ``HARNESS_PIN``) says; the record's description."""
    plan = pin_plan() if plan is None else plan
    if not plan:
        return "none"
    said = []
    if "server" in plan:
        count = pin_server(url, plan["server"])
        said.append(f"server cpus {cores_label(plan['server'])} ({count} processes)")
    if "generator" in plan:
        pin_threads(os.getpid(), plan["generator"])
        said.append(f"generator cpus {cores_label(plan['generator'])}")
    return ", ".join(said)


def cores_label(cores: set[int] | list[int] | None) -> str:
    """``0,2``, or ``any`` for no cores."""
    return ",".join(str(c) for c in sorted(cores)) if cores else "any"
