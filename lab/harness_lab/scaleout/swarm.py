"""A multi-replica stack on Docker swarm: the committed stack file (deploy/swarm/<deployment>/stack.yml)
handed to the engine by ``docker stack deploy``; our code only deploys, asks and watches
(lab/docs/scaling.md, "The stack")."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from harness import PROJECT_ROOT
from harness.deployments import Deployment
from harness.serving.launchers.docker_images import CPU_IMAGE, cpu_image_profile
from harness_lab.manifest import lab_manifest
from harness_lab.scaleout import ScaleoutError, docker, host_address, wait_for
from harness_lab.scaleout.nodes import remove_workers
from triton_gate.serve import free_port

IMAGES = PROJECT_ROOT / "images"
#: The committed stack files: <deployment>/stack.yml, the balancers' and Prometheus's configs beside them.
STACKS = PROJECT_ROOT / "deploy" / "swarm"
#: Where the stack file mounts the bundle (as the Kubernetes Deployment does).
BUNDLE_ROOT = "/mnt/models"
#: Every stack, network and container of ours starts with this (other runs share the engine).
PREFIX = "tsw"
STACK_LABEL = "com.docker.stack.namespace"
#: Label of the manager node when a run of ours initialised the swarm.
SWARM_LABEL = "triton-harness.swarm"
#: Prometheus job of the replicas (deploy/swarm/prometheus.yml).
JOB = "triton"
#: The HPA's metric as the stack's Prometheus records it (deploy/swarm/rules.yml); what the HPA would
#: decide with it was measured once (lab/docs/scaling.md, "The signal, evaluated by a real Prometheus").
QUEUE_METRIC = "nv_inference_queue_duration_us_per_request"


def recording_rule() -> str:
    """The PromQL the stack's Prometheus records as QUEUE_METRIC (deploy/swarm/rules.yml)."""
    rules = yaml.safe_load((STACKS / "rules.yml").read_text())["groups"][0]["rules"]
    return next(rule["expr"] for rule in rules if rule["record"] == QUEUE_METRIC)


def build_image(recipe: str) -> str:
    """An image built from nothing by images/<recipe>/build.sh (reused when current); its name."""
    done = subprocess.run([str(IMAGES / recipe / "build.sh")], capture_output=True, text=True)
    if done.returncode != 0:
        raise ScaleoutError(f"images/{recipe}/build.sh failed: {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout.strip().splitlines()[-1]


def add_version(repository: Path, model: str, version: str = "2", broken: bool = False) -> None:
    """Add version ``version`` of ``model`` (its version-1 files, linked; ``broken``: garbage in their place)."""
    source, target = repository / model / "1", repository / model / version
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, copy_function=os.link, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    if broken:
        for path in target.rglob("*"):
            if path.is_file():
                path.unlink()  # a link: the version-1 file stays intact
                path.write_bytes(b"not a model\n")


def swarm_state() -> str:
    return docker("info", "--format", "{{.Swarm.LocalNodeState}}", timeout_s=30).strip()


def swarm_init(data_path_address: str | None = None) -> bool:
    """Make this engine a swarm manager; True when this call did (so ``down`` leaves it).
    ``data_path_address``: the address its overlay (VXLAN) traffic uses (``nodes``)."""
    if swarm_state() == "active":
        return False
    # The overlay subnets come from a pool no bridge network of the engine uses.
    docker(
        *("swarm", "init", "--advertise-addr", host_address()),
        *(("--data-path-addr", data_path_address) if data_path_address else ()),
        *("--default-addr-pool", "10.213.0.0/16", "--default-addr-pool-mask-length", "24"),
        *("--task-history-limit", "5"),
        timeout_s=120,
    )
    # Marks the swarm as ours: the last of our runs to finish leaves it, whichever run made it.
    docker("node", "update", "--label-add", f"{SWARM_LABEL}=1", local_node())
    return True


def local_node() -> str:
    return docker("info", "--format", "{{.Swarm.NodeID}}", timeout_s=30).strip()


def swarm_is_ours() -> bool:
    if swarm_state() != "active":
        return False
    labels = docker("node", "inspect", local_node(), "--format", "{{json .Spec.Labels}}", check=False).strip()
    return SWARM_LABEL in json.loads(labels or "{}")


def stacks() -> list[str]:
    if swarm_state() != "active":
        return []
    out = docker("stack", "ls", "--format", "{{.Name}}", check=False, timeout_s=60)
    return [name for name in out.split() if name.startswith(PREFIX)]


def stack_objects(name: str) -> dict[str, list[str]]:
    """The stack's containers, networks and volumes still on the engine."""
    label = f"label={STACK_LABEL}={name}"
    return {
        "containers": docker("ps", "-aq", "--filter", label, check=False).split(),
        "networks": docker("network", "ls", "-q", "--filter", label, check=False).split(),
        "volumes": docker("volume", "ls", "-q", "--filter", label, check=False).split(),
    }


def remove_stack(name: str, deadline_s: float = 120) -> None:
    """``docker stack rm`` and wait until its containers and networks are gone."""
    docker("stack", "rm", name, check=False, timeout_s=120)
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        left = stack_objects(name)
        if not left["containers"] and not left["networks"]:
            return
        if left["containers"] and time.monotonic() > deadline - deadline_s / 2:
            docker("rm", "-f", *left["containers"], check=False)
        time.sleep(1)
    raise ScaleoutError(f"stack {name} still has containers or networks {deadline_s:.0f} s after docker stack rm")


def teardown(leave: bool = True) -> list[str]:
    """Remove every stack of ours and (``leave``) take the engine out of swarm mode; what was removed."""
    removed = []
    for name in stacks():
        remove_stack(name)
        removed.append(f"stack {name}")
    removed += remove_workers()
    if leave and swarm_state() != "inactive":
        docker("swarm", "leave", "--force", check=False, timeout_s=120)
        removed.append("swarm (left)")
    # docker_gwbridge (the swarm's bridge) is made by swarm init and stays after leave.
    if swarm_state() == "inactive":
        docker("network", "rm", "docker_gwbridge", check=False)
    return removed


def write_bundle(deployment: Deployment, dest: Path, image: str = CPU_IMAGE) -> Path:
    """The bundle deploy/k8s and deploy/swarm serve at /mnt/models: ``dest/model_repository`` (exported
    model files; Python models' configs point at the packed env) and ``dest/envs/`` (the deployment's
    env packed for ``image``, packed when missing or stale). Returns the repository's path."""
    from harness.serving.launchers.docker_engine import DockerStartError
    from harness.serving.launchers.docker_envs import checked_packed_env
    from harness.serving.packenv import default_output, packed_repository

    tarball = default_output(deployment.path, "cpu-image")
    try:
        checked_packed_env(tarball, cpu_image_profile(image))
    except DockerStartError as exc:
        raise ScaleoutError(str(exc)) from None
    deployment.export()
    shutil.rmtree(dest, ignore_errors=True)
    return packed_repository(deployment.model_repository, tarball, dest)


def stack_file(deployment: str) -> Path:
    """The deployment's committed stack file; ScaleoutError when it has none."""
    path = STACKS / deployment / "stack.yml"
    if not path.exists():
        raise ScaleoutError(f"{deployment} has no swarm stack file: {path.relative_to(PROJECT_ROOT)}")
    return path


def loaded_models(path: Path) -> tuple[str, ...]:
    """The models the stack file's replicas load (``--load-model``), the one clients call first."""
    command = yaml.safe_load(path.read_text())["services"]["triton"]["command"]
    return tuple(arg.split("=", 1)[1] for arg in command if arg.startswith("--load-model="))


@dataclass
class Stack:
    """N replicas of a deployment: its committed stack file deployed as a swarm stack."""

    deployment: Deployment
    replicas: int = 3
    image: str = CPU_IMAGE
    work_dir: Path | None = None
    name: str = f"{PREFIX}-run"
    lb: str = "haproxy"
    lb_port: int = field(default_factory=free_port)
    prometheus_port: int = field(default_factory=free_port)
    lb_image: str | None = None
    prometheus_image: str | None = None
    initialised_swarm: bool = False
    #: Bundle the service mounts now.
    bundle: str = "v1"

    def __post_init__(self):
        if not self.name.startswith(PREFIX):
            raise ScaleoutError(f"stack name {self.name} must start with {PREFIX} (teardown finds ours by it)")
        self.stack_file = stack_file(self.deployment.name)
        #: Models loaded in each replica; the first is the one clients call.
        self.models = loaded_models(self.stack_file)
        self.rolled_models = tuple(lab_manifest(self.deployment).scaleout.rolled_models)
        self.work_dir = Path(self.work_dir or PROJECT_ROOT / "build" / "scaleout" / self.deployment.name).resolve()

    @property
    def service(self) -> str:
        return f"{self.name}_triton"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.lb_port}"

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.prometheus_port}"

    def bundle_path(self, version: str) -> Path:
        return self.work_dir / f"bundle-{version}"

    def prepare(self) -> None:
        """Bundles (v1, v2, bad), the balancer and Prometheus images."""
        for version in ("v1", "v2", "bad"):
            repository = write_bundle(self.deployment, self.bundle_path(version), self.image)
            if version != "v1":
                for index, model in enumerate(self.rolled_models):
                    add_version(repository, model, broken=version == "bad" and index == 0)
        self.lb_image = build_image("lb")
        self.prometheus_image = build_image("prometheus")

    def deploy_command(self) -> list[str]:
        """``docker stack deploy`` of the stack file (and ``nginx.yml`` for ``lb="nginx"``)."""
        files = [self.stack_file] + ([STACKS / "nginx.yml"] if self.lb == "nginx" else [])
        return ["docker", "stack", "deploy", "--prune", *(a for f in files for a in ("-c", str(f))), self.name]

    def environment(self) -> dict[str, str]:
        """The stack file's variables for this run."""
        return {
            "TRITON_IMAGE": self.image,
            "BUNDLE": str(self.bundle_path(self.bundle)),
            "REPLICAS": str(self.replicas),
            "LB_IMAGE": self.lb_image or "",
            "PROMETHEUS_IMAGE": self.prometheus_image or "",
            "LB_PORT": str(self.lb_port),
            "PROMETHEUS_PORT": str(self.prometheus_port),
        }

    def up(self, deadline_s: float = 900) -> float:
        """Swarm mode on, ``docker stack deploy``, wait until every replica is healthy and the balancer
        answers ready; seconds it took."""
        began = time.monotonic()
        self.initialised_swarm = swarm_init() or self.initialised_swarm
        if self.name in stacks():
            remove_stack(self.name)
        done = subprocess.run(
            self.deploy_command(), env={**os.environ, **self.environment()}, capture_output=True, text=True, timeout=300
        )
        if done.returncode:
            raise ScaleoutError(
                f"docker stack deploy {self.name} failed: {(done.stderr or done.stdout).strip()[-600:]}"
            )
        self.wait_converged(self.replicas, deadline_s=deadline_s)
        self.wait_lb()
        self.wait_balanced(self.replicas)
        return time.monotonic() - began

    def wait_balanced(self, count: int, deadline_s: float = 60, addresses: set[str] | None = None) -> float:
        """Until the balancer sends requests to ``count`` different tasks (its DNS and checks caught up),
        or to each of ``addresses`` (task addresses); seconds it took."""
        import requests

        began = time.monotonic()
        seen: set[str] = set()
        while not (addresses <= seen if addresses else len(seen) >= count):
            if time.monotonic() - began > deadline_s:
                raise ScaleoutError(
                    f"the balancer reached {sorted(seen)}, not {sorted(addresses or []) or count} tasks, in {deadline_s:.0f} s"
                )
            try:
                upstream = requests.get(f"{self.url}/v2/health/ready", timeout=5).headers.get("X-Upstream", "")
                seen.add(upstream.rsplit(":", 1)[0] if addresses else upstream)
            except requests.RequestException:
                pass
            seen.discard("")
            time.sleep(0.2)
        return time.monotonic() - began

    def down(self) -> None:
        """Remove the stack (and the swarm when this run made it), whatever state it is in."""
        try:
            remove_stack(self.name)
        finally:
            # The swarm goes with the last stack of ours (another run of ours may still use it).
            if (self.initialised_swarm or swarm_is_ours()) and not stacks():
                teardown()
            self.initialised_swarm = False

    def tasks(self, check: bool = False) -> list[dict]:
        """The service's tasks as swarm reports them (desired state, state, node, container, image's bundle);
        ``check``: ScaleoutError when docker fails, rather than no tasks."""
        ids = docker("service", "ps", "-q", "--no-trunc", self.service, check=check).split()
        if not ids:
            return []
        out = []
        for task in json.loads(docker("inspect", *ids, check=check) or "[]"):
            spec = task["Spec"]["ContainerSpec"]
            mounts = [m.get("Source", "") for m in spec.get("Mounts", []) if m.get("Target") == BUNDLE_ROOT]
            addresses = [
                a.split("/")[0]
                for n in task.get("NetworksAttachments") or []
                if n["Network"]["Spec"]["Name"] == f"{self.name}_replicas"
                for a in n.get("Addresses") or []
            ]
            out.append(
                {
                    "id": task["ID"],
                    "node": task.get("NodeID"),
                    "desired": task["DesiredState"],
                    "state": task["Status"]["State"],
                    "error": task["Status"].get("Err", ""),
                    "container": (task["Status"].get("ContainerStatus") or {}).get("ContainerID", ""),
                    "bundle": Path(mounts[0]).name.removeprefix("bundle-") if mounts else "",
                    "address": addresses[0] if addresses else "",
                }
            )
        return out

    def running(self) -> list[dict]:
        return [t for t in self.tasks() if t["state"] == "running" and t["desired"] == "running"]

    def wait_converged(self, count: int, deadline_s: float = 900) -> float:
        """Until ``count`` tasks run (healthy: swarm reports running only after the health check
        passes) and none other is left; seconds it took."""
        began = time.monotonic()
        while True:
            tasks = self.tasks()
            live = [t for t in tasks if t["state"] == "running"]
            if len(live) == count and all(t["desired"] == "running" for t in live):
                return time.monotonic() - began
            if time.monotonic() - began > deadline_s:
                raise ScaleoutError(
                    f"{self.service}: {len(live)} of {count} tasks running after {deadline_s:.0f} s: "
                    f"{[(t['state'], t['error'][:80]) for t in tasks[:6]]}; {self.logs()}"
                )
            time.sleep(1)

    def logs(self, tail: int = 15) -> str:
        command = ["docker", "service", "logs", "--raw", "--tail", str(tail), self.service]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        return "last log lines: " + (done.stdout + done.stderr).strip()[-800:]

    def wait_lb(self, deadline_s: float = 60) -> None:
        import requests

        def ready() -> bool:
            try:
                return requests.get(f"{self.url}/v2/health/ready", timeout=2).status_code == 200
            except requests.RequestException:
                return False

        wait_for(ready, deadline_s, f"the balancer on {self.url} answering ready")

    def update_state(self) -> dict:
        """The service's ``UpdateStatus`` (state: updating, completed, rollback_started, rollback_completed, ...)."""
        out = docker("service", "inspect", self.service, "--format", "{{json .UpdateStatus}}", check=False).strip()
        return json.loads(out) if out and out != "null" else {}

    def roll_to(self, version: str) -> None:
        """``docker service update --detach`` to bundle ``version``: the engine rolls; we only watch."""
        # --mount-add of a mounted target replaces that mount (with --mount-rm of it, both would go).
        mount = f"type=bind,source={self.bundle_path(version)},target={BUNDLE_ROOT},readonly"
        docker("service", "update", "--detach", "--mount-add", mount, self.service, timeout_s=120)

    def scale(self, count: int) -> None:
        docker("service", "scale", "--detach", f"{self.service}={count}", timeout_s=120)

    def kill(self, task: dict) -> tuple[float, float]:
        """SIGKILL a task's container; ``time.time()`` when asked and when ``docker kill`` returned."""
        asked_at = time.time()
        docker("kill", task["container"], check=False)
        return asked_at, time.time()
