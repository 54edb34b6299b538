"""Python-backend models in a container get their packages as in production: the deployment's
packed env beside a generated copy of the repository, both mounted read-only.

``attach_packed_env`` points ``options.python_env`` at the deployment's env for the image's stub;
``mounted_repository`` (called by ``DockerTritonServer.start``) packs a missing or stale env, checks
every env's Python against the stub, and writes the repository copy whose Python configs say
``EXECUTION_ENV_PATH = $$TRITON_MODEL_DIRECTORY/../../envs/<file>``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.repository import derive
from harness.serving.launchers.base import ServerOptions
from harness.serving.launchers.docker_engine import DockerStartError, image_labels, one_line
from harness.serving.launchers.docker_images import ImageProfile, apply_labels, profile_for


def links_outside(folder: str | Path) -> bool:
    """Whether any symbolic link under ``folder`` points outside it (a mount of it would dangle)."""
    root = Path(folder).resolve()
    for parent, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(parent, name)
            if path.is_symlink() and not path.resolve().is_relative_to(root):
                return True
    return False


def attach_packed_env(deployment, options: ServerOptions) -> ServerOptions:
    """Docker mode: point ``options.python_env`` at the deployment's packed env for the image's stub.

    ``deployments/<d>/envs/<pack target>.tar.gz``, the pack target read from the image's labels
    (``cpu-image`` for the CPU image). Nothing is packed here: ``DockerTritonServer.start`` packs
    a missing or stale env itself, after its one-line checks (engine, image, ports). A deployment
    without ``environment.yml`` or without Python-backend models is left alone.
    """
    from harness.repository import python_models
    from harness.serving.packenv import RECIPE, default_output

    if not (Path(deployment.path) / RECIPE).exists():
        return options
    if not python_models(options.model_repository, options.model_config_name):
        return options
    profile = profile_for(options)
    profile = apply_labels(profile, image_labels(profile.image))
    options.python_env = str(default_output(deployment.path, profile.pack_target))
    return options


@dataclass
class MountedRepository:
    """The repository folder to mount at ``/models``; ``work_dir`` (removed at stop) holds a generated
    copy of it and, in ``envs_dir``, the packed envs to mount at ``/envs``."""

    path: Path
    work_dir: Path | None = None
    envs_dir: Path | None = None


def checked_packed_env(tarball: Path, profile: ImageProfile) -> None:
    """The deployment's packed env (re)packed when missing or stale, as `make pack-env` would; then it
    must exist, else DockerStartError saying how to build it (its Python: ``mounted_repository``)."""
    from harness.serving.packenv import RECIPE, PackEnvError, is_stale, load_recipe, pack

    stub, target = profile.stub_python, profile.pack_target
    deployment = tarball.parent.parent.name
    recipe_path = tarball.parent.parent / RECIPE
    if recipe_path.exists() and tarball.name == f"{target}.tar.gz":
        recipe = load_recipe(recipe_path)
        reason = is_stale(tarball, recipe, target)
        if reason:
            print(
                f"{deployment}: packing its Python env for {profile.image} (target {target}, Python {stub}: {reason})",
                flush=True,
            )
            try:
                pack(recipe, target, tarball, log=lambda *_: None)
            except PackEnvError as exc:
                raise DockerStartError(f"packing {tarball} failed: {one_line(exc)[:300]}") from None
    if not tarball.exists():
        raise DockerStartError(
            f"packed env {tarball} does not exist: build it with `make pack-env DEPLOYMENT={deployment} TARGET={target}`"
        )


def mounted_repository(options: ServerOptions, profile: ImageProfile) -> MountedRepository:
    """Packed env beside a generated copy of the repository; every env checked against the stub.
    On an error nothing generated is left behind."""
    from harness.serving.packenv import check_repository, packed_repository

    mounted = MountedRepository(Path(options.model_repository))
    try:
        if options.python_env:
            tarball = Path(options.python_env)
            checked_packed_env(tarball, profile)
            mounted.work_dir = Path(tempfile.mkdtemp(prefix="triton-docker-"))
            mounted.path = packed_repository(mounted.path, tarball, mounted.work_dir)
            mounted.envs_dir = mounted.work_dir / "envs"
        elif links_outside(mounted.path):
            # A derived repository (a config variant) links to files the container cannot see.
            mounted.work_dir = Path(tempfile.mkdtemp(prefix="triton-docker-"))
            mounted.path = derive(mounted.path, mounted.work_dir, link="hard")
        # The repository's own EXECUTION_ENV_PATHs too (e.g. configs written for another image): on the
        # host, $$TRITON_MODEL_DIRECTORY/../../envs is the folder mounted at /envs.
        problems = check_repository(
            mounted.path,
            profile.stub_python,
            model_config_name=options.model_config_name,
            deployment=Path(options.python_env).parent.parent.name if options.python_env else None,
            target=profile.pack_target,
        )
        if problems:
            raise DockerStartError(
                f"not started: {one_line(problems[0])}"
                + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
            )
    except BaseException:
        if mounted.work_dir is not None:
            shutil.rmtree(mounted.work_dir, ignore_errors=True)
        raise
    return mounted
