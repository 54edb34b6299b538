"""tritonserver in a container through the Docker SDK: NGC CPU image, or Ascend ``npu_ge`` image.

No Docker engine runs on the machines this project is developed on, so this launcher is
tested through the container spec it builds (``container_spec``), not by running it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from harness.launchers.base import ServerOptions, StartedTritonServer
from harness.launchers.local import free_port

#: 25.x images are Ubuntu 24.04 with Python 3.12 (the stub a packed env must match); 24.x were 3.10.
NGC_IMAGE = os.environ.get("TRITON_NGC_IMAGE", "nvcr.io/nvidia/tritonserver:25.01-py3")
ASCEND_IMAGE = os.environ.get("TRITON_ASCEND_IMAGE", "ascendhub.huawei.com/public-ascendhub/tritonserver-npu_ge:latest")
CONTAINER_MODEL_DIR = "/models"


@dataclass
class ImageProfile:
    """What a family of Triton images needs to run: devices, mounts, protocols, stub Python."""

    image: str
    devices: list[str] = field(default_factory=list)
    volumes: dict[str, dict] = field(default_factory=dict)
    has_grpc: bool = True
    stub_python: str = "3.12"
    shm_size: str = "1g"


def ngc_profile(image: str | None = None) -> ImageProfile:
    """NGC ``tritonserver:<ver>-py3`` on CPU (or GPU with the NVIDIA runtime)."""
    return ImageProfile(image=image or NGC_IMAGE, stub_python="3.12")


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
        image=image or ASCEND_IMAGE, devices=devices, volumes=volumes, has_grpc=False, stub_python="3.10"
    )


class DockerTritonServer(StartedTritonServer):
    """tritonserver in a container; model repository mounted read-only."""

    mode = "docker"

    def __init__(self, options: ServerOptions, profile: ImageProfile | None = None, host: str = "127.0.0.1"):
        super().__init__(options, host, (free_port(), free_port(), free_port()))
        if profile is None:
            if options.target == "npu":
                profile = ascend_profile(options.image, options.device_ids)
            else:
                profile = ngc_profile(options.image)
        self.profile = profile
        self.options.allow_grpc = self.options.allow_grpc and self.profile.has_grpc
        self.container = None

    def server_args(self) -> list[str]:
        """tritonserver's arguments inside the container."""
        return ["tritonserver", f"--model-repository={CONTAINER_MODEL_DIR}"] + self.option_args()

    def container_spec(self) -> dict:
        """Keyword arguments for ``docker.from_env().containers.run``."""
        ports = {"8000/tcp": (self.host, self.http_port), "8002/tcp": (self.host, self.metrics_port)}
        if self.options.allow_grpc:
            ports["8001/tcp"] = (self.host, self.grpc_port)
        volumes = {str(Path(self.options.model_repository).resolve()): {"bind": CONTAINER_MODEL_DIR, "mode": "ro"}}
        volumes.update(self.profile.volumes)
        volumes.update({str(Path(host).resolve()): {"bind": inside, "mode": "ro"} for host, inside in self.options.mounts.items()})
        return {
            "image": self.profile.image,
            "command": self.server_args(),
            "detach": True,
            "remove": True,
            "ports": ports,
            "volumes": volumes,
            "devices": list(self.profile.devices),
            "shm_size": self.profile.shm_size,
            "environment": dict(self.options.env),
            "labels": {"started-by": "triton-harness"},
        }

    def start(self) -> None:
        import docker

        self.container = docker.from_env().containers.run(**self.container_spec())

    def is_running(self) -> bool:
        if self.container is None:
            return False
        try:
            self.container.reload()
        except Exception:  # noqa: BLE001 - removed container
            return False
        return self.container.status in ("created", "running")

    def logs(self) -> str:
        if self.container is None:
            return ""
        try:
            return self.container.logs().decode(errors="replace")
        except Exception:  # noqa: BLE001
            return ""

    def backend_implementation(self, backend: str) -> str:
        return f"{backend} (native, {self.profile.image})"

    def stop(self) -> None:
        if self.container is not None:
            try:
                self.container.stop(timeout=10)
            except Exception:  # noqa: BLE001 - already gone
                pass
            self.container = None
