"""A deployment folder outside the repository: copied to a temporary directory, its models served
from the copy, its ``client.py`` run there by a Python that may load nothing of the repository.

What a user does who copies the folder into a project of their own: the client must find all it
needs in its own folder and in the installed packages (tritonclient, numpy, ...)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from harness.repository import link_or_copy

#: Runs ``client.py ARGS...`` as ``python client.py`` does (its folder first on sys.path), then fails
#: (exit 3) if any module it loaded lies outside that folder and outside the Python installation.
OUTSIDE_RUNNER = """
import os, runpy, sys
script = os.path.abspath(sys.argv[1])
folder = os.path.dirname(script)
allowed = tuple({os.path.realpath(p) + os.sep for p in (folder, sys.prefix, sys.base_prefix, sys.exec_prefix)})
sys.argv, sys.path[0:0] = sys.argv[1:], [folder]
try:
    runpy.run_path(script, run_name="__main__")
finally:
    foreign = sorted(
        name for name, module in list(sys.modules.items())
        if getattr(module, "__file__", None) and not os.path.realpath(module.__file__).startswith(allowed)
    )
    if foreign:
        print("loaded from outside the client's folder: " + ", ".join(foreign), file=sys.stderr)
        os._exit(3)
"""


def copy_outside(deployment, root: Path) -> Path:
    """``deployment``'s folder copied to ``root/<name>`` (files hard-linked: nothing writes into
    them), without caches and packed environments."""
    target = Path(root) / deployment.name
    shutil.copytree(
        deployment.path,
        target,
        copy_function=link_or_copy,
        ignore=shutil.ignore_patterns("__pycache__", "envs", ".pytest_cache"),
        symlinks=True,
    )
    return target


def run_client(folder: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python client.py ARGS`` in the copied ``folder``, isolated from the repository (``-I``: no
    PYTHONPATH, no user site, not this directory); raises with its output when it fails."""
    done = subprocess.run(
        [sys.executable, "-I", "-c", OUTSIDE_RUNNER, str(folder / "client.py"), *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={k: v for k, v in os.environ.items() if not k.startswith("PYTHON")},
    )
    if done.returncode != 0:
        raise AssertionError(f"client.py {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


def deployment_of(test_file: str):
    """The deployment whose ``tests/`` folder holds ``test_file`` (a test module's ``__file__``)."""
    from harness.deployments import get_deployment

    folder = Path(test_file).resolve().parents[1]
    return get_deployment(folder.name, folder.parent)


def client_outside(deployment, root: Path, models: list[str], *runs: list[str]) -> list[str]:
    """The standard output of ``client.py`` run outside the repository once per argument list in
    ``runs`` (``--url`` added), against ``models`` served from ``deployment``'s copy under ``root``."""
    from harness.deployments import get_deployment
    from harness.testing.servers import deployment_server, started, stop_server

    copy = copy_outside(deployment, root)
    server = started(deployment_server(get_deployment(deployment.name, Path(root)), models), 600)
    try:
        return [run_client(copy, *args, "--url", server.http_url).stdout for args in runs]
    finally:
        stop_server(server)


def assert_vector_summary(dim: str, norm: str, head: list[str], vector, context: str = "") -> None:
    """What a client printed of an embedding, its dimension, norm and first values, is ``vector``'s
    (to 1e-3)."""
    import numpy as np

    assert int(dim) == len(vector), (context, dim)
    assert abs(float(norm) - np.linalg.norm(vector)) <= 1e-3, (context, norm)
    head = np.array(head, dtype=float)
    np.testing.assert_allclose(head, vector[: len(head)], atol=1e-3, err_msg=context)
