"""A multi-replica stack on this machine: N tritonserver replicas of one deployment behind nginx,
run by Docker Compose (Debian's ``docker-compose`` 1.29, or the ``docker compose`` plugin).

Everything is generated as data and dumped with PyYAML / written line by line:

- ``bundle-v1/`` and ``bundle-v2/``: the deployment's repository with its packed env beside it
  (``harness.serving.packenv.packed_repository``: ``model_repository/`` + ``envs/``, hard links), the
  layout the Kubernetes manifests deliver too; v2 adds version ``2`` of the rolled model (its
  version 1 files, linked) so a roll is visible in every response's ``model_version``;
- ``docker-compose.yml``: one service per replica (``t1``..``tN``, fixed addresses on a private
  bridge network so nginx's upstreams survive a recreated container), the CPU image, the bundle
  mounted read-only at ``/mnt/models``, a Docker health check on ``/v2/health/ready``; and ``lb``,
  the nginx image of ``images/lb/build.sh``, published on a loopback port, started once every
  replica is healthy;
- ``nginx.conf``: the upstream of the replicas (a drained one is marked ``down``), passive health
  (``max_fails=1 fail_timeout``), retries of failed or reset requests on the next replica
  (``proxy_next_upstream error timeout http_502 http_503 http_504 non_idempotent``; inference is
  stateless, so a retry is safe), a 1 s connect timeout, a body-size bound, and a JSON access log
  with the upstream(s) each request went to.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from harness import PROJECT_ROOT
from harness.deployments import Deployment
from harness.repository import dependencies
from harness.serving.gate.serve import free_port, serve_command
from harness.serving.launchers.docker_engine import HOST_LABEL, OWNER_LABEL, OWNER_VALUE, PID_LABEL
from harness.tools.scaleout import ScaleoutError
from harness.tools.scaleout.subnets import free_subnet

BUNDLE_ROOT = "/mnt/models"
LB_BUILD = PROJECT_ROOT / "images" / "lb" / "build.sh"
PROJECT = "triton-scaleout"


def compose_command() -> list[str]:
    """``docker-compose`` (Debian) or the ``docker compose`` plugin, whichever runs."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
    if probe.returncode == 0:
        return ["docker", "compose"]
    raise ScaleoutError(
        "neither docker-compose nor the docker compose plugin is installed: "
        "`make scaleout-tools` installs Debian's docker-compose"
    )


def lb_image() -> str:
    """The nginx image (built from nothing by images/lb/build.sh when missing)."""
    done = subprocess.run([str(LB_BUILD)], capture_output=True, text=True)
    if done.returncode != 0:
        raise ScaleoutError(f"images/lb/build.sh failed: {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout.strip().splitlines()[-1]


def add_version(repository: Path, model: str, version: str = "2") -> None:
    """Add version ``version`` of ``model``: its version-1 files, linked (a new version folder)."""
    source, target = repository / model / "1", repository / model / version
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, copy_function=os.link, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


@dataclass
class Stack:
    """N replicas of a deployment behind nginx (see the module docstring)."""

    deployment: Deployment
    replicas: int = 3
    #: Models loaded in each replica (explicit model control); the first is the one clients call.
    #: Default: the manifest's ``[scaleout] model`` and the models it calls.
    models: tuple[str, ...] = ()
    #: The models whose version 2 a roll brings (bundle-v2; default: ``[scaleout] rolled_models``), e.g.
    #: an ONNX model (new weights, taken by an ensemble's ``model_version: -1`` step) and the public
    #: ensemble, whose version every response names.
    rolled_models: tuple[str, ...] = ()
    image: str = os.environ.get("TRITON_CPU_IMAGE", "triton-harness/tritonserver-cpu:2.51.0")
    work_dir: Path | None = None
    project: str = PROJECT
    lb_port: int = field(default_factory=free_port)
    fail_timeout_s: int = 5
    max_body: str = "8m"
    #: Each replica serves through the image's front gate (its entry point; no admin token: the
    #: repository API stays closed). False: plain tritonserver.
    gate: bool = True
    #: Bundle version of each replica, and the replicas nginx must not send new requests to.
    versions: dict[str, str] = field(default_factory=dict)
    drained: set[str] = field(default_factory=set)
    subnet: ipaddress.IPv4Network | None = None
    lb: str | None = None

    def __post_init__(self):
        table = self.deployment.manifest.scaleout
        if not self.models:
            if not table.model:
                raise ScaleoutError(
                    f"{self.deployment.name}: deployment.toml sets no [scaleout] model (the one clients call)"
                )
            called = dependencies(self.deployment.model_repository, [table.model])
            self.models = (table.model, *(m for m in called if m != table.model))
        self.rolled_models = self.rolled_models or tuple(table.rolled_models)
        self.work_dir = Path(self.work_dir or PROJECT_ROOT / "build" / "scaleout" / self.deployment.name)
        self.versions = self.versions or {name: "v1" for name in self.names}

    # ------------------------------------------------------------------ generated files

    @property
    def names(self) -> list[str]:
        return [f"t{i}" for i in range(1, self.replicas + 1)]

    def address(self, name: str) -> str:
        return str(self.subnet.network_address + 10 + int(name[1:]))

    def prepare(self) -> None:
        """Bundles (v1, v2), the nginx image, a free subnet; then the compose file and nginx.conf."""
        from harness.serving.packenv import (
            RECIPE,
            PackEnvError,
            default_output,
            is_stale,
            load_recipe,
            pack,
            packed_repository,
        )

        tarball = default_output(self.deployment.path, "cpu-image")
        recipe = load_recipe(self.deployment.path / RECIPE)
        stale = is_stale(tarball, recipe, "cpu-image") if tarball.exists() else "missing"
        if stale:
            # As the docker launcher does (and `make pack-env-image`): (re)pack a missing or stale env.
            print(f"scaleout: packing {tarball} for the CPU image ({stale})", flush=True)
            try:
                pack(recipe, "cpu-image", tarball, log=lambda *_: None)
            except PackEnvError as exc:
                raise ScaleoutError(f"packing {tarball} failed: {' '.join(str(exc).split())[:300]}") from None
        self.deployment.export()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        (self.work_dir / "logs").mkdir(exist_ok=True)
        for version in ("v1", "v2"):
            bundle = self.work_dir / f"bundle-{version}"
            shutil.rmtree(bundle, ignore_errors=True)
            repository = packed_repository(self.deployment.model_repository, tarball, bundle)
            if version == "v2":
                for model in self.rolled_models:
                    add_version(repository, model)
        self.lb = lb_image()
        self.subnet = free_subnet(self.project)
        self.write()

    def server_command(self) -> list[str]:
        triton = [
            "tritonserver",
            f"--model-repository={BUNDLE_ROOT}/model_repository",
            "--model-control-mode=explicit",
            "--exit-timeout-secs=10",
            "--allow-grpc=false",
        ] + [f"--load-model={m}" for m in self.models]
        if not self.gate:
            return triton
        return serve_command(triton, "--http-port", "8000", "--metrics-port", "8002")

    def compose_file(self) -> dict:
        labels = {OWNER_LABEL: OWNER_VALUE, PID_LABEL: str(os.getpid()), HOST_LABEL: socket.gethostname()}
        # bash's /dev/tcp: no interpreter to start (a python3 check missed its timeout on a loaded 2-core machine).
        ready = (
            'exec 3<>/dev/tcp/127.0.0.1/8000 && printf "GET /v2/health/ready HTTP/1.0\r\n\r\n" >&3 '
            '&& head -n1 <&3 | grep -q " 200 "'
        )
        services = {}
        for name in self.names:
            services[name] = {
                "image": self.image,
                "command": self.server_command(),
                "volumes": [f"{self.work_dir / ('bundle-' + self.versions[name])}:{BUNDLE_ROOT}:ro"],
                "shm_size": "1g",
                "labels": dict(labels),
                "healthcheck": {
                    "test": ["CMD", "bash", "-c", ready],
                    "interval": "2s",
                    "timeout": "10s",
                    "retries": 3,
                    "start_period": "600s",
                },
                "networks": {"replicas": {"ipv4_address": self.address(name)}},
            }
        services["lb"] = {
            "image": self.lb,
            "volumes": [
                f"{self.work_dir / 'nginx.conf'}:/etc/nginx/nginx.conf:ro",
                f"{self.work_dir / 'logs'}:/var/log/scaleout",
            ],
            "ports": [f"127.0.0.1:{self.lb_port}:8080"],
            "labels": dict(labels),
            "depends_on": {name: {"condition": "service_healthy"} for name in self.names},
            "networks": {"replicas": {"ipv4_address": str(self.subnet.network_address + 2)}},
        }
        return {
            "version": "2.4",
            "services": services,
            "networks": {"replicas": {"ipam": {"config": [{"subnet": str(self.subnet)}]}}},
        }

    def nginx_conf(self) -> str:
        servers = [
            f"        server {self.address(n)}:8000 max_fails=1 fail_timeout={self.fail_timeout_s}s"
            f"{' down' if n in self.drained else ''};"
            for n in self.names
        ]
        log_format = (
            '\'{"t":$msec,"status":$status,"upstream":"$upstream_addr",'
            '"upstream_status":"$upstream_status","request_time":$request_time}\''
        )
        return "\n".join(
            [
                "worker_processes 1;",
                "error_log stderr warn;",
                "events { worker_connections 2048; }",
                "http {",
                f"    log_format lb escape=json {log_format};",
                "    access_log /var/log/scaleout/access.log lb;",
                "    upstream triton {",
                *servers,
                "        keepalive 64;",
                "    }",
                "    server {",
                "        listen 8080;",
                f"        client_max_body_size {self.max_body};",
                '        location = /lb/health { access_log off; return 200 "ok\\n"; }',
                "        location / {",
                "            proxy_pass http://triton;",
                "            proxy_http_version 1.1;",
                '            proxy_set_header Connection "";',
                "            proxy_connect_timeout 1s;",
                "            proxy_read_timeout 30s;",
                "            proxy_next_upstream error timeout http_502 http_503 http_504 non_idempotent;",
                "            proxy_next_upstream_tries 3;",
                "            proxy_next_upstream_timeout 10s;",
                "            add_header X-Upstream $upstream_addr always;",
                "        }",
                "    }",
                "}",
                "",
            ]
        )

    def write(self) -> None:
        (self.work_dir / "docker-compose.yml").write_text(yaml.safe_dump(self.compose_file(), sort_keys=False))
        (self.work_dir / "nginx.conf").write_text(self.nginx_conf())

    # ------------------------------------------------------------------ driving the stack

    def compose(self, *args: str, timeout_s: float = 900) -> str:
        command = compose_command() + ["-p", self.project, "-f", str(self.work_dir / "docker-compose.yml"), *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            raise ScaleoutError(f"{' '.join(command[:1] + list(args))} failed: {done.stderr.strip()[-600:]}")
        return done.stdout

    def container(self, name: str) -> str:
        return f"{self.project}_{name}_1" if compose_command() == ["docker-compose"] else f"{self.project}-{name}-1"

    def up(self) -> float:
        """Start replicas and nginx (nginx after every replica is healthy); seconds it took."""
        self.down()
        began = time.monotonic()
        self.compose("up", "-d", *self.names)
        self.wait_healthy(self.names, deadline_s=600)
        self.compose("up", "-d", "lb")
        self.wait_lb()
        return time.monotonic() - began

    def down(self) -> None:
        if (self.work_dir / "docker-compose.yml").exists():
            try:
                self.compose("down", "--remove-orphans", "-t", "5", timeout_s=300)
            except ScaleoutError:
                pass

    def health(self, name: str) -> str:
        done = subprocess.run(
            [
                "docker",
                "inspect",
                "--format",
                "{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}",
                self.container(name),
            ],
            capture_output=True,
            text=True,
        )
        return done.stdout.strip() if done.returncode == 0 else "absent"

    def wait_healthy(self, names: list[str], deadline_s: float) -> None:
        """Poll Docker's health status of the replicas until every one is healthy, or fail with their logs."""
        deadline = time.monotonic() + deadline_s
        while True:
            states = {n: self.health(n) for n in names}
            if all(s == "running healthy" for s in states.values()):
                return
            broken = [n for n, s in states.items() if s.startswith(("exited", "dead", "absent"))]
            if broken or time.monotonic() > deadline:
                logs = subprocess.run(
                    ["docker", "logs", "--tail", "15", self.container((broken or names)[0])],
                    capture_output=True,
                    text=True,
                )
                raise ScaleoutError(
                    f"replicas not healthy ({states}) after {deadline_s:.0f} s or exited; "
                    f"last log lines: {(logs.stdout + logs.stderr).strip()[-800:]}"
                )
            time.sleep(1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.lb_port}"

    def wait_lb(self, deadline_s: float = 60) -> None:
        import requests

        deadline = time.monotonic() + deadline_s
        while True:
            try:
                if requests.get(f"{self.url}/v2/health/ready", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise ScaleoutError(f"nginx on {self.url} never answered ready within {deadline_s:.0f} s")
            time.sleep(0.5)

    def reload_lb(self) -> None:
        """Rewrite nginx.conf (drained replicas marked down) and reload nginx gracefully."""
        self.write()
        done = subprocess.run(
            ["docker", "exec", self.container("lb"), "nginx", "-s", "reload"], capture_output=True, text=True
        )
        if done.returncode != 0:
            raise ScaleoutError(f"nginx reload failed: {done.stderr.strip()}")

    def serve_only(self, names: list[str]) -> None:
        """Send new requests only to ``names`` (the others drained at nginx, still running)."""
        self.drained = set(self.names) - set(names)
        self.reload_lb()

    def kill(self, name: str) -> tuple[float, float]:
        """SIGKILL a replica (no drain, no warning); ``time.time()`` when asked and when ``docker kill`` returned
        and when Docker reported it exited."""
        asked_at = time.time()
        subprocess.run(["docker", "kill", self.container(name)], capture_output=True, check=True)
        deadline = time.monotonic() + 10
        while not self.health(name).startswith(("exited", "dead")) and time.monotonic() < deadline:
            time.sleep(0.05)
        return asked_at, time.time()

    def pending(self, name: str) -> float:
        """Requests in flight on a replica (Triton's nv_inference_pending_request_count, summed)."""
        import requests

        text = requests.get(f"http://{self.address(name)}:8002/metrics", timeout=3).text
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("nv_inference_pending_request_count{")
        )

    def recreate(self, name: str, version: str) -> None:
        """Replace a replica's container with one serving bundle ``version`` (compose up --force-recreate)."""
        self.versions[name] = version
        self.write()
        self.compose("up", "-d", "--no-deps", "--force-recreate", name)

    def access_log(self) -> list[dict]:
        path = self.work_dir / "logs" / "access.log"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def reset_access_log(self) -> None:
        path = self.work_dir / "logs" / "access.log"
        if path.exists():
            path.write_text("")
