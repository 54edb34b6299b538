"""A repository copy whose Python models use a packed env, and the pre-flight that checks every
``EXECUTION_ENV_PATH`` of a repository against the stub's Python before a server starts."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

from harness.repository import derive, effective_config_path, link_or_copy, parameter, read_config, set_parameter
from harness.serving.packenv.pack import inspect_env
from harness.serving.packenv.recipe import (
    ENV_PLACEHOLDER,
    ENV_REFERENCE,
    ENVS_DIR,
    PackedEnvError,
    PythonEnvMismatch,
    local_python,
)

# --------------------------------------------------------------------------- configs and repositories


def packed_repository(
    repository: str | Path, tarball: str | Path, dest: str | Path, models: list[str] | None = None
) -> Path:
    """Write ``dest/model_repository`` (a copy of ``repository``) and ``dest/envs/<tarball name>``.

    Files are hard links where possible (copies otherwise); every config of the Python-backend
    models (``config.pbtxt`` and ``configs/*.pbtxt``; only ``models`` when given) is rewritten
    as a new file with ``EXECUTION_ENV_PATH = $$TRITON_MODEL_DIRECTORY/../../envs/<name>``.
    Models served by other backends (including the harness's Python-based onnxruntime
    backend) are left alone. Returns the copy's repository path.
    """
    tarball, dest = Path(tarball).resolve(), Path(dest)
    reference = ENV_REFERENCE.format(file=tarball.name)

    def use_packed_env(model: str, path: Path, config):
        if config.backend != "python" or (models is not None and model not in models):
            return None
        return set_parameter(config, "EXECUTION_ENV_PATH", reference)

    copy = derive(repository, dest, edit=use_packed_env, link="hard")
    envs = dest / ENVS_DIR
    envs.mkdir(parents=True, exist_ok=True)
    env_file = envs / tarball.name
    if env_file.exists() or env_file.is_symlink():
        env_file.unlink()
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
        elif info.numpy and int(info.numpy.split(".")[0]) >= 2:
            problems.append(
                f"{where}: packed env {path.name} has numpy {info.numpy}; numpy 2 corrupts tensors in "
                "the Triton 2.51 stub. Pin numpy<2 in environment.yml and repack."
            )
    return problems


def assert_repository(repository: str | Path, stub_python: str | None = None, **kwargs) -> None:
    """``check_repository`` that raises: PythonEnvMismatch for version problems, PackedEnvError otherwise."""
    problems = check_repository(repository, stub_python, **kwargs)
    if problems:
        kind = PythonEnvMismatch if any("backend stub is Python" in p for p in problems) else PackedEnvError
        raise kind("packed Python environment problem(s), the server was not started:\n  " + "\n  ".join(problems))


# --------------------------------------------------------------------------- serving a deployment with its packed env


def packed_server_options(deployment, target: str, tarball: str | Path, dest: str | Path, **overrides):
    """ServerOptions of ``deployment`` on ``target`` over a generated copy that uses ``tarball``.

    Checks the copy first (raises PackedEnvError / PythonEnvMismatch); the local launcher's
    stub is the harness's own Python.
    """
    options = deployment.server_options(server_target(deployment, target))
    repository = packed_repository(deployment.model_repository, tarball, dest)
    options.model_repository = str(repository)
    assert_repository(
        repository,
        local_python(),
        model_config_name=options.model_config_name,
        deployment=deployment.name,
        target=target,
    )
    # The backend unpacks the env before the first stub starts: a torch env adds a minute or more.
    options.startup_timeout_s = max(options.startup_timeout_s, 600.0)
    for key, value in overrides.items():
        setattr(options, key, value)
    return options


def server_target(deployment, target: str) -> str:
    if target in deployment.targets:
        return target
    if target == "ngc" and "gpu" in deployment.targets:
        return "gpu"
    return "cpu"
