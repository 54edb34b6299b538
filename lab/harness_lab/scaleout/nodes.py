"""A second swarm node: a worker dockerd in a container (images/swarm-node), images by ``docker save |
docker load``; why the swarm is made with ``--data-path-addr``: lab/docs/scaling.md."""

from __future__ import annotations

import socket
import subprocess
import time
from dataclasses import dataclass

from harness_lab.scaleout import ScaleoutError

NODE_PREFIX = "tsw-node"


def _docker(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout_s)


@dataclass
class Worker:
    """A worker node: its container, its address on the host's bridge, its swarm node ID once joined."""

    name: str
    address: str
    node: str = ""

    @property
    def data_path_address(self) -> str:
        """The host's address towards the worker: the source of the host's VXLAN packets to it."""
        return route_source(self.address)


def route_source(address: str) -> str:
    """The local address the kernel sends from to ``address``."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((address, 4789))
        return sock.getsockname()[0]


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


def _wait_engine(name: str, deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while _docker("exec", name, "docker", "info", timeout_s=30).returncode != 0:
        if time.monotonic() > deadline:
            logs = _docker("logs", "--tail", "20", name)
            raise ScaleoutError(f"the dockerd in {name} never answered: {(logs.stdout + logs.stderr)[-800:]}")
        time.sleep(1)


def _address(name: str) -> str:
    return _docker("inspect", name, "--format", "{{.NetworkSettings.IPAddress}}").stdout.strip()


def start_worker(
    node_image: str, images: list[str], shared: list[str], index: int = 1, deadline_s: float = 180
) -> Worker:
    """Start worker ``tsw-node-<index>`` from ``node_image`` (images/swarm-node: its own dockerd), load
    ``images`` into it by ``docker save | docker load`` and bind ``shared`` host paths at the same
    paths (the bundles). Not joined yet (``join``)."""
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
        # /run fresh at every start: a restarted worker's dockerd refuses to start over its old pid file.
        *("--tmpfs", "/run"),
        *("--name", name, "--hostname", name, *mounts, node_image),
        *("dockerd", f"--cgroup-parent=/{name}"),
    )
    if started.returncode != 0:
        raise ScaleoutError(f"docker run {name} failed: {started.stderr.strip()[-400:]}")
    _wait_engine(name, deadline_s)
    for each in images:
        # No registry: the image goes over a pipe into the worker's engine.
        save = subprocess.Popen(["docker", "save", each], stdout=subprocess.PIPE)
        load = subprocess.run(
            ["docker", "exec", "-i", name, "docker", "load"], stdin=save.stdout, capture_output=True, text=True
        )
        save.wait()
        if save.returncode or load.returncode:
            raise ScaleoutError(f"docker save {each} | docker load in {name} failed: {load.stderr.strip()[-400:]}")
    return Worker(name, _address(name))


def join(worker: Worker, manager_address: str, deadline_s: float = 120) -> str:
    """``docker swarm join`` the worker (advertising its bridge address) and wait until the manager
    reports it ready; its swarm node ID."""
    token = _docker("swarm", "join-token", "-q", "worker").stdout.strip()
    joined = _docker(
        "exec",
        worker.name,
        *("docker", "swarm", "join", "--token", token, "--advertise-addr", worker.address),
        f"{manager_address}:2377",
        timeout_s=120,
    )
    if joined.returncode != 0:
        raise ScaleoutError(
            f"{worker.name} could not join the swarm: {(joined.stderr or joined.stdout).strip()[-600:]}"
        )
    worker.node = _docker("exec", worker.name, "docker", "info", "--format", "{{.Swarm.NodeID}}").stdout.strip()
    wait_node(worker.node, "ready", deadline_s)
    return worker.node


def node_state(node: str) -> str:
    return _docker("node", "inspect", node, "--format", "{{.Status.State}}", timeout_s=30).stdout.strip().lower()


def wait_node(node: str, state: str, deadline_s: float) -> float:
    """Until the manager reports ``node`` in ``state`` (ready, down); seconds it took."""
    began = time.monotonic()
    while node_state(node) != state:
        if time.monotonic() - began > deadline_s:
            raise ScaleoutError(f"node {node} not {state} within {deadline_s:.0f} s (it is {node_state(node)!r})")
        time.sleep(0.5)
    return time.monotonic() - began


def kill_worker(worker: Worker) -> None:
    """The node lost: SIGKILL its container (its dockerd and every task container in it die at once)."""
    done = _docker("kill", worker.name)
    if done.returncode != 0:
        raise ScaleoutError(f"docker kill {worker.name} failed: {done.stderr.strip()[-300:]}")


def restart_worker(worker: Worker, deadline_s: float = 180) -> None:
    """The node back: start its container again; its dockerd keeps its swarm state (the volume at
    /var/lib/docker) and rejoins as the same node. Returns once the manager reports it ready."""
    done = _docker("start", worker.name)
    if done.returncode != 0:
        raise ScaleoutError(f"docker start {worker.name} failed: {done.stderr.strip()[-300:]}")
    _wait_engine(worker.name, deadline_s)
    if _address(worker.name) != worker.address:
        raise ScaleoutError(f"{worker.name} came back on {_address(worker.name)}, not {worker.address}")
    wait_node(worker.node, "ready", deadline_s)
