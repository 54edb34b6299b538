"""tritonserver in a container through the Docker SDK: the project's CPU image, NGC, or Ascend ``npu_ge``.

Image profiles: ``docker_images``; the engine and the ownership labels of the harness's containers:
``docker_engine``; packed envs and the mounted repository copy (``/models``, ``/envs``, read-only):
``docker_envs``. ``start`` fails with a one-line ``ServerStartError`` before any wait when no engine
answers, the image is missing, a port is taken, or a packed env's Python differs from the image's stub.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

from harness.serving.launchers.base import ServerOptions, ServerStartError, StartedTritonServer, ports_in_use
from harness.serving.launchers.docker_engine import (
    HOST_LABEL,
    OWNER_LABEL,
    OWNER_VALUE,
    PID_LABEL,
    DockerStartError,
    engine,
    one_line,
    remove_leftovers,
)
from harness.serving.launchers.docker_envs import mounted_repository
from harness.serving.launchers.docker_images import (
    ImageProfile,
    apply_labels,
    profile_for,
)
from triton_gate.policy import write_policy
from triton_gate.serve import free_ports, serve_command

CONTAINER_MODEL_DIR = "/models"
CONTAINER_ENVS_DIR = "/envs"
#: Read-only folder in the container holding the front gate's admin token file.
CONTAINER_SECRET_DIR = "/run/triton-gate"
#: The deployment's gate policy, beside the token in that folder.
POLICY_FILE = "gate-policy.json"
API_KEY_FILE = "api-keys"


class DockerTritonServer(StartedTritonServer):
    """tritonserver in a container; model repository (and packed envs) mounted read-only."""

    mode = "docker"

    def __init__(
        self,
        options: ServerOptions,
        profile: ImageProfile | None = None,
        host: str = "127.0.0.1",
        ports: tuple[int, int, int] | None = None,
        exit_timeout_s: int = 5,
    ):
        super().__init__(options, host, ports or free_ports(3), exit_timeout_s)
        self.profile = profile or profile_for(options)
        self.options.allow_grpc = self.options.allow_grpc and self.profile.has_grpc
        self.container = None
        self.repository = Path(options.model_repository)
        self.envs_dir: Path | None = None
        self.work_dir: Path | None = None
        self._last_logs = ""
        #: Served through the image's front gate (label ``org.triton-harness.gate=serve``: the CPU image),
        #: known once the image's labels are read in start(); the admin token reaches the gate in a
        #: 0600 file mounted read-only, never on a command line.
        self.gate = False
        self.secret_dir: Path | None = None

    @property
    def restricted(self) -> bool:
        """Only the image's front gate restricts APIs."""
        return self.gate

    # ------------------------------------------------------------------ the container

    def server_args(self) -> list[str]:
        """The container's command: tritonserver, behind the image's front gate when it has one."""
        triton = self.triton_command("tritonserver", CONTAINER_MODEL_DIR)
        if not self.gate:
            return triton
        gate_args = ["--admin-token-file", f"{CONTAINER_SECRET_DIR}/admin-token"]
        if self.options.gate_policy is not None:
            gate_args += ["--policy-file", f"{CONTAINER_SECRET_DIR}/{POLICY_FILE}"]
        if self.options.api_keys:
            gate_args += ["--api-key-file", f"{CONTAINER_SECRET_DIR}/{API_KEY_FILE}"]
        return serve_command(triton, *gate_args)

    def container_spec(self) -> dict:
        """Keyword arguments for ``docker.from_env().containers.run``."""
        ports = {"8000/tcp": (self.host, self.http_port), "8002/tcp": (self.host, self.metrics_port)}
        if self.options.allow_grpc:
            ports["8001/tcp"] = (self.host, self.grpc_port)
        volumes = {str(self.repository.resolve()): {"bind": CONTAINER_MODEL_DIR, "mode": "ro"}}
        volumes.update(self.profile.volumes)
        mounts = {
            str(Path(host).resolve()): {"bind": inside, "mode": "ro"} for host, inside in self.options.mounts.items()
        }
        if self.envs_dir is not None:
            # The packed copy's envs folder replaces the deployment's own at /envs.
            mounts = {h: m for h, m in mounts.items() if m["bind"] != CONTAINER_ENVS_DIR}
            mounts[str(self.envs_dir.resolve())] = {"bind": CONTAINER_ENVS_DIR, "mode": "ro"}
        volumes.update(mounts)
        if self.gate and self.secret_dir is not None:
            volumes[str(self.secret_dir)] = {"bind": CONTAINER_SECRET_DIR, "mode": "ro"}
        return {
            "image": self.profile.image,
            "command": self.server_args(),
            "detach": True,
            "ports": ports,
            "volumes": volumes,
            "devices": list(self.profile.devices),
            "shm_size": self.profile.shm_size,
            "environment": dict(self.options.env),
            "labels": {OWNER_LABEL: OWNER_VALUE, PID_LABEL: str(os.getpid()), HOST_LABEL: socket.gethostname()},
        }

    # ------------------------------------------------------------------ pre-flight (no waiting)

    def _image(self, client):
        """The image, its labels applied to the profile; DockerStartError when absent."""
        import docker

        image = self.profile.image
        try:
            found = client.images.get(image)
        except docker.errors.ImageNotFound:
            if self.profile.built_here:
                raise DockerStartError(
                    f"image {image} is not on this engine: build it with `make image` "
                    f"(IMAGE={image}), or choose another with --image / IMAGE="
                ) from None
            try:
                found = client.images.pull(image)
            except Exception as exc:  # noqa: BLE001 - no registry answers here
                raise DockerStartError(
                    f"image {image} is not on this engine and cannot be pulled ({one_line(exc)[:160]}): build the "
                    f"CPU image with `make image` and serve with it (the default for target cpu), or pull {image} "
                    "where a registry answers"
                ) from None
        apply_labels(self.profile, found.labels)
        return found

    def _check_ports(self) -> None:
        busy = ports_in_use(
            self.host, (self.http_port, self.grpc_port if self.options.allow_grpc else None, self.metrics_port)
        )
        if busy:
            raise DockerStartError("; ".join(busy))

    def _prepare_repository(self) -> None:
        """Packed env beside a generated copy of the repository; every env checked against the stub."""
        mounted = mounted_repository(self.options, self.profile)
        self.repository, self.work_dir, self.envs_dir = mounted.path, mounted.work_dir, mounted.envs_dir

    def start(self) -> None:
        """Engine, image, leftovers, ports, packed envs: each checked at once; then run the container."""
        client = engine()
        self._image(client)
        self.gate = self.profile.labels.get("gate") == "serve"
        remove_leftovers(client, log=print)
        self._check_ports()
        try:
            self._prepare_repository()
            if self.gate:
                self._write_secret()
            self.container = client.containers.run(**self.container_spec())
        except DockerStartError:
            self._cleanup_work_dir()
            raise
        except Exception as exc:  # noqa: BLE001 - docker API errors (port taken meanwhile, bad mount ...)
            self._cleanup_work_dir()
            raise DockerStartError(f"docker could not start {self.profile.image}: {one_line(exc)[:300]}") from None

    # ------------------------------------------------------------------ running

    def is_running(self) -> bool:
        if self.container is None:
            return False
        try:
            self.container.reload()
        except Exception:  # noqa: BLE001 - removed container
            return False
        return self.container.status in ("created", "running")

    def wait_ready(self, timeout_s: float | None = None, models=None) -> float:
        """Ready as the base class sees it, and answered by our container (its port mapping, still running)."""
        waited = super().wait_ready(timeout_s, models)
        self.container.reload()
        bound = (self.container.ports.get("8000/tcp") or [{}])[0]
        if self.container.status != "running" or str(bound.get("HostPort")) != str(self.http_port):
            raise ServerStartError(
                self._failure_message(
                    f"a server answered on {self.http_url} but it is not container {self.container.short_id} "
                    f"(status {self.container.status}, port mapping {bound})"
                )
            )
        return waited

    def logs(self) -> str:
        if self.container is None:
            return self._last_logs
        try:
            self._last_logs = self.container.logs().decode(errors="replace")
        except Exception:  # noqa: BLE001
            pass
        return self._last_logs

    def backend_implementation(self, backend: str) -> str:
        labelled = self.profile.labels.get(f"backend.{backend}")
        if labelled:
            return labelled
        if backend == "python":
            return backend
        return f"{backend} (native, {self.profile.image})"

    def describe(self) -> dict:
        info = super().describe()
        info["image"] = self.profile.image
        info["gate"] = self.gate
        if self.container is not None:
            info["image_id"] = self.container.attrs.get("Image")
            info["container"] = self.container.short_id
        return info

    def stop(self) -> None:
        """Stop and remove the container, then the generated repository copy."""
        if self.container is not None:
            self.logs()
            try:
                self.container.stop(timeout=self.exit_timeout_s + 5)
            except Exception:  # noqa: BLE001 - already gone
                pass
            try:
                self.container.remove(force=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
            self.container = None
        self._cleanup_work_dir()

    def _write_secret(self) -> None:
        """The admin token (and API keys) in 0600 files of a fresh 0700 folder, mounted read-only into the container."""
        self.secret_dir = Path(tempfile.mkdtemp(prefix="triton-gate-secret-"))
        secrets = {"admin-token": self.admin_token}
        if self.options.api_keys:
            secrets[API_KEY_FILE] = "\n".join(self.options.api_keys) + "\n"
        for name, text in secrets.items():
            with os.fdopen(os.open(self.secret_dir / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
                f.write(text)
        if self.options.gate_policy is not None:
            write_policy(self.options.gate_policy, self.secret_dir / POLICY_FILE)

    def _cleanup_work_dir(self) -> None:
        if self.secret_dir is not None:
            shutil.rmtree(self.secret_dir, ignore_errors=True)
            self.secret_dir = None
        if self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.work_dir = None
            self.envs_dir = None
