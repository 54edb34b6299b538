"""Packed Python environments for Triton's Python backend (``EXECUTION_ENV_PATH``; docs/python-environments.md).

A deployment's ``environment.yml`` (``recipe``) is packed into a tarball with conda + conda-pack, or
venv + venv-pack (``pack``); ``packed_repository`` writes a repository copy whose Python configs use
it, and ``check_repository`` is the pre-flight of every ``EXECUTION_ENV_PATH`` against the stub's Python.

    python -m harness pack-env <deployment>            # -> deployments/<deployment>/envs/cpu.tar.gz
    python -m harness pack-env <deployment> --serve    # pack if needed, serve with it until Ctrl-C
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
