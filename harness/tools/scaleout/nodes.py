"""A second swarm node on this machine: a worker running its own dockerd in a privileged container
(images/swarm-node, Debian's docker.io), joined to the swarm; images reach it by ``docker save |
docker load`` (no registry). ``remove_workers`` takes every such node of ours down (teardown)."""

from __future__ import annotations

import subprocess

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
