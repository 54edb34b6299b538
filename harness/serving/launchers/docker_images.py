"""Triton images the docker launcher runs, and what each needs: the project's CPU image, NGC, Ascend.

An ``ImageProfile`` says a family's devices, mounts, protocols, the Python of its backend stub and
the ``harness.serving.packenv`` target of its envs; the CPU image states the last two (and which
implementation serves each backend) in its own ``org.triton-harness.*`` labels, read by
``apply_labels``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from harness.serving.launchers.base import ServerOptions
from harness.serving.packenv import stub_python_of

#: The image ``make image`` builds (images/cpu); ``make ... IMAGE=`` exports TRITON_CPU_IMAGE.
CPU_IMAGE = os.environ.get("TRITON_CPU_IMAGE", "triton-harness/tritonserver-cpu:2.51.0")
#: 25.x images are Ubuntu 24.04 with Python 3.12 (the stub a packed env must match); 24.x were 3.10.
NGC_IMAGE = os.environ.get("TRITON_NGC_IMAGE", "nvcr.io/nvidia/tritonserver:25.01-py3")
ASCEND_IMAGE = os.environ.get("TRITON_ASCEND_IMAGE", "ascendhub.huawei.com/public-ascendhub/tritonserver-npu_ge:latest")
LABEL_PREFIX = "org.triton-harness."


@dataclass
class ImageProfile:
    """What a family of Triton images needs to run: devices, mounts, protocols, stub Python."""

    image: str
    devices: list[str] = field(default_factory=list)
    volumes: dict[str, dict] = field(default_factory=dict)
    has_grpc: bool = True
    stub_python: str = ""
    shm_size: str = "1g"
    #: ``harness.serving.packenv`` target whose envs this image's stub runs.
    pack_target: str = "ngc"
    #: Built by this project (``make image``): never pulled, the fix is ``make image``.
    built_here: bool = False
    #: ``org.triton-harness.*`` labels of the image, once read.
    labels: dict[str, str] = field(default_factory=dict)


def cpu_image_profile(image: str | None = None) -> ImageProfile:
    """The project's CPU image (images/cpu): Debian's Python stub, Python onnxruntime backend."""
    image = image or CPU_IMAGE
    built_here = image == CPU_IMAGE or image.startswith("triton-harness/")  # else: try to pull it
    return ImageProfile(
        image=image,
        stub_python=stub_python_of("cpu-image"),
        pack_target="cpu-image",
        built_here=built_here,
        shm_size="2g",
    )


def ngc_profile(image: str | None = None) -> ImageProfile:
    """NGC ``tritonserver:<ver>-py3`` on CPU (or GPU with the NVIDIA runtime)."""
    return ImageProfile(image=image or NGC_IMAGE, stub_python=stub_python_of("ngc"), pack_target="ngc")


def ascend_profile(image: str | None = None, device_ids: list[int] | None = None) -> ImageProfile:
    """The Ascend CANN 8.3 Triton image with the ``npu_ge`` backend (HTTP only; stub Python: ``TARGETS``)."""
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
        stub_python=stub_python_of("npu"),
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
