"""Packed Python environments for Triton's Python backend (``EXECUTION_ENV_PATH``; docs/python-environments.md).

A deployment's ``environment.yml`` (the recipe: ``load_recipe``, its targets in ``TARGETS``) is packed
into a tarball with venv + venv-pack (``pack``, current unless ``is_stale``);
``packed_repository`` writes a repository copy whose Python configs use it, and ``check_repository``
is the pre-flight of every ``EXECUTION_ENV_PATH`` against the stub's Python.

    python -m harness pack-env <deployment> [--target T]   # -> deployments/<deployment>/envs/<T>.tar.gz
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import yaml

from harness.provenance import replace_atomically
from harness.repository import derive, effective_config_path, link_or_copy, parameter, read_config, set_parameter

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

#: What building or running a local source folder leaves in it: never packed, never part of its digest.
BUILD_OUTPUTS = ("build", "*.egg-info", "__pycache__", "*.pyc")

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


def local_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


# --------------------------------------------------------------------------- the recipe


@dataclass
class Recipe:
    """``environment.yml`` of a deployment, read for packing."""

    path: Path
    name: str
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
    """A file of a source folder, not what building or running it left there (``BUILD_OUTPUTS``)."""
    return not any(fnmatch.fnmatch(part, pattern) for part in relative.parts for pattern in BUILD_OUTPUTS)


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
    pip = []
    for dep in data.get("dependencies", []):
        if isinstance(dep, dict):
            pip += [_resolve_requirement(p, path.parent) for p in dep.get("pip", [])]
        elif not re.match(r"^(python|pip)([<>=!~ ].*)?$", str(dep)):
            raise PackEnvError(
                f"{path}: conda dependency {dep!r} cannot go into a venv; list it under `pip:` "
                "(see docs/python-environments.md)"
            )
    return Recipe(
        path=path.resolve(),
        name=str(data.get("name", path.parent.name)),
        pip=pip,
        pip_no_deps=[_resolve_requirement(p, path.parent) for p in data.get("pip_no_deps", [])],
        python_by_target={str(k): str(v) for k, v in (data.get("python_by_target") or {}).items()},
        sources=[_resolve_requirement(p, path.parent) for p in data.get("sources", [])],
    )


# --------------------------------------------------------------------------- interpreters


def _python_needed(version: str, why: str, detail: str) -> PackEnvError:
    """The error of a missing or wrong Python: the version needed, why, and both ways to give it."""
    return PackEnvError(
        f"Python {version} is needed for {why}: the packed env's Python must have the same minor version "
        f"as the Triton stub that loads it. {detail}\n"
        f"Pass --python /path/to/python{version}, or put python{version} on PATH "
        f"(`pyenv install {version}`, or `apt-get install python{version}-venv` where the distribution has it)."
    )


def _make_venv(python: str | None, version: str, prefix: Path, why: str, log) -> Path:
    """A venv of Python ``version`` at ``prefix`` made by ``python`` (default: the harness's own
    interpreter when it is that version, else ``python{version}`` on PATH), without pip; returns the
    folder of its base interpreter (``home`` of ``pyvenv.cfg``)."""
    own = os.path.realpath(sys.executable) if local_python() == version else None
    executable = python or own or shutil.which(f"python{version}")
    if not executable:
        raise _python_needed(version, why, f"python{version} is not on PATH.")
    try:
        _run([executable, "-m", "venv", "--without-pip", str(prefix)], log)
    except (OSError, PackEnvError) as exc:
        raise _python_needed(version, why, f"{executable} does not make a venv: {exc}") from None
    config = {}
    for line in (prefix / "pyvenv.cfg").read_text().splitlines():
        key, _, value = line.partition("=")
        config[key.strip()] = value.strip()
    if not config.get("version", "").startswith(version + "."):
        raise _python_needed(version, why, f"{executable} is Python {config.get('version') or '(unknown)'}.")
    return Path(config["home"])


# --------------------------------------------------------------------------- packing


@dataclass
class PackResult:
    """What ``pack`` produced; also written next to the tarball as ``<tarball>.json``."""

    output: str
    tool: str  # "venv-pack"
    target: str
    python: str  # X.Y inside the env
    python_executable: str  # the interpreter it was built from (venv-pack)
    python_prefix: str | None  # where the env expects its base Python at run time
    seconds: float
    size_bytes: int
    packages: dict[str, str] = field(default_factory=dict)
    recipe: str = ""
    recipe_sha256: str = ""
    packer: int = 0  # PACKER_VERSION that wrote it
    sources_sha256: str = ""  # Recipe.sources_digest() when packed


def default_output(deployment_path: Path, target: str) -> Path:
    return Path(deployment_path) / ENVS_DIR / f"{target}.tar.gz"


def _run(command: list[str], log, **kwargs) -> None:
    log("  $ " + " ".join(command))
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-25:])
        raise PackEnvError(f"command failed ({result.returncode}): {' '.join(command)}\n{tail}")


def _clean_copies(requirements: list[str], into: Path) -> list[str]:
    """Local folders among ``requirements`` copied without build outputs (``build/``, ``*.egg-info``,
    bytecode): pip builds a local project in place, and setuptools packs whatever an older build
    left in its ``build/lib``, so an env would ship modules the source no longer has."""
    copies = []
    for index, entry in enumerate(requirements):
        source = Path(entry)
        if not source.is_dir():
            copies.append(entry)
            continue
        target = into / f"{index}-{source.name}"
        shutil.copytree(source, target, ignore=shutil.ignore_patterns(*BUILD_OUTPUTS))
        copies.append(str(target))
    return copies


def _pip_list(python: str) -> dict[str, str]:
    out = subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "list", "--format", "json", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
    )
    try:
        return {p["name"].lower(): p["version"] for p in json.loads(out.stdout)}
    except ValueError:
        return {}


def numpy_problem(numpy: str | None, where: str) -> str | None:
    """Why an env whose numpy is version ``numpy`` cannot serve, or None (numpy 1, or none)."""
    if not numpy or int(numpy.split(".")[0]) < 2:
        return None
    return (
        f"{where} has numpy {numpy}; numpy 2 corrupts tensors inside the Triton 2.51 Python stub. "
        "Pin `numpy<2` in environment.yml and repack (and check which package pulled numpy 2: "
        "opencv-python>=4.12 requires it, pin opencv-python-headless<4.12)."
    )


def pack(
    recipe: Recipe | str | Path,
    target: str = "cpu",
    output: str | Path | None = None,
    python: str | None = None,
    python_prefix: str | None = None,
    compress_level: int = 4,
    compile_bytecode: bool = True,
    log=print,
) -> PackResult:
    """Build the env of ``recipe`` for ``target`` and pack it into ``output`` (a .tar.gz).

    ``compile_bytecode``: ship ``.pyc`` files (default). Without them every stub compiles what it
    imports at start-up; for torch / transformers envs that is minutes on a few busy cores.
    """
    recipe = recipe if isinstance(recipe, Recipe) else load_recipe(recipe)
    version = recipe.python_for(target)
    output = Path(output or default_output(recipe.path.parent, target)).resolve()
    _make_envs_dir(output.parent)
    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f"packenv-{recipe.name}-{target}-"))
    prefix = work / "env"
    partial = output.with_name(output.name + ".partial.tar.gz")
    try:
        recipe = replace(recipe, pip_no_deps=_clean_copies(recipe.pip_no_deps, work / "sources"))
        built_from = _build_venv(recipe, target, version, prefix, python, python_prefix, compile_bytecode, log)
        python_prefix = python_prefix or TARGET_PYTHON_PREFIX.get(target)
        packages = _pip_list(str(prefix / "bin" / "python"))
        problem = numpy_problem(packages.get("numpy"), f"the env of {recipe.path}")
        if problem:
            raise PackEnvError(problem)
        log(f"  venv-pack -> {output}")
        _venv_pack(prefix, partial, python_prefix, compress_level)
        partial.chmod(0o644)  # readable by a container's non-root user too
        partial.replace(output)
    finally:
        partial.unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)
    return _record(recipe, target, output, built_from, python_prefix, packages, time.monotonic() - began, log)


def _record(recipe: Recipe, target: str, output: Path, built_from, python_prefix, packages, seconds, log):
    """The packed tarball's record, written beside it (``sidecar``), and its one-line summary."""
    version = recipe.python_for(target)
    result = PackResult(
        output=str(output),
        tool="venv-pack",
        target=target,
        python=version,
        python_executable=built_from,
        python_prefix=python_prefix,
        seconds=round(seconds, 1),
        size_bytes=output.stat().st_size,
        packages=packages,
        recipe=str(recipe.path),
        recipe_sha256=recipe.digest(),
        packer=PACKER_VERSION,
        sources_sha256=recipe.sources_digest() if recipe.sources else "",
    )
    record = json.dumps(asdict(result), indent=2) + "\n"
    # replaced, not written into: a hard-linked record (a worktree's) would describe another tarball
    replace_atomically(sidecar(output), lambda temporary: temporary.write_text(record))
    log(
        f"packed {output} with {result.tool}: Python {version}, {result.size_bytes / 1e6:.1f} MB, {result.seconds:.0f} s"
    )
    return result


def _build_venv(recipe, target, version, prefix, python, python_prefix, compile_bytecode, log) -> str:
    """A venv of the target's Python at ``prefix`` with the recipe's packages; returns that interpreter."""
    why = f"target {target}: " + TARGETS.get(target, (f"target {target}",))[0]
    python_prefix = python_prefix or TARGET_PYTHON_PREFIX.get(target)
    log(f"packing {recipe.path} for target {target} with venv + venv-pack: Python {version}")
    home = _make_venv(python, version, prefix, why, log)
    executable = str(home / f"python{version}")
    if python_prefix is not None and _venv_base(executable, python_prefix) != executable:
        # made again from <home>/python: the link venv-pack rewrites for --python-prefix (_venv_base)
        shutil.rmtree(prefix)
        _run([_venv_base(executable, python_prefix), "-m", "venv", "--without-pip", str(prefix)], log)
    if target != "cpu" and python_prefix is None:
        log(
            f"  note: a venv-pack env is not self-contained: its python links to {home.parent}; "
            f"the {target} server must have Python {version} at that prefix, or pass --python-prefix "
            "(e.g. /usr for the NGC image)."
        )
    # No pip inside the env: the harness's own pip installs into it (pip --python), which
    # saves bootstrapping pip per env and keeps pip out of the tarball.
    pip = [sys.executable, "-m", "pip", "--python", str(prefix / "bin" / "python"), "install"]
    pip += ["--disable-pip-version-check", "--no-warn-script-location"]
    pip += [] if compile_bytecode else ["--no-compile"]
    if recipe.pip:
        _run(pip + recipe.pip, log, cwd=recipe.path.parent)
    if recipe.pip_no_deps:
        _run(pip + ["--no-deps"] + recipe.pip_no_deps, log, cwd=recipe.path.parent)
    return executable


def _venv_pack(prefix: Path, partial: Path, python_prefix: str | None, compress_level: int) -> None:
    import venv_pack

    venv_pack.pack(
        prefix=str(prefix),
        output=str(partial),
        force=True,
        python_prefix=python_prefix,
        compress_level=compress_level,
        filters=[("exclude", p) for p in VENV_EXCLUDES],
    )


def _venv_base(executable: str, python_prefix: str | None) -> str:
    """The interpreter path to create a venv from.

    With ``python_prefix`` venv-pack rewrites the env's link to ``<base prefix>/bin/python`` into
    ``<python_prefix>/bin/python3.X`` by string prefix. Python 3.11's venv links
    ``bin/python3.X`` to the interpreter path it was started as, so started as ``.../python3.11``
    the rewrite gives ``/usr/bin/python3.113.11`` (a dangling link: the stub then never finds the
    env's site-packages). Started as ``.../bin/python`` (the same interpreter) the link is
    ``.../bin/python`` and the rewrite is exact.
    """
    if python_prefix is None:
        return executable
    plain = Path(executable).with_name("python")
    if plain.exists() and plain.resolve() == Path(executable).resolve():
        return str(plain)
    return executable


def _make_envs_dir(path: Path) -> None:
    """Create the envs folder; a new one gets a ``.gitignore`` of ``*`` (build output, never committed)."""
    if not path.exists():
        path.mkdir(parents=True)
        (path / ".gitignore").write_text("# packed Python environments (harness.serving.packenv): build output\n*\n")


def sidecar(tarball: str | Path) -> Path:
    tarball = Path(tarball)
    return tarball.with_name(tarball.name + ".json")


def is_stale(tarball: str | Path, recipe: Recipe, target: str) -> str | None:
    """Why ``tarball`` must be (re)built for ``recipe``/``target``, or None when it is current."""
    tarball = Path(tarball)
    if not tarball.exists():
        return "missing"
    try:
        meta = json.loads(sidecar(tarball).read_text())
    except (OSError, ValueError):
        return "no record of how it was built"
    if meta.get("recipe_sha256") != recipe.digest():
        return f"{recipe.path.name} changed since it was packed"
    if recipe.sources and meta.get("sources_sha256") != recipe.sources_digest():
        return f"its local sources changed since it was packed ({', '.join(Path(p).name for p in recipe.sources)})"
    if meta.get("python_prefix") and meta.get("packer", 1) < PACKER_VERSION:
        return "packed with --python-prefix by an older harness.serving.packenv (dangling python link)"
    if meta.get("python") != recipe.python_for(target) or meta.get("target") != target:
        return f"packed for target {meta.get('target')} / Python {meta.get('python')}"
    return None


# --------------------------------------------------------------------------- inspecting a tarball


@dataclass
class EnvInfo:
    """What a packed env holds, as far as the pre-flight cares."""

    python: str | None
    numpy: str | None


_LIB_RE = re.compile(r"(?:^|/)lib/python(3\.\d+)/")
_NUMPY_RE = re.compile(r"site-packages/numpy-([0-9][^/]*?)\.dist-info/")


def inspect_env(tarball: str | Path) -> EnvInfo:
    """Python and numpy versions inside a packed env (from its sidecar when fresh, else the archive)."""
    tarball = Path(tarball)
    side = sidecar(tarball)
    if side.exists() and side.stat().st_mtime >= tarball.stat().st_mtime - 1:
        try:
            meta = json.loads(side.read_text())
            if meta.get("size_bytes") == tarball.stat().st_size:
                return EnvInfo(meta.get("python"), meta.get("packages", {}).get("numpy"))
        except ValueError:
            pass
    pythons, numpy = set(), None
    with tarfile.open(tarball, "r:*") as archive:
        for member in archive:
            name = member.name.lstrip("./")
            hit = _LIB_RE.search(name)
            if hit:
                pythons.add(hit.group(1))
            hit = _NUMPY_RE.search(name)
            if hit:
                numpy = hit.group(1)
    python = sorted(pythons)[0] if len(pythons) == 1 else (",".join(sorted(pythons)) or None)
    return EnvInfo(python, numpy)


# --------------------------------------------------------------------------- configs and repositories


def packed_repository(repository: str | Path, tarball: str | Path, dest: str | Path) -> Path:
    """Write ``dest/model_repository`` (a copy of ``repository``) and ``dest/envs/<tarball name>``.

    Files are hard links where possible (copies otherwise); every config of the Python-backend
    models (``config.pbtxt`` and ``configs/*.pbtxt``) is rewritten
    as a new file with ``EXECUTION_ENV_PATH = $$TRITON_MODEL_DIRECTORY/../../envs/<name>``.
    Models served by other backends (including the harness's Python-based onnxruntime
    backend) are left alone. Returns the copy's repository path.
    """
    tarball, dest = Path(tarball).resolve(), Path(dest)
    reference = ENV_REFERENCE.format(file=tarball.name)

    def use_packed_env(model: str, path: Path, config):
        if config.backend != "python":
            return None
        return set_parameter(config, "EXECUTION_ENV_PATH", reference)

    copy = derive(repository, dest, edit=use_packed_env, link="hard")
    envs = dest / ENVS_DIR
    envs.mkdir(parents=True, exist_ok=True)
    env_file = envs / tarball.name
    env_file.unlink(missing_ok=True)  # a file or a link, dangling or not
    link_or_copy(str(tarball), str(env_file))
    return copy


def resolve_env_path(value: str, model_dir: Path) -> Path:
    return Path(os.path.normpath(value.replace(ENV_PLACEHOLDER, str(model_dir))))


def check_repository(
    repository: str | Path,
    stub_python: str | None = None,
    model_config_name: str | None = None,
    deployment: str | None = None,
    target: str | None = None,
) -> list[str]:
    """Problems of the packed envs ``repository`` references, for a server whose stub is ``stub_python``.

    Empty when every ``EXECUTION_ENV_PATH`` uses ``$$TRITON_MODEL_DIRECTORY``, exists, holds the
    stub's Python and numpy<2. Models without an ``EXECUTION_ENV_PATH`` are not checked.
    """
    stub_python = stub_python or local_python()
    how = f"make pack-env DEPLOYMENT={deployment or '<name>'} TARGET={target or 'cpu'}"
    problems = []
    for model_dir in sorted(p for p in Path(repository).iterdir() if p.is_dir()):
        config = effective_config_path(model_dir, model_config_name)
        if config is None:
            continue
        value = parameter(read_config(config), "EXECUTION_ENV_PATH")
        if value is None:
            continue
        where = f"model {model_dir.name} ({config.relative_to(model_dir.parent)})"
        if not value.startswith(ENV_PLACEHOLDER):
            if value.startswith("$TRITON_MODEL_DIRECTORY") or "$TRITON_MODEL_DIRECTORY" in value:
                problems.append(
                    f"{where}: EXECUTION_ENV_PATH {value!r} must use two dollar signs: "
                    f"{ENV_PLACEHOLDER}/... (Triton substitutes only that spelling)"
                )
                continue
            if not os.path.isabs(value):
                problems.append(
                    f"{where}: EXECUTION_ENV_PATH {value!r} is relative; Triton does not resolve it "
                    f"against the model folder and the stub then runs without the env "
                    f'(ModuleNotFoundError). Write "{ENV_PLACEHOLDER}/../../envs/<file>"'
                )
                continue
            path = Path(value)
        else:
            path = resolve_env_path(value, model_dir)
        if not path.exists():
            problems.append(f"{where}: packed env {path} does not exist; build it with `{how}`")
            continue
        try:
            info = inspect_env(path)
        except (tarfile.TarError, OSError) as exc:
            problems.append(f"{where}: packed env {path} cannot be read as a tarball ({exc}); rebuild it with `{how}`")
            continue
        if info.python != stub_python:
            problems.append(
                f"{where}: packed env {path.name} is Python {info.python or '(unknown)'} but the server's Python "
                f"backend stub is Python {stub_python}. The stub must run in an env of its own minor version "
                f"(otherwise the model fails with ModuleNotFoundError, or the stub never starts and the server "
                f"waits in 'loading'). Pack the env with Python {stub_python}: `{how}` for this server's target."
            )
        elif numpy_problem(info.numpy, path.name):
            problems.append(f"{where}: packed env {numpy_problem(info.numpy, path.name)}")
    return problems
