"""Packing a recipe into a tarball (conda + conda-pack, or venv + venv-pack), knowing when a
tarball is stale, and reading what a tarball holds."""

from __future__ import annotations

import json
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

from harness.serving.packenv.recipe import (
    ENVS_DIR,
    PACKER_VERSION,
    TARGET_PYTHON_PREFIX,
    TARGETS,
    VENV_EXCLUDES,
    PackEnvError,
    Recipe,
    find_python,
    load_recipe,
)

# --------------------------------------------------------------------------- packing


@dataclass
class PackResult:
    """What ``pack`` produced; also written next to the tarball as ``<tarball>.json``."""

    output: str
    tool: str  # "conda-pack" or "venv-pack"
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


def choose_tool(tool: str = "auto") -> str:
    """``conda`` when conda and conda-pack are present (or asked for), else ``venv``."""
    has_conda = bool(shutil.which("conda")) and bool(shutil.which("conda-pack"))
    if tool == "auto":
        return "conda" if has_conda else "venv"
    if tool == "conda" and not has_conda:
        raise PackEnvError(
            "--tool conda: `conda` and `conda-pack` must both be on PATH "
            "(conda cannot be installed on the machines this project is developed on; use --tool venv)"
        )
    if tool not in ("conda", "venv"):
        raise PackEnvError(f"unknown tool {tool!r}: auto, conda or venv")
    return tool


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
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.pyc"))
        copies.append(str(target))
    return copies


def conda_plan(recipe: Recipe, version: str, prefix: Path, output: Path, env_file: Path) -> list[list[str]]:
    """The commands of the conda path (``env_file``: the rendered recipe for ``version``)."""
    python = str(prefix / "bin" / "python")
    plan = [["conda", "env", "create", "--quiet", "--prefix", str(prefix), "--file", str(env_file)]]
    if recipe.pip_no_deps:
        plan.append([python, "-m", "pip", "install", "--no-deps", *recipe.pip_no_deps])
    plan.append(
        [
            "conda-pack",
            "--prefix",
            str(prefix),
            "--output",
            str(output),
            "--force",
            "--ignore-missing-files",
            "--exclude",
            "lib/python*/site-packages/pip/*",
        ]
    )
    return plan


def render_conda_file(recipe: Recipe, version: str) -> dict:
    """The recipe as a plain conda environment file for Python ``version`` (our keys dropped)."""
    deps: list = [f"python={version}", "pip", *recipe.conda]
    if recipe.pip:
        deps.append({"pip": list(recipe.pip)})
    return {"name": recipe.name, "channels": recipe.channels or ["conda-forge"], "dependencies": deps}


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


def _check_numpy(packages: dict[str, str], where: str) -> None:
    numpy = packages.get("numpy")
    if numpy and int(numpy.split(".")[0]) >= 2:
        raise PackEnvError(
            f"{where} resolved numpy {numpy}; numpy 2 corrupts tensors inside the Triton 2.51 "
            "Python stub. Pin `numpy<2` in the recipe (and check which package pulled numpy 2: "
            "opencv-python>=4.12 requires it, pin opencv-python-headless<4.12)."
        )


def pack(
    recipe: Recipe | str | Path,
    target: str = "cpu",
    output: str | Path | None = None,
    tool: str = "auto",
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
    requested, tool = tool, choose_tool(tool)
    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f"packenv-{recipe.name}-{target}-"))
    prefix = work / "env"
    partial = output.with_name(output.name + ".partial.tar.gz")
    try:
        recipe = replace(recipe, pip_no_deps=_clean_copies(recipe.pip_no_deps, work / "sources"))
        if tool == "conda":
            built_from, python_prefix = _build_conda(recipe, target, version, work, prefix, partial, log), None
        else:
            built_from = _build_venv(
                recipe, target, version, prefix, python, python_prefix, requested, compile_bytecode, log
            )
            python_prefix = python_prefix or TARGET_PYTHON_PREFIX.get(target)
        packages = _pip_list(str(prefix / "bin" / "python"))
        _check_numpy(packages, f"the env of {recipe.path}")
        if tool == "venv":
            log(f"  venv-pack -> {output}")
            _venv_pack(prefix, partial, python_prefix, compress_level)
        partial.chmod(0o644)  # readable by a container's non-root user too
        partial.replace(output)
    finally:
        partial.unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)
    result = PackResult(
        output=str(output),
        tool="conda-pack" if tool == "conda" else "venv-pack",
        target=target,
        python=version,
        python_executable=built_from,
        python_prefix=python_prefix,
        seconds=round(time.monotonic() - began, 1),
        size_bytes=output.stat().st_size,
        packages=packages,
        recipe=str(recipe.path),
        recipe_sha256=recipe.digest(),
        packer=PACKER_VERSION,
        sources_sha256=recipe.sources_digest() if recipe.sources else "",
    )
    sidecar(output).write_text(json.dumps(asdict(result), indent=2) + "\n")
    log(
        f"packed {output} with {result.tool}: Python {version}, {result.size_bytes / 1e6:.1f} MB, {result.seconds:.0f} s"
    )
    return result


def _build_conda(recipe: Recipe, target: str, version: str, work: Path, prefix: Path, partial: Path, log) -> str:
    """conda + conda-pack: create the env from the recipe's environment.yml and pack it into ``partial``."""
    log(f"packing {recipe.path} for target {target} with conda + conda-pack (Python {version})")
    env_file = work / "environment.yml"
    env_file.write_text(yaml.safe_dump(render_conda_file(recipe, version), sort_keys=False))
    for command in conda_plan(recipe, version, prefix, partial, env_file):
        _run(command, log)
    return "conda"


def _build_venv(recipe, target, version, prefix, python, python_prefix, requested, compile_bytecode, log) -> str:
    """A venv of the target's Python at ``prefix`` with the recipe's packages; returns that interpreter."""
    why = TARGETS.get(target, (f"target {target}",))[0]
    info = find_python(version, python, why=f"target {target}: {why}")
    python_prefix = python_prefix or TARGET_PYTHON_PREFIX.get(target)
    because = "asked for" if requested == "venv" else "no conda + conda-pack on PATH"
    log(
        f"packing {recipe.path} for target {target} with venv + venv-pack ({because}): "
        f"Python {version} from {info['executable']}"
    )
    if target != "cpu" and python_prefix is None:
        log(
            f"  note: a venv-pack env is not self-contained: its python links to {info['base_prefix']}; "
            f"the {target} server must have Python {version} at that prefix, or pass --python-prefix "
            "(e.g. /usr for the NGC image). conda-pack avoids this."
        )
    # No pip inside the env: the harness's own pip installs into it (pip --python), which
    # saves bootstrapping pip per env and keeps pip out of the tarball.
    _run([_venv_base(info["executable"], python_prefix), "-m", "venv", "--without-pip", str(prefix)], log)
    pip = [sys.executable, "-m", "pip", "--python", str(prefix / "bin" / "python"), "install"]
    pip += ["--disable-pip-version-check", "--no-warn-script-location"]
    pip += [] if compile_bytecode else ["--no-compile"]
    if recipe.pip:
        _run(pip + recipe.pip, log, cwd=recipe.path.parent)
    if recipe.pip_no_deps:
        _run(pip + ["--no-deps"] + recipe.pip_no_deps, log, cwd=recipe.path.parent)
    return info["executable"]


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
    tool: str | None


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
                return EnvInfo(meta.get("python"), meta.get("packages", {}).get("numpy"), meta.get("tool"))
        except ValueError:
            pass
    pythons, numpy, tool = set(), None, None
    with tarfile.open(tarball, "r:*") as archive:
        for member in archive:
            name = member.name.lstrip("./")
            hit = _LIB_RE.search(name)
            if hit:
                pythons.add(hit.group(1))
            hit = _NUMPY_RE.search(name)
            if hit:
                numpy = hit.group(1)
            if name == "pyvenv.cfg":
                tool = "venv-pack"
            elif name.startswith("conda-meta/"):
                tool = "conda-pack"
    python = sorted(pythons)[0] if len(pythons) == 1 else (",".join(sorted(pythons)) or None)
    return EnvInfo(python, numpy, tool)
