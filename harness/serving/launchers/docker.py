"""tritonserver in a container through the Docker SDK: the project's CPU image, NGC, or Ascend ``npu_ge``.

Images and what they carry:

- ``cpu`` target: the CPU image that ``make image`` builds here from nothing (``images/cpu``:
  Debian python3.11, the tritonserver 2.51 of the ``nvidia-pytriton`` wheel laid out like NGC,
  the Python 3.11 stub, the harness's Python-based ``onnxruntime`` backend). Its labels
  (``org.triton-harness.*``) say the stub's Python, the pack target of its envs and which
  implementation serves each backend; the launcher reads them.
- ``gpu`` target, or an ``nvcr.io/nvidia/tritonserver`` image: NGC (Python 3.12 stub, native backends).
- ``npu`` target: the Ascend CANN image with ``npu_ge`` (HTTP only, Python 3.10 stub, device nodes).

Python-backend models get their packages as in production: the deployment's packed env
(``options.python_env``, see ``attach_packed_env``) is put beside a generated copy of the
repository whose Python configs say ``EXECUTION_ENV_PATH = $$TRITON_MODEL_DIRECTORY/../../envs/<file>``,
and both are mounted read-only (``/models``, ``/envs``).

``start`` fails with a one-line ``ServerStartError`` before any wait when no engine answers,
the image is missing, a port is taken, or a packed env's Python differs from the image's stub.
Containers carry the label ``started-by=triton-harness`` plus the owner's PID and host; they are
removed on ``stop``, and those of a dead owner (a crashed run) are removed at the next start.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from harness.repository import derive
from harness.serving.launchers.base import ServerOptions, ServerStartError, StartedTritonServer, port_in_use
from harness.serving.launchers.local import ADMIN_HEADER, free_port

#: The image ``make image`` builds (images/cpu); ``make ... IMAGE=`` exports TRITON_CPU_IMAGE.
CPU_IMAGE = os.environ.get("TRITON_CPU_IMAGE", "triton-harness/tritonserver-cpu:2.51.0")
#: 25.x images are Ubuntu 24.04 with Python 3.12 (the stub a packed env must match); 24.x were 3.10.
NGC_IMAGE = os.environ.get("TRITON_NGC_IMAGE", "nvcr.io/nvidia/tritonserver:25.01-py3")
ASCEND_IMAGE = os.environ.get("TRITON_ASCEND_IMAGE", "ascendhub.huawei.com/public-ascendhub/tritonserver-npu_ge:latest")
CONTAINER_MODEL_DIR = "/models"
CONTAINER_ENVS_DIR = "/envs"
#: Read-only folder in the container holding the front gate's admin token file.
CONTAINER_SECRET_DIR = "/run/triton-gate"
LABEL_PREFIX = "org.triton-harness."
OWNER_LABEL = "started-by"
OWNER_VALUE = "triton-harness"
PID_LABEL = "triton-harness.pid"
HOST_LABEL = "triton-harness.host"


class DockerStartError(ServerStartError):
    """A container cannot be started; one line that says what to do."""


@dataclass
class ImageProfile:
    """What a family of Triton images needs to run: devices, mounts, protocols, stub Python."""

    image: str
    devices: list[str] = field(default_factory=list)
    volumes: dict[str, dict] = field(default_factory=dict)
    has_grpc: bool = True
    stub_python: str = "3.12"
    shm_size: str = "1g"
    #: ``harness.serving.packenv`` target whose envs this image's stub runs.
    pack_target: str = "ngc"
    #: Built by this project (``make image``): never pulled, the fix is ``make image``.
    built_here: bool = False
    #: ``org.triton-harness.*`` labels of the image, once read.
    labels: dict[str, str] = field(default_factory=dict)


def cpu_image_profile(image: str | None = None) -> ImageProfile:
    """The project's CPU image (images/cpu): Debian Python 3.11 stub, Python onnxruntime backend."""
    image = image or CPU_IMAGE
    built_here = image == CPU_IMAGE or image.startswith("triton-harness/")  # else: try to pull it
    return ImageProfile(image=image, stub_python="3.11", pack_target="cpu-image", built_here=built_here, shm_size="2g")


def ngc_profile(image: str | None = None) -> ImageProfile:
    """NGC ``tritonserver:<ver>-py3`` on CPU (or GPU with the NVIDIA runtime)."""
    return ImageProfile(image=image or NGC_IMAGE, stub_python="3.12", pack_target="ngc")


def ascend_profile(image: str | None = None, device_ids: list[int] | None = None) -> ImageProfile:
    """The Ascend CANN 8.3 Triton image with the ``npu_ge`` backend (HTTP only, Python 3.10 stub)."""
    device_ids = device_ids if device_ids is not None else [0]
    devices = [f"/dev/davinci{i}:/dev/davinci{i}:rwm" for i in device_ids]
    devices += [f"{d}:{d}:rwm" for d in ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")]
    volumes = {
        path: {"bind": path, "mode": "ro"}
        for path in ("/usr/local/Ascend/driver", "/usr/local/dcmi", "/usr/local/bin/npu-smi")
    }
    return ImageProfile(
        image=image or ASCEND_IMAGE,
        devices=devices,
        volumes=volumes,
        has_grpc=False,
        stub_python="3.10",
        pack_target="npu",
    )


def profile_for(options: ServerOptions) -> ImageProfile:
    """The profile of ``options.target`` / ``options.image`` (before the image's labels are read); the
    manifest's ``stub_python`` for the target, when it states one, over the profile's default."""
    if options.target == "npu":
        profile = ascend_profile(options.image, options.device_ids)
    elif options.target == "gpu" or (options.image and "nvcr.io/nvidia/tritonserver" in options.image):
        profile = ngc_profile(options.image)
    else:
        profile = cpu_image_profile(options.image)
    profile.stub_python = options.stub_python or profile.stub_python
    return profile


def apply_labels(profile: ImageProfile, labels: dict[str, str] | None) -> ImageProfile:
    """Take the stub's Python and the pack target from the image's own labels when it has them."""
    ours = {k[len(LABEL_PREFIX) :]: v for k, v in (labels or {}).items() if k.startswith(LABEL_PREFIX)}
    profile.labels = ours
    profile.stub_python = ours.get("stub-python", profile.stub_python)
    profile.pack_target = ours.get("pack-target", profile.pack_target)
    if ours:
        profile.built_here = True
    return profile


def _one_line(text: object) -> str:
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
        reason = _one_line(exc)[:160]
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


def links_outside(folder: str | Path) -> bool:
    """Whether any symbolic link under ``folder`` points outside it (a mount of it would dangle)."""
    root = Path(folder).resolve()
    for parent, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(parent, name)
            if path.is_symlink() and not path.resolve().is_relative_to(root):
                return True
    return False


def attach_packed_env(deployment, options: ServerOptions) -> ServerOptions:
    """Docker mode: point ``options.python_env`` at the deployment's packed env for the image's stub.

    ``deployments/<d>/envs/<pack target>.tar.gz``, the pack target read from the image's labels
    (``cpu-image`` for the CPU image). Nothing is packed here: ``DockerTritonServer.start`` packs
    a missing or stale env itself, after its one-line checks (engine, image, ports). A deployment
    without ``environment.yml`` or without Python-backend models is left alone.
    """
    from harness.repository import python_models
    from harness.serving.packenv import RECIPE, default_output

    if not (Path(deployment.path) / RECIPE).exists():
        return options
    if not python_models(options.model_repository, options.model_config_name):
        return options
    profile = profile_for(options)
    profile = apply_labels(profile, image_labels(profile.image))
    options.python_env = str(default_output(deployment.path, profile.pack_target))
    return options


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
        pack_stale_envs: bool = True,
    ):
        super().__init__(options, host, ports or (free_port(), free_port(), free_port()))
        self.profile = profile or profile_for(options)
        self.options.allow_grpc = self.options.allow_grpc and self.profile.has_grpc
        self.exit_timeout_s = exit_timeout_s
        self.pack_stale_envs = pack_stale_envs
        self.container = None
        self.repository = Path(options.model_repository)
        self.envs_dir: Path | None = None
        self.work_dir: Path | None = None
        self._last_logs = ""
        #: Served through the image's front gate (label ``org.triton-harness.gate=serve``: the CPU image),
        #: known once the image's labels are read in start(); the admin token reaches the gate in a
        #: 0600 file mounted read-only, never on a command line.
        self.gate = False
        self.admin_token = uuid.uuid4().hex
        self.secret_dir: Path | None = None

    # ------------------------------------------------------------------ the container

    def server_args(self) -> list[str]:
        """The container's command: tritonserver, behind the image's front gate when it has one."""
        triton = [
            "tritonserver",
            f"--model-repository={CONTAINER_MODEL_DIR}",
            f"--exit-timeout-secs={self.exit_timeout_s}",
        ] + self.option_args()
        if not self.gate:
            return triton
        return [
            "python3",
            "-m",
            "harness.serving.gate",
            "serve",
            "--admin-token-file",
            f"{CONTAINER_SECRET_DIR}/admin-token",
            "--",
        ] + triton

    @property
    def admin_headers(self) -> dict[str, str]:
        """Headers for internal models and the restricted APIs behind the gate (none without a gate)."""
        return {ADMIN_HEADER: self.admin_token} if self.gate else {}

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
                    f"image {image} is not on this engine and cannot be pulled ({_one_line(exc)[:160]}): build the "
                    f"CPU image with `make image` and serve with it (the default for target cpu), or pull {image} "
                    "where a registry answers"
                ) from None
        apply_labels(self.profile, found.labels)
        return found

    def _check_ports(self) -> None:
        named = [("HTTP", self.http_port, "--http-port"), ("metrics", self.metrics_port, "--metrics-port")]
        if self.options.allow_grpc:
            named.insert(1, ("gRPC", self.grpc_port, "--grpc-port"))
        for what, port, flag in named:
            if port_in_use(self.host, port):
                raise DockerStartError(
                    f"port {port} ({what}) on {self.host} is in use: stop what listens there or "
                    f"choose another port with {flag}"
                )

    def _prepare_repository(self) -> None:
        """Packed env beside a generated copy of the repository; every env checked against the stub."""
        from harness.serving.packenv import (
            RECIPE,
            PackEnvError,
            check_repository,
            inspect_env,
            is_stale,
            load_recipe,
            pack,
            packed_repository,
        )

        stub = self.profile.stub_python
        target = self.profile.pack_target
        repository = Path(self.options.model_repository)
        if self.options.python_env:
            tarball = Path(self.options.python_env)
            deployment = tarball.parent.parent.name
            recipe_path = tarball.parent.parent / RECIPE
            if self.pack_stale_envs and recipe_path.exists() and tarball.name == f"{target}.tar.gz":
                # The deployment's own env: (re)pack it when missing or stale, as `make pack-env` would.
                recipe = load_recipe(recipe_path)
                reason = is_stale(tarball, recipe, target)
                if reason:
                    print(
                        f"{deployment}: packing its Python env for {self.profile.image} "
                        f"(target {target}, Python {stub}: {reason})",
                        flush=True,
                    )
                    try:
                        pack(recipe, target, tarball, log=lambda *_: None)
                    except PackEnvError as exc:
                        raise DockerStartError(f"packing {tarball} failed: {_one_line(exc)[:300]}") from None
            if not tarball.exists():
                raise DockerStartError(
                    f"packed env {tarball} does not exist: build it with "
                    f"`make pack-env DEPLOYMENT={deployment} TARGET={target}`"
                )
            info = inspect_env(tarball)
            if info.python != stub:
                raise DockerStartError(
                    f"packed env {tarball} is Python {info.python or '(unknown)'} but {self.profile.image}'s Python "
                    f"backend stub is Python {stub}: repack it with `make pack-env DEPLOYMENT={deployment} "
                    f"TARGET={target}`"
                )
            self.work_dir = Path(tempfile.mkdtemp(prefix="triton-docker-"))
            repository = packed_repository(repository, tarball, self.work_dir)
            self.envs_dir = self.work_dir / "envs"
        elif links_outside(repository):
            # A derived repository (a config variant) links to files the container cannot see.
            self.work_dir = Path(tempfile.mkdtemp(prefix="triton-docker-"))
            repository = derive(repository, self.work_dir, link="hard")
        self.repository = repository
        # The repository's own EXECUTION_ENV_PATHs too (e.g. configs written for another image): on the
        # host, $$TRITON_MODEL_DIRECTORY/../../envs is the folder mounted at /envs.
        problems = check_repository(repository, stub, model_config_name=self.options.model_config_name, target=target)
        if problems:
            raise DockerStartError(
                f"not started: {_one_line(problems[0])}"
                + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
            )

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
            raise DockerStartError(f"docker could not start {self.profile.image}: {_one_line(exc)[:300]}") from None

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
        """The admin token in a 0600 file of a fresh 0700 folder, mounted read-only into the container."""
        self.secret_dir = Path(tempfile.mkdtemp(prefix="triton-gate-secret-"))
        fd = os.open(self.secret_dir / "admin-token", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.admin_token)

    def _cleanup_work_dir(self) -> None:
        if self.secret_dir is not None:
            shutil.rmtree(self.secret_dir, ignore_errors=True)
            self.secret_dir = None
        if self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.work_dir = None
            self.envs_dir = None
