"""Serving a deployment with its packed env on the local server: ``python -m harness pack-env <d> --serve``.

The application side of ``harness.serving.packenv`` (which stays a library of packing and pre-flight
checks, importing nothing of the launchers): start a local server on a generated repository
copy whose Python models run in the packed env, run the deployment's checks on it, and show in
which env each stub really runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.context import DeploymentContext, run_checks
from harness.deployments import get_deployment
from harness.repository import python_models
from harness.serving.launchers import LocalTritonServer
from harness.serving.launchers.base import serve_in_foreground
from harness.serving.packenv import (
    TARGETS,
    PackEnvError,
    default_output,
    is_stale,
    load_recipe,
    local_python,
    pack,
    sidecar,
)


def pack_command(args) -> int:
    """``python -m harness pack-env``: pack the deployment's env when stale, then serve it if asked."""
    try:
        deployment = get_deployment(args.deployment)
        recipe = load_recipe(deployment.path)
        tarball = Path(args.output or default_output(deployment.path, args.target)).resolve()
        reason = "--force" if args.force else is_stale(tarball, recipe, args.target)
        if reason:
            print(f"{deployment.name}: packing for target {args.target} ({reason})")
            pack(
                recipe,
                args.target,
                tarball,
                python=args.python,
                python_prefix=args.python_prefix,
                compile_bytecode=not args.no_compile,
            )
        else:
            meta = json.loads(sidecar(tarball).read_text())
            print(
                f"{deployment.name}: {tarball} is current ({meta['tool']}, Python {meta['python']}, "
                f"{meta['size_bytes'] / 1e6:.1f} MB); --force to repack"
            )
    except PackEnvError as exc:
        print(f"pack-env: {exc}", file=sys.stderr)
        return 2
    return serve(args, deployment, tarball) if args.serve else 0


def add_arguments(parser) -> None:
    """The ``pack-env`` subcommand's options."""
    parser.add_argument("deployment", help="deployment name (folder under deployments/)")
    parser.add_argument("--target", default="cpu", help=f"one of {', '.join(TARGETS)} (default cpu = the local server)")
    parser.add_argument("--output", default=None, help="tarball path (default deployments/<name>/envs/<target>.tar.gz)")
    parser.add_argument(
        "--python", default=None, help="the Python to build a venv with (must match the target's version)"
    )
    parser.add_argument(
        "--python-prefix",
        default=None,
        help="prefix of the base Python on the target server (e.g. /usr in the NGC image)",
    )
    parser.add_argument("--force", action="store_true", help="repack even when the tarball is current")
    parser.add_argument(
        "--no-compile", action="store_true", help="leave out .pyc files (smaller tarball, slower stub start-up)"
    )
    parser.add_argument(
        "--serve", action="store_true", help="then serve the deployment with it on the local server until Ctrl-C"
    )
    parser.add_argument(
        "--once", action="store_true", help="with --serve: stop as soon as the server is ready (a smoke test)"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="with --serve: run the deployment's checks on it, show which env each stub runs in, stop",
    )
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--grpc-port", type=int, default=8001)
    parser.add_argument("--metrics-port", type=int, default=8002)


def serve(args, deployment, tarball: Path) -> int:
    """Serve ``deployment`` on the local server with its packed env ``tarball`` (``--serve``)."""
    if TARGETS.get(args.target, ("", "local"))[1] not in ("local", local_python()):
        print(
            f"target {args.target} needs the stub of its own server ({TARGETS[args.target][0]}); the local "
            f"server here runs the Python {local_python()} stub. Serve it there (docker mode), or pack "
            "--target cpu to serve locally.",
            file=sys.stderr,
        )
        return 2
    deployment.export()
    options = deployment.server_options(server_target(deployment, args.target), python_env=str(tarball))
    # The backend unpacks the env before the first stub starts: a torch env adds a minute or more.
    options.startup_timeout_s = max(options.startup_timeout_s, 600.0)
    server = LocalTritonServer(options, ports=(args.http_port, args.grpc_port, args.metrics_port))

    def on_ready(server, seconds: float) -> int | None:
        models = python_models(server.repository, options.model_config_name)
        print(
            f"{deployment.name} ready in {seconds:.1f} s with packed env {tarball.name} "
            f"(Python models {', '.join(models)})"
        )
        print(f"  HTTP {server.http_url}   gRPC {server.grpc_url}   metrics {server.metrics_url}/metrics")
        print(f"  repository (generated copy) {server.repository}\n  log {server.log_path}")
        if args.check:
            return report_checks(deployment, server, args.target, models)
        return 0 if args.once else None

    return serve_in_foreground(server, on_ready)


def report_checks(deployment, server, target: str, models: list[str]) -> int:
    """Run the deployment's checks on the packed-env ``server`` and show which env each stub runs in."""
    outcome = run_checks(DeploymentContext(deployment, server, server_target(deployment, target)))
    for name in outcome.passed:
        print(f"  check {name:40} ok")
    for name, why in outcome.failed.items():
        print(f"  check {name:40} FAILED {next(iter(why.splitlines()), '')}")
    usage = {m: e for m, e in server.stub_envs().items() if any(f"/model_repository/{name}/" in m for name in models)}
    for model, envs in sorted(usage.items()):
        print(f"  stub {model}: {'runs in ' + ', '.join(envs) if envs else 'NOT in a packed env'}")
    packed = [m for m, e in usage.items() if e]
    print(f"checks: {outcome.summary()}; {len(packed)}/{len(usage)} Python stubs in the packed env")
    return 1 if outcome.failed or len(packed) < len(usage) else 0


def server_target(deployment, target: str) -> str:
    """The deployment's target whose server options fit a server for pack target ``target``."""
    if target in deployment.targets:
        return target
    if target == "ngc" and "gpu" in deployment.targets:
        return "gpu"
    return "cpu"
