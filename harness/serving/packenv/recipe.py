"""The recipe of a packed env (``environment.yml``), the targets it is packed for, and the
Pythons that can build it."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

RECIPE = "environment.yml"
ENVS_DIR = "envs"
ENV_PLACEHOLDER = "$$TRITON_MODEL_DIRECTORY"
#: From a model folder of ``<root>/model_repository`` to ``<root>/envs``.
ENV_REFERENCE = ENV_PLACEHOLDER + "/../../" + ENVS_DIR + "/{file}"

#: Which server each pack target is for, and the Python of that server's stub: the one table of
#: these facts (the docker launcher's image profiles read it too). ``local`` = the interpreter
#: running the harness (its stub is used by the local launcher).
TARGETS = {
    "cpu": ("local tritonserver from the nvidia-pytriton wheel (stub of the harness's Python)", "local"),
    "gpu": ("NGC tritonserver image (Ubuntu 24.04's Python)", "3.12"),
    "ngc": ("NGC tritonserver image (Ubuntu 24.04's Python)", "3.12"),
    "npu": ("Ascend npu_ge tritonserver image (CANN 8.3's Python)", "3.10"),
    "cpu-image": ("the project's CPU tritonserver image (images/cpu, `make image`: Debian's Python)", "3.11"),
}


def stub_python_of(target: str) -> str:
    """The Python minor version (``"3.10"``) of ``target``'s backend stub (``TARGETS``)."""
    return TARGETS[target][1]


#: Where the target's server has its base Python (venv-pack envs link to it; ``--python-prefix``
#: overrides). The CPU image runs Debian's python3.11 from /usr.
TARGET_PYTHON_PREFIX = {"cpu-image": "/usr"}

#: Written into each sidecar; 2: venvs for a --python-prefix are made from ``<prefix>/bin/python`` (_venv_base).
PACKER_VERSION = 2

#: Left out of venv-pack tarballs: not needed at run time.
VENV_EXCLUDES = [
    "lib/python*/site-packages/pip/*",
    "lib/python*/site-packages/pip-*",
    "lib/python*/site-packages/setuptools/*",
    "lib/python*/site-packages/setuptools-*",
    "lib/python*/site-packages/_distutils_hack/*",
    "lib/python*/site-packages/distutils-precedence.pth",
    "bin/pip",
    "bin/pip3*",
]


class PackEnvError(RuntimeError):
    """Packing cannot go on; the message says why and what to do."""


class PackedEnvError(RuntimeError):
    """A model repository references packed envs that cannot work on the given server."""


class PythonEnvMismatch(PackedEnvError):
    """A packed env's Python differs from the Python of the stub that would load it."""


def local_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


# --------------------------------------------------------------------------- the recipe


@dataclass
class Recipe:
    """``environment.yml`` of a deployment, read for packing."""

    path: Path
    name: str
    channels: list[str]
    conda: list[str]  # conda dependencies other than python and pip
    pip: list[str]  # pip requirements (relative paths resolved)
    pip_no_deps: list[str]  # installed with ``pip install --no-deps``
    python_by_target: dict[str, str]
    #: Local source folders/files copied into the env (``sources:``): a change makes the env stale.
    sources: list[str] = field(default_factory=list)

    def sources_digest(self) -> str:
        """sha256 over the files of ``sources`` (paths and contents; no caches, no bytecode, and
        not the ``build/`` and ``*.egg-info`` that pip leaves in a source folder it installs)."""
        digest = hashlib.sha256()
        for root in sorted(self.sources):
            root_path = Path(root)
            files = (
                [root_path]
                if root_path.is_file()
                else sorted(p for p in root_path.rglob("*") if p.is_file() and _is_source(p.relative_to(root_path)))
            )
            for path in files:
                digest.update(str(path).encode() + b"\0" + path.read_bytes() + b"\0")
        return digest.hexdigest()

    def python_for(self, target: str) -> str:
        """``X.Y`` of the Python the env for ``target`` must be built with."""
        if target not in TARGETS and target not in self.python_by_target:
            raise PackEnvError(f"unknown target {target!r}; known: {sorted(set(TARGETS) | set(self.python_by_target))}")
        version = str(self.python_by_target.get(target, TARGETS.get(target, ("", "local"))[1]))
        return local_python() if version == "local" else version

    def digest(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


def _is_source(relative: Path) -> bool:
    """A file of a source folder, not what building or running it left there."""
    parts = relative.parts
    return (
        "__pycache__" not in parts
        and relative.suffix != ".pyc"
        and parts[0] != "build"
        and not any(part.endswith(".egg-info") for part in parts)
    )


def _resolve_requirement(entry: str, base: Path) -> str:
    """Local paths (``../..``, ``./pkg``) become absolute; requirement strings stay."""
    text = str(entry).strip()
    if text.startswith(("-e ", "--editable")):
        raise PackEnvError(
            f"{base / RECIPE}: editable requirement {text!r} cannot be packed; "
            "list the path without -e (it is installed as a copy)"
        )
    if text.startswith((".", "/", "~")):
        return str((base / os.path.expanduser(text)).resolve())
    return text


def load_recipe(path: str | Path) -> Recipe:
    """Parse an ``environment.yml`` (a deployment folder or the file itself)."""
    path = Path(path)
    if path.is_dir():
        path = path / RECIPE
    if not path.exists():
        raise PackEnvError(
            f"{path} does not exist: the deployment declares no environment for its Python models "
            "(see docs/python-environments.md)"
        )
    data = yaml.safe_load(path.read_text()) or {}
    conda, pip = [], []
    for dep in data.get("dependencies", []):
        if isinstance(dep, dict):
            pip += [_resolve_requirement(p, path.parent) for p in dep.get("pip", [])]
        elif not re.match(r"^(python|pip)([<>=!~ ].*)?$", str(dep)):
            conda.append(str(dep))
    return Recipe(
        path=path.resolve(),
        name=str(data.get("name", path.parent.name)),
        channels=list(data.get("channels", [])),
        conda=conda,
        pip=pip,
        pip_no_deps=[_resolve_requirement(p, path.parent) for p in data.get("pip_no_deps", [])],
        python_by_target={str(k): str(v) for k, v in (data.get("python_by_target") or {}).items()},
        sources=[_resolve_requirement(p, path.parent) for p in data.get("sources", [])],
    )


# --------------------------------------------------------------------------- interpreters


def _probe(executable: str) -> dict | None:
    """Version, real executable and prefix of a Python, or None when it does not run."""
    code = (
        "import json, sys, sysconfig; print(json.dumps({'version': '%d.%d' % sys.version_info[:2], "
        "'executable': sys.executable, 'base_prefix': sys.base_prefix, "
        "'shared': bool(sysconfig.get_config_var('Py_ENABLE_SHARED'))}))"
    )
    try:
        out = subprocess.run([executable, "-c", code], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def python_candidates(version: str) -> list[str]:
    """Where a Python ``version`` is looked for, in order."""
    candidates = []
    if version == local_python():
        candidates.append(getattr(sys, "_base_executable", None) or sys.executable)
    candidates.append(shutil.which(f"python{version}") or "")
    pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates += sorted(glob.glob(f"{pyenv_root}/versions/{version}.*/bin/python{version}"), reverse=True)
    candidates += [f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"]
    return [c for c in dict.fromkeys(candidates) if c]


def find_python(version: str, explicit: str | None = None, why: str = "") -> dict:
    """A runnable Python ``version`` (``X.Y``): ``explicit`` if given, else the candidates.

    Raises PackEnvError naming the version, why it is needed and what was tried.
    """
    tried = []
    for candidate in [explicit] if explicit else python_candidates(version):
        info = _probe(candidate)
        tried.append(f"{candidate} ({'Python ' + info['version'] if info else 'does not run'})")
        if info and info["version"] == version:
            return info
    reason = f" for {why}" if why else ""
    raise PackEnvError(
        f"Python {version} is needed{reason}: the packed env's Python must have the same minor version "
        f"as the Triton stub that loads it. None found; tried: {', '.join(tried) or 'nothing'}.\n"
        f"Install it (`pyenv install {version}`, or `apt-get install python{version}-venv` where the "
        f"distribution has it), pass --python /path/to/python{version}, or pack on a machine with conda "
        f"(conda-pack brings its own Python)."
    )
