"""Where perf_analyzer runs: a working local binary, else a Debian 13 container (the wheel needs glibc 2.38).

The image (``make perf-analyzer-image``, images/perf-analyzer/) carries the PyPI ``perf-analyzer``
wheel on glibc 2.41. It runs with ``--network host``, so the URLs of a server on this machine work
unchanged, and with the run's temporary folder mounted at the same path, so the ``--input-data``
and ``-f`` paths of the command line are the same inside and out. With ``HARNESS_PIN`` naming
generator CPUs, the container gets them through ``--cpuset-cpus`` (a container does not inherit
the affinity of the ``docker`` client that starts it).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

IMAGE_ENV = "PERF_ANALYZER_IMAGE"
DEFAULT_IMAGE = "triton-harness/perf-analyzer:2.60.0"
VERSION_LABEL = "org.triton-harness.perf-analyzer-version"
BUILD_HINT = "make perf-analyzer-image"


def default_image() -> str:
    return os.environ.get(IMAGE_ENV) or DEFAULT_IMAGE


@lru_cache(maxsize=4)
def image_version(image: str) -> str | None:
    """The perf_analyzer version the image carries (its label), or None when no engine has the image."""
    try:
        probe = subprocess.run(
            ["docker", "image", "inspect", image, "--format", f'{{{{ index .Config.Labels "{VERSION_LABEL}" }}}}'],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    version = probe.stdout.strip()
    return version if probe.returncode == 0 and version and version != "<no value>" else None


def docker_command(cmd: list[str], image: str, workdir: Path, cpus: set[int] | None = None) -> list[str]:
    """``docker run`` of ``cmd`` in ``image``: host network, ``workdir`` at the same path, pinned to ``cpus``."""
    run = ["docker", "run", "--rm", "--network", "host", "--user", f"{os.getuid()}:{os.getgid()}"]
    run += ["-v", f"{workdir}:{workdir}"]
    if cpus:
        run += ["--cpuset-cpus", ",".join(str(c) for c in sorted(cpus))]
    return [*run, image, *cmd]


@dataclass(frozen=True)
class Runner:
    """Where perf_analyzer runs: the local ``binary``, or the binary inside ``image``."""

    version: str
    binary: str = "perf_analyzer"
    image: str | None = None

    @property
    def generator(self) -> str:
        """The records' ``generator``: ``perf_analyzer 2.60.0 (container)`` or ``perf_analyzer (<version line>)``."""
        return f"perf_analyzer {self.version} (container)" if self.image else f"perf_analyzer ({self.version})"

    def command(self, cmd: list[str], workdir: Path, generator_cpus: set[int] | None = None) -> list[str]:
        """What to execute for a perf_analyzer command line whose files are under ``workdir``.

        A local binary inherits this process's affinity (set by ``pinning.apply_pinning``); a
        container is pinned by ``--cpuset-cpus``.
        """
        if self.image is None:
            return cmd
        return docker_command(["perf_analyzer", *cmd[1:]], self.image, workdir, generator_cpus)

    def pinning(self, described: str, generator_cpus: set[int] | None) -> str:
        """The records' ``pinning``: ``pinning.apply_pinning``'s words, plus how the container was pinned."""
        if self.image is None or not generator_cpus:
            return described
        return (
            f"{described} (perf_analyzer container: --cpuset-cpus {','.join(str(c) for c in sorted(generator_cpus))})"
        )


def glibc_version() -> str:
    name, version = platform.libc_ver()
    return version or "unknown"


@lru_cache(maxsize=4)
def availability(binary: str = "perf_analyzer") -> tuple[bool, str]:
    """``(True, version line)`` when perf_analyzer runs here, else ``(False, why not)``."""
    path = shutil.which(binary)
    if path is None:
        return False, (
            f"no `{binary}` on PATH; the perf-analyzer 2.60 wheel needs glibc 2.38, this machine has "
            f"glibc {glibc_version()}; pip's tritonclient[all] only brings a 0.1.0 placeholder"
        )
    try:
        probe = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"`{path} --version` failed: {exc}"
    text = (probe.stdout + probe.stderr).strip()
    if "GLIBC" in text:
        return False, f"`{path}` needs a newer glibc than this machine's {glibc_version()}: {text.splitlines()[0]}"
    if probe.returncode != 0 or "perf_analyzer" not in text.lower().replace("-", "_").replace(" ", "_"):
        first = text.splitlines()[0] if text else f"exit status {probe.returncode}"
        return False, f"`{path}` is not a working perf_analyzer (placeholder?): {first}"
    return True, text.splitlines()[0]


def select_runner(binary: str = "perf_analyzer", image: str | None = None) -> Runner:
    """A working local binary, else the perf_analyzer image; RuntimeError (one line) when neither."""
    ok, why = availability(binary)
    if ok:
        return Runner(version=why, binary=binary)
    image = image or default_image()
    version = image_version(image)
    if version is None:
        raise RuntimeError(f"perf_analyzer cannot run here ({why}) and no Docker engine has {image}: `{BUILD_HINT}`")
    return Runner(version=version, image=image)
