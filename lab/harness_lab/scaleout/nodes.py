"""A second swarm node: a worker dockerd in a container (images/swarm-node), images by ``docker save |
docker load``; why the swarm is made with ``--data-path-addr``: lab/docs/scaling.md."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass

from harness_lab.scaleout import ScaleoutError, docker, host_address, wait_for

NODE_PREFIX = "tsw-node"
#: The workers' own bridge network: each worker pinned to an address of it, the one it joined the swarm
#: with, which a restarted worker must keep (the default bridge hands out whichever address is free).
NODE_NETWORK = "tsw-nodes"
NODE_SUBNET = "10.214.0.0/24"


@dataclass
class Worker:
    """A worker node: its container, its address on NODE_NETWORK, its swarm node ID once joined."""

    name: str
    address: str
    node: str = ""

    @property
    def data_path_address(self) -> str:
        """The host's address towards the worker: the source of the host's VXLAN packets to it."""
        return host_address(self.address)


def remove_workers() -> list[str]:
    """Remove our worker containers (and their state volumes) and their swarm node entries."""
    removed = []
    names = docker("ps", "-a", "--filter", f"name=^{NODE_PREFIX}", "--format", "{{.Names}}", check=False).split()
    for name in names:
        docker("rm", "-f", "-v", name, check=False)
        removed.append(f"node container {name}")
    nodes = docker("node", "ls", "--format", "{{.ID}} {{.Hostname}} {{.ManagerStatus}}", check=False).splitlines()
    for line in nodes:
        parts = line.split()
        if len(parts) >= 2 and parts[1].startswith(NODE_PREFIX):
            docker("node", "rm", "--force", parts[0], check=False)
            removed.append(f"swarm node {parts[1]}")
    if node_network_exists():
        docker("network", "rm", NODE_NETWORK, check=False)
        removed.append(f"network {NODE_NETWORK}")
    return removed


def _wait_engine(name: str, deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while subprocess.run(["docker", "exec", name, "docker", "info"], capture_output=True, timeout=30).returncode:
        if time.monotonic() > deadline:
            logs = subprocess.run(["docker", "logs", "--tail", "20", name], capture_output=True, text=True)
            raise ScaleoutError(f"the dockerd in {name} never answered: {(logs.stdout + logs.stderr)[-800:]}")
        time.sleep(1)


def node_network_exists() -> bool:
    return NODE_NETWORK in docker("network", "ls", "--format", "{{.Name}}", check=False).split()


def node_address(index: int) -> str:
    """Worker ``index``'s pinned address on NODE_NETWORK (.1 is the host's side of the bridge)."""
    return NODE_SUBNET.rsplit(".", 1)[0] + f".{index + 1}"


def start_worker(
    node_image: str, images: list[str], shared: list[str], index: int = 1, deadline_s: float = 180
) -> Worker:
    """Start worker ``tsw-node-<index>`` (its own dockerd), ``images`` loaded into it, ``shared`` host
    paths bound at the same paths. Not joined yet (``join``)."""
    name, address = f"{NODE_PREFIX}-{index}", node_address(index)
    docker("rm", "-f", "-v", name, check=False)
    if not node_network_exists():
        docker("network", "create", "--driver", "bridge", "--subnet", NODE_SUBNET, NODE_NETWORK)
    mounts = [arg for path in shared for arg in ("-v", f"{path}:{path}:ro")]
    # Not --privileged: this machine's root lacks CAP_SYS_RESOURCE (lab/docs/scaling.md).
    docker(
        "run",
        "-d",
        *("--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE"),
        *("--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined"),
        *("--security-opt", "systempaths=unconfined", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw"),
        # /run fresh at every start: a restarted worker's dockerd refuses to start over its old pid file.
        *("--tmpfs", "/run"),
        *("--network", NODE_NETWORK, "--ip", address),
        *("--name", name, "--hostname", name, *mounts, node_image),
        *("dockerd", f"--cgroup-parent=/{name}"),
    )
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
    return Worker(name, address)


def join(worker: Worker, manager_address: str, deadline_s: float = 120) -> str:
    """``docker swarm join`` the worker (advertising its bridge address) until the manager reports it ready."""
    token = docker("swarm", "join-token", "-q", "worker", check=False).strip()
    docker(
        "exec",
        worker.name,
        *("docker", "swarm", "join", "--token", token, "--advertise-addr", worker.address),
        f"{manager_address}:2377",
        timeout_s=120,
    )
    worker.node = docker("exec", worker.name, "docker", "info", "--format", "{{.Swarm.NodeID}}", check=False).strip()
    wait_node(worker.node, "ready", deadline_s)
    return worker.node


def node_state(node: str) -> str:
    return docker("node", "inspect", node, "--format", "{{.Status.State}}", timeout_s=30, check=False).strip().lower()


def wait_node(node: str, state: str, deadline_s: float) -> float:
    """Until the manager reports ``node`` in ``state`` (ready, down); seconds it took."""
    began = time.monotonic()
    wait_for(lambda: node_state(node) == state, deadline_s, f"node {node} {state}")
    return time.monotonic() - began


def kill_worker(worker: Worker) -> None:
    """The node lost: SIGKILL its container (its dockerd and every task container in it die at once)."""
    docker("kill", worker.name)


def restart_worker(worker: Worker, deadline_s: float = 180) -> None:
    """The node back: its container started again (same swarm state, same node, same pinned address),
    until reported ready."""
    docker("start", worker.name)
    _wait_engine(worker.name, deadline_s)
    wait_node(worker.node, "ready", deadline_s)
