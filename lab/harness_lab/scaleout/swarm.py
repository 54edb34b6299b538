"""A multi-replica stack on Docker swarm: rendered from the manifest as data, handed to the engine by
``docker stack deploy``; our code only deploys, asks and watches (lab/docs/scaling.md, "The stack")."""

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
from harness.repository import dependencies
from harness.serving.launchers.docker_images import CPU_IMAGE, cpu_image_profile
from harness_lab.manifest import lab_manifest
from harness_lab.scaleout import ScaleoutError, docker, host_address, wait_for
from harness_lab.scaleout.footprint import resources
from harness_lab.scaleout.k8s import BUNDLE_ROOT, QUEUE_METRIC, adapter_query, gated
from harness_lab.scaleout.nodes import remove_workers
from triton_gate.serve import free_port

IMAGES = PROJECT_ROOT / "images"
#: Every stack, network and container of ours starts with this (other runs share the engine).
PREFIX = "tsw"
STACK_LABEL = "com.docker.stack.namespace"
#: Label of the manager node when a run of ours initialised the swarm.
SWARM_LABEL = "triton-harness.swarm"
#: Prometheus job of the replicas and the label one series per replica carries.
JOB = "triton"
#: The prometheus-adapter rule's ``<<.LabelMatchers>>`` and ``<<.GroupBy>>`` for the swarm: the
#: replicas' job (Kubernetes: namespace + pod) and one series per task (Kubernetes: per pod).
SWARM_MATCHERS = f'job="{JOB}"'
SWARM_GROUP_BY = "instance"


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


def memory(value: str) -> str:
    """A Kubernetes quantity (``2880Mi``) as a stack file takes it (``2880M``: docker reads M as MiB)."""
    return value.removesuffix("i") if value.endswith(("Ki", "Mi", "Gi")) else value


@dataclass
class Stack:
    """N replicas of a deployment in a swarm stack (see the module docstring)."""

    deployment: Deployment
    replicas: int = 3
    #: Models loaded in each replica (explicit model control); the first is the one clients call.
    models: tuple[str, ...] = ()
    rolled_models: tuple[str, ...] = ()
    image: str = CPU_IMAGE
    work_dir: Path | None = None
    name: str = f"{PREFIX}-run"
    lb: str = "haproxy"
    lb_port: int = field(default_factory=free_port)
    prometheus_port: int = field(default_factory=free_port)
    gate: bool = True
    #: Seconds swarm watches a new healthy task before the next one rolls (a failure rolls the update back).
    monitor_s: int = 10
    stop_grace_s: int = 30
    #: Health-check failures do not count for this long after a start (also how long a bad version takes to fail).
    start_period_s: int = 180
    prometheus: bool = True
    lb_image: str | None = None
    prometheus_image: str | None = None
    initialised_swarm: bool = False
    #: Bundle the service mounts now.
    bundle: str = "v1"
    #: Spread the replicas evenly over the swarm's nodes (a placement preference).
    spread: bool = False

    def __post_init__(self):
        table = lab_manifest(self.deployment).scaleout
        if not self.models:
            if not table.model:
                raise ScaleoutError(
                    f"{self.deployment.name}: lab/deployments/{self.deployment.name}.toml sets no [scaleout] model (the one clients call)"
                )
            called = dependencies(self.deployment.model_repository, [table.model])
            self.models = (table.model, *(m for m in called if m != table.model))
        self.rolled_models = self.rolled_models or tuple(table.rolled_models)
        if not self.name.startswith(PREFIX):
            raise ScaleoutError(f"stack name {self.name} must start with {PREFIX} (teardown finds ours by it)")
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
        """Bundles (v1, v2, bad), the balancer and Prometheus images; then the stack and its configs."""
        from harness.serving.launchers.docker_engine import DockerStartError
        from harness.serving.launchers.docker_envs import checked_packed_env
        from harness.serving.packenv import default_output, packed_repository

        tarball = default_output(self.deployment.path, "cpu-image")
        try:
            checked_packed_env(tarball, cpu_image_profile(self.image))  # packed when missing or stale
        except DockerStartError as exc:
            raise ScaleoutError(str(exc)) from None
        self.deployment.export()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        for version in ("v1", "v2", "bad"):
            bundle = self.bundle_path(version)
            shutil.rmtree(bundle, ignore_errors=True)
            repository = packed_repository(self.deployment.model_repository, tarball, bundle)
            if version != "v1":
                for index, model in enumerate(self.rolled_models):
                    add_version(repository, model, broken=version == "bad" and index == 0)
        self.lb_image = build_image("lb")
        if self.prometheus:
            self.prometheus_image = build_image("prometheus")
        self.write()

    def server_command(self) -> list[str]:
        triton = [
            "tritonserver",
            f"--model-repository={BUNDLE_ROOT}/model_repository",
            "--model-control-mode=explicit",
            "--exit-timeout-secs=10",
            "--allow-grpc=false",
        ] + [f"--load-model={m}" for m in self.models]
        return gated(self.deployment, triton, "--http-port", "8000", "--metrics-port", "8002") if self.gate else triton

    def mount(self, version: str) -> dict:
        return {"type": "bind", "source": str(self.bundle_path(version)), "target": BUNDLE_ROOT, "read_only": True}

    def triton_service(self) -> dict:
        # bash's /dev/tcp: no interpreter to start (a python3 check missed its timeout on a loaded 2-core machine).
        ready = (
            'exec 3<>/dev/tcp/127.0.0.1/8000 && printf "GET /v2/health/ready HTTP/1.0\r\n\r\n" >&3 '
            '&& head -n1 <&3 | grep -q " 200 "'
        )
        table = lab_manifest(self.deployment).scaleout
        requests_ = resources(self.deployment, {"memory_mib": table.memory_mib, "cpu": table.cpu})
        return {
            "image": self.image,
            "command": self.server_command(),
            "volumes": [self.mount(self.bundle), {"type": "tmpfs", "target": "/dev/shm", "tmpfs": {"size": 2**30}}],
            "healthcheck": {
                "test": ["CMD", "bash", "-c", ready],
                "interval": "2s",
                "timeout": "10s",
                "retries": 3,
                "start_period": f"{self.start_period_s}s",
            },
            # The gate drains on SIGTERM (not ready, new requests 503, in-flight ones finish); then Triton stops.
            "stop_grace_period": f"{self.stop_grace_s}s",
            "networks": ["replicas"],
            "deploy": {
                "mode": "replicated",
                "replicas": self.replicas,
                "endpoint_mode": "dnsrr",
                "resources": {
                    "limits": {"memory": memory(requests_["limits"]["memory"])},
                    "reservations": {"memory": memory(requests_["requests"]["memory"])},
                },
                "restart_policy": {"condition": "any", "delay": "1s", "window": "30s"},
                "update_config": {
                    "parallelism": 1,
                    "delay": "0s",
                    "order": "start-first",
                    "monitor": f"{self.monitor_s}s",
                    "failure_action": "rollback",
                    "max_failure_ratio": 0,
                },
                "rollback_config": {"parallelism": 1, "order": "start-first", "monitor": f"{self.monitor_s}s"},
                **({"placement": {"preferences": [{"spread": "node.id"}]}} if self.spread else {}),
                "labels": {"triton-harness/deployment": self.deployment.name.replace("_", "-")},
            },
        }

    def manager_service(
        self, image: str | None, command: list[str], config: str, mount: str, port: int, published: int
    ):
        """A service on the manager: its config folder ``work_dir/<config>`` at ``mount``, published in host mode."""
        return {
            "image": image,
            "command": command,
            "volumes": [{"type": "bind", "source": str(self.work_dir / config), "target": mount, "read_only": True}],
            "ports": [{"target": port, "published": published, "protocol": "tcp", "mode": "host"}],
            "networks": ["replicas"],
            "deploy": {
                "endpoint_mode": "dnsrr",
                "placement": {"constraints": ["node.role == manager"]},
                "restart_policy": {"condition": "any"},
            },
        }

    def stack_file(self) -> dict:
        lb_command = {
            "haproxy": ["haproxy", "-W", "-db", "-f", "/etc/lb/haproxy.cfg"],
            "nginx": ["nginx", "-c", "/etc/lb/nginx.conf", "-g", "daemon off;"],
        }[self.lb]
        services = {
            "triton": self.triton_service(),
            "lb": self.manager_service(self.lb_image, lb_command, "lb", "/etc/lb", 8080, self.lb_port),
        }
        if self.prometheus:
            command = [
                "prometheus",
                "--config.file=/etc/prom/prometheus.yml",
                "--storage.tsdb.path=/tmp/prometheus",
                "--web.listen-address=:9090",
            ]
            services["prometheus"] = self.manager_service(
                self.prometheus_image, command, "prometheus", "/etc/prom", 9090, self.prometheus_port
            )
        return {
            "version": "3.8",
            "services": services,
            "networks": {"replicas": {"driver": "overlay", "attachable": True}},
        }

    def lb_config(self, name: str) -> str:
        """The balancer's config (``haproxy.cfg``, ``nginx.conf`` beside this module) for this stack's service."""
        return (Path(__file__).parent / name).read_text().replace("@SERVICE@", self.service)

    def recording_rule(self) -> str:
        """The Kubernetes ConfigMap's adapter rule with the swarm's matchers (one function renders both)."""
        return adapter_query(SWARM_MATCHERS, SWARM_GROUP_BY)

    def prometheus_files(self) -> dict[str, str]:
        config = {
            "global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
            "rule_files": ["/etc/prom/rules.yml"],
            "scrape_configs": [
                {
                    "job_name": JOB,
                    "dns_sd_configs": [
                        {"names": [f"tasks.{self.service}"], "type": "A", "port": 8002, "refresh_interval": "2s"}
                    ],
                }
            ],
        }
        rules = {"groups": [{"name": "adapter", "rules": [{"record": QUEUE_METRIC, "expr": self.recording_rule()}]}]}
        return {
            "prometheus.yml": yaml.safe_dump(config, sort_keys=False),
            "rules.yml": yaml.safe_dump(rules, sort_keys=False),
        }

    def write(self) -> None:
        (self.work_dir / "lb").mkdir(parents=True, exist_ok=True)
        (self.work_dir / "prometheus").mkdir(parents=True, exist_ok=True)
        (self.work_dir / "stack.yml").write_text(yaml.safe_dump(self.stack_file(), sort_keys=False))
        for name in ("haproxy.cfg", "nginx.conf"):
            (self.work_dir / "lb" / name).write_text(self.lb_config(name))
        for name, text in self.prometheus_files().items():
            (self.work_dir / "prometheus" / name).write_text(text)

    def up(self, deadline_s: float = 900) -> float:
        """Swarm mode on, ``docker stack deploy``, wait until every replica is healthy and the balancer
        answers ready; seconds it took."""
        began = time.monotonic()
        self.initialised_swarm = swarm_init() or self.initialised_swarm
        if self.name in stacks():
            remove_stack(self.name)
        docker("stack", "deploy", "--prune", "-c", str(self.work_dir / "stack.yml"), self.name, timeout_s=300)
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

    def tasks(self) -> list[dict]:
        """The service's tasks as swarm reports them (desired state, state, node, container, image's bundle)."""
        ids = docker("service", "ps", "-q", "--no-trunc", self.service, check=False).split()
        if not ids:
            return []
        out = []
        for task in json.loads(docker("inspect", *ids, check=False) or "[]"):
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
