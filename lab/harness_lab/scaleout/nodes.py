"""A second swarm node on this machine: a worker running its own dockerd in a container with every
capability this machine allows (images/swarm-node, Debian's docker.io), joined to the swarm; images reach it by ``docker save |
docker load`` (no registry). ``remove_workers`` takes every such node of ours down (teardown)."""

from __future__ import annotations

import subprocess
import time

from harness_lab.scaleout import ScaleoutError

NODE_PREFIX = "tsw-node"


def _docker(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout_s)


def remove_workers() -> list[str]:
    """Remove our worker containers (and their state volumes) and their swarm node entries."""
    removed = []
    names = _docker("ps", "-a", "--filter", f"name=^{NODE_PREFIX}", "--format", "{{.Names}}").stdout.split()
    for name in names:
        _docker("rm", "-f", "-v", name)
        removed.append(f"node container {name}")
    nodes = _docker("node", "ls", "--format", "{{.ID}} {{.Hostname}} {{.ManagerStatus}}").stdout.splitlines()
    for line in nodes:
        parts = line.split()
        if len(parts) >= 2 and parts[1].startswith(NODE_PREFIX):
            _docker("node", "rm", "--force", parts[0])
            removed.append(f"swarm node {parts[1]}")
    return removed


def add_worker(
    manager_address: str,
    node_image: str,
    images: list[str],
    shared: list[str],
    index: int = 1,
    deadline_s: float = 180,
) -> str:
    """Start worker ``tsw-node-<index>`` from ``node_image`` (images/swarm-node: its own dockerd),
    load ``images`` into it by ``docker save | docker load``, bind ``shared`` host paths at the same
    paths (the bundles), and join it to the host's swarm; its swarm node ID."""
    name = f"{NODE_PREFIX}-{index}"
    _docker("rm", "-f", "-v", name)
    mounts = [arg for path in shared for arg in ("-v", f"{path}:{path}:ro")]
    # Not --privileged: this machine's root lacks CAP_SYS_RESOURCE, and asking for every capability
    # fails ("unable to apply caps: operation not permitted"). All others, no seccomp/AppArmor, and the
    # host's cgroup v1 tree writable (the worker's containers go under their own cgroup parent).
    started = _docker(
        "run",
        "-d",
        *("--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE"),
        *("--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined"),
        *("--security-opt", "systempaths=unconfined", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw"),
        *("--name", name, "--hostname", name, *mounts, node_image),
        *("dockerd", f"--cgroup-parent=/{name}"),
    )
    if started.returncode != 0:
        raise ScaleoutError(f"docker run {name} failed: {started.stderr.strip()[-400:]}")
    deadline = time.monotonic() + deadline_s
    while _docker("exec", name, "docker", "info", timeout_s=30).returncode != 0:
        if time.monotonic() > deadline:
            logs = _docker("logs", "--tail", "20", name)
            raise ScaleoutError(f"the dockerd in {name} never answered: {(logs.stdout + logs.stderr)[-800:]}")
        time.sleep(1)
    for each in images:
        # No registry: the image goes over a pipe into the worker's engine.
        save = subprocess.Popen(["docker", "save", each], stdout=subprocess.PIPE)
        load = subprocess.run(
            ["docker", "exec", "-i", name, "docker", "load"], stdin=save.stdout, capture_output=True, text=True
        )
        save.wait()
        if save.returncode or load.returncode:
            raise ScaleoutError(f"docker save {each} | docker load in {name} failed: {load.stderr.strip()[-400:]}")
    token = _docker("swarm", "join-token", "-q", "worker").stdout.strip()
    joined = _docker(
        "exec", name, "docker", "swarm", "join", "--token", token, f"{manager_address}:2377", timeout_s=120
    )
    if joined.returncode != 0:
        raise ScaleoutError(f"{name} could not join the swarm: {(joined.stderr or joined.stdout).strip()[-600:]}")
    node = _docker("exec", name, "docker", "info", "--format", "{{.Swarm.NodeID}}").stdout.strip()
    while "Ready" not in _docker("node", "inspect", node, "--format", "{{.Status.State}}").stdout.title():
        if time.monotonic() > deadline + 120:
            raise ScaleoutError(f"node {name} ({node}) joined but is not ready")
        time.sleep(1)
    return node
