"""Packed Python environments for Triton's Python backend (``EXECUTION_ENV_PATH``).

Each deployment declares what its Python-backend models import once, in
``deployments/<name>/environment.yml`` (a conda environment file plus two keys of ours:
``python_by_target`` and ``pip_no_deps``). This module turns that recipe into a tarball the
Python backend unpacks and runs its stub in:

- with ``conda`` + ``conda-pack`` where conda exists (a self-contained env with its own Python);
- otherwise with a venv of a Python whose minor version matches the stub of the target's
  server, ``pip install`` of the recipe and ``venv-pack``.

    python -m harness pack-env <deployment>            # -> deployments/<deployment>/envs/cpu.tar.gz
    python -m harness pack-env <deployment> --serve    # pack if needed, serve with it until Ctrl-C

Model repositories stay as they are, so the default run needs no packing step: serving with
a packed env goes through a generated copy of the repository (``packed_repository``) whose
Python-backend configs get ``EXECUTION_ENV_PATH = $$TRITON_MODEL_DIRECTORY/../../envs/<file>``,
i.e. ``<copy>/envs/<file>`` next to ``<copy>/model_repository`` (the same relative layout as
``deployments/<name>/envs/`` next to ``deployments/<name>/model_repository``). The ``envs``
folder sits beside the repository, never inside it: Triton takes every folder of a model
repository (hidden ones too) for a model and fails to load it.

``check_repository`` is the pre-flight that turns the failures Triton reports badly into
clear messages before a server starts: a path without ``$$TRITON_MODEL_DIRECTORY``, a missing
tarball, an env whose Python differs from the stub's (ModuleNotFoundError or a stub that
never starts), numpy 2 in the env (corrupted tensors).
"""

from harness.serving.packenv.pack import (
    conda_plan,
    default_output,
    inspect_env,
    is_stale,
    pack,
    render_conda_file,
    sidecar,
)
from harness.serving.packenv.preflight import (
    assert_repository,
    check_repository,
    packed_repository,
    packed_server_options,
    resolve_env_path,
    server_target,
)
from harness.serving.packenv.recipe import (
    PACKER_VERSION,
    RECIPE,
    TARGETS,
    PackedEnvError,
    PackEnvError,
    PythonEnvMismatch,
    find_python,
    load_recipe,
    local_python,
)

__all__ = [
    "PACKER_VERSION",
    "RECIPE",
    "TARGETS",
    "PackEnvError",
    "PackedEnvError",
    "PythonEnvMismatch",
    "assert_repository",
    "check_repository",
    "conda_plan",
    "default_output",
    "find_python",
    "inspect_env",
    "is_stale",
    "load_recipe",
    "local_python",
    "pack",
    "packed_repository",
    "packed_server_options",
    "render_conda_file",
    "resolve_env_path",
    "server_target",
    "sidecar",
]
