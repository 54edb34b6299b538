"""Command line: ``python -m harness`` (or ``triton-harness``) ``{list,export,serve,bench,pack-env,...}``;
the core's other tools (``CORE_TOOLS``) and those of installed distributions (entry points
``triton_harness.commands``) are subcommands of the same tree. Commands: docs/harness.md."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

from harness.deployments import ManifestError, discover, get_deployment
from harness.serving.launchers import MODES, LocalTritonServer, create_server, default_mode
from harness.serving.launchers.base import ports_in_use, serve_in_foreground
from harness.serving.packenv import TARGETS, PackEnvError, default_output, is_stale, load_recipe, pack, sidecar
from triton_gate.auth import read_keys


def _list(args) -> int:
    for deployment in discover():
        print(
            f"{deployment.name:20} targets={','.join(deployment.targets):10} models={','.join(deployment.entry_models)}"
        )
        print(f"{'':20} {deployment.summary}")
    return 0


def _export(args) -> int:
    deployment = get_deployment(args.deployment)
    ran = deployment.export(force=args.force)
    print(f"{deployment.name}: {'exported' if ran else 'nothing to export (all outputs present; --force to redo)'}")
    return 0


def _serve(args) -> int:
    deployment = get_deployment(args.deployment)
    args.mode = args.mode or default_mode()
    deployment.server_options(args.target)  # an unsupported target is refused before anything starts
    ports = (args.http_port, args.grpc_port, args.metrics_port)
    busy = ports_in_use(args.host, ports) if args.mode in ("local", "docker") else []
    if busy:
        print("python -m harness: error: " + "; ".join(busy), file=sys.stderr)
        return 1
    options = deployment.serving_options(args.mode, args.target, args.image)
    options.api_keys = list(args.api_key or []) + read_keys(args.api_key_file)  # the file: one key a line
    launch = dict(ports=ports, host=args.host) if args.mode in ("local", "docker") else {}
    server = create_server(args.mode, options, url=args.server_url, **launch)

    def on_ready(server, seconds: float) -> None:
        print(f"{deployment.name} ready in {seconds:.1f} s ({server.mode} server, target {args.target})")
        print(f"  HTTP    {server.http_url}")
        if server.grpc_url:
            print(f"  gRPC    {server.grpc_url}")
        if server.metrics_url:
            print(f"  metrics {server.metrics_url}/metrics")
        print(f"  models  {', '.join(deployment.entry_models)}")
        if deployment.manifest.openai and server.mode in ("local", "docker"):
            print(f"  OpenAI  http://{server.http_url}/v1 (embeddings: {', '.join(deployment.manifest.openai.models)})")
        if options.api_keys:
            print("  auth    API key required (Authorization: Bearer <key>) on every route but the health probes")
        if isinstance(server, LocalTritonServer):
            print(f"  log     {server.log_path}")

    return serve_in_foreground(server, on_ready)


def _show_level(deployment: str, benchmark: str, level) -> None:
    m = level.metrics()
    print(
        f"{deployment:16} {benchmark:34} c={m['concurrency']:<3} {m['perf_throughput']:9.1f} infer/s  "
        f"p50 {m['perf_latency_p50']:8.1f} ms  p99 {m['perf_latency_p99']:8.1f} ms  errors {m['errors']}",
        flush=True,
    )


def _bench(args) -> int:
    from harness.measuring.bench import run_benchmark
    from harness.session import ServerPool, for_each_scenario

    def run(deployment, benchmark, ctx):
        run_benchmark(
            ctx,
            benchmark,
            duration_s=args.duration,
            warmup_s=args.warmup,
            concurrencies=args.concurrency or list(benchmark.concurrency),
            on_level=lambda level: _show_level(deployment.name, benchmark.id, level),
        )

    pool = ServerPool(mode=args.mode, target=args.target, url=args.server_url, image=args.image)
    try:
        failed = for_each_scenario(
            pool, run, deployments=[args.deployment] if args.deployment else None, target=args.target, only=args.only
        )
    finally:
        pool.close()
    if failed:
        print(f"{len(failed)} benchmark scenario(s) failed:\n  " + "\n  ".join(failed), file=sys.stderr)
        return 1
    return 0


#: The core's other subcommands: name -> (what runs it, summary). ``"module"`` runs ``module.main(argv)``
#: (its options are its own); ``"module:runner"`` declares its options with ``module.add_arguments(parser)``
#: and runs ``module.runner(args)``.
CORE_TOOLS = {
    "new": ("harness.new:new_command", "copy a deployment as the template of a new one (NAME --from DEPLOYMENT)"),
    "rename": (
        "harness.rename:rename_command",
        "give models of a deployment names of its own (DEPLOYMENT OLD=NEW ...), everywhere they stand",
    ),
    "readme": ("harness.copy_readme:readme_command", "write a copy's README.md from its README.md.j2 (after a swap)"),
    "refresh": (
        "harness.refresh:refresh_command",
        "regenerate a deployment in order: export, fixtures from the reference, quantization gates",
    ),
    "matrix": ("harness.measuring.matrix", "aggregate results/records.jsonl into docs/results.* and plots"),
    "pair-bench": ("harness.measuring.pair_bench", "entry model vs model-only path side by side"),
    "tune": ("harness.tuning.cli", "search a deployment's config levers (Optuna), each candidate checked first"),
}
#: Installed distributions add subcommands through this entry point group, each entry point a table like
#: CORE_TOOLS (the lab's soak, faults, hostile, ...: lab/harness_lab/commands.py); the core never imports them.
COMMANDS_GROUP = "triton_harness.commands"


def tools() -> dict[str, tuple[str, str]]:
    """Subcommand -> (what runs it, summary): CORE_TOOLS and every installed table."""
    found = dict(CORE_TOOLS)
    for entry_point in entry_points(group=COMMANDS_GROUP):
        found.update(entry_point.load())
    return found


def _run_tool(name: str, runs: str, argv: list[str]) -> int:
    """One tool of ``tools()`` on its own arguments."""
    module_name, _, runner = runs.partition(":")
    module = importlib.import_module(module_name)
    if not runner:
        return module.main(argv)
    parser = argparse.ArgumentParser(prog=f"python -m harness {name}")
    module.add_arguments(parser)
    return _call(parser.prog, getattr(module, runner), parser.parse_args(argv))


def _server_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mode", choices=MODES, default=None, help="local (default), docker or external")
    p.add_argument("--target", default="cpu", help="cpu / gpu / npu")
    p.add_argument("--server-url", default=None, help="host:port of a running server (external mode)")
    p.add_argument(
        "--image",
        default=os.environ.get("TRITON_IMAGE"),
        help="docker mode: tritonserver image (default: the target's; cpu: the image of `make image`)",
    )


def _add_serve(sub) -> None:
    serve = sub.add_parser("serve", help="export what is missing and serve a deployment until Ctrl-C")
    serve.add_argument("deployment")
    _server_flags(serve)
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback only)")
    serve.add_argument("--http-port", type=int, default=8000)
    serve.add_argument("--grpc-port", type=int, default=8001)
    serve.add_argument("--metrics-port", type=int, default=8002)
    serve.add_argument(
        "--api-key",
        action="append",
        default=[k for k in [os.environ.get("HARNESS_API_KEY")] if k],
        help="require 'Authorization: Bearer KEY' on every route but the health probes (repeatable; "
        "default $HARNESS_API_KEY, else off)",
    )
    serve.add_argument("--api-key-file", default=None, help="API keys, one per line (as --api-key)")
    serve.set_defaults(func=_serve)


def _pack_env(args) -> int:
    """Pack the deployment's Python-backend env when missing or stale (docs/python-environments.md)."""
    deployment = get_deployment(args.deployment)
    try:
        recipe = load_recipe(deployment.path)
        tarball = Path(args.output or default_output(deployment.path, args.target)).resolve()
        reason = "--force" if args.force else is_stale(tarball, recipe, args.target)
        if not reason:
            meta = json.loads(sidecar(tarball).read_text())
            print(
                f"{deployment.name}: {tarball} is current ({meta['tool']}, Python {meta['python']}, "
                f"{meta['size_bytes'] / 1e6:.1f} MB); --force to repack"
            )
            return 0
        print(f"{deployment.name}: packing for target {args.target} ({reason})")
        pack(
            recipe,
            args.target,
            tarball,
            python=args.python,
            python_prefix=args.python_prefix,
            compile_bytecode=not args.no_compile,
        )
    except PackEnvError as exc:
        print(f"pack-env: {exc}", file=sys.stderr)
        return 2
    return 0


def _add_pack_env(sub) -> None:
    pack_env = sub.add_parser("pack-env", help="pack a deployment's Python-backend env (EXECUTION_ENV_PATH)")
    pack_env.add_argument("deployment", help="deployment name (folder under deployments/)")
    pack_env.add_argument(
        "--target", default="cpu", help=f"one of {', '.join(TARGETS)} (default cpu = the local server)"
    )
    pack_env.add_argument(
        "--output", default=None, help="tarball path (default deployments/<name>/envs/<target>.tar.gz)"
    )
    pack_env.add_argument(
        "--python", default=None, help="the Python to build the venv with (default python3.X on PATH, X the target's)"
    )
    pack_env.add_argument(
        "--python-prefix",
        default=None,
        help="prefix of the base Python on the target server (e.g. /usr in the NGC image)",
    )
    pack_env.add_argument("--force", action="store_true", help="repack even when the tarball is current")
    pack_env.add_argument(
        "--no-compile", action="store_true", help="leave out .pyc files (smaller tarball, slower stub start-up)"
    )
    pack_env.set_defaults(func=_pack_env)


def _parser(commands: dict[str, tuple[str, str]]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness", description="Triton reference deployments harness")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the deployments the harness finds").set_defaults(func=_list)

    export = sub.add_parser("export", help="run a deployment's export step")
    export.add_argument("deployment")
    export.add_argument("--force", action="store_true", help="export even when the outputs exist")
    export.set_defaults(func=_export)

    _add_serve(sub)

    bench = sub.add_parser("bench", help="run the benchmark scenarios of one or all deployments")
    bench.add_argument("deployment", nargs="?")
    _server_flags(bench)
    bench.add_argument("--duration", type=float, default=5.0, help="seconds measured per concurrency level")
    bench.add_argument("--warmup", type=float, default=1.0)
    bench.add_argument("--concurrency", type=int, nargs="*", help="override the manifest's concurrency list")
    bench.add_argument("--only", nargs="+", metavar="BENCHMARK", help="benchmark ids to run (default: all)")
    bench.set_defaults(func=_bench)

    _add_pack_env(sub)

    for name, (_, summary) in commands.items():
        sub.add_parser(name, help=f"{summary} (`{name} --help` for its options)")
    return parser


def _call(prog: str, func, args) -> int:
    """``func(args)``, with the errors a user causes as one line each."""
    try:
        return func(args)
    except (ManifestError, FileNotFoundError, ValueError) as exc:
        print(f"{prog}: error: {' '.join(str(exc).split()) if len(str(exc)) < 400 else exc}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as exc:
        print(f"{prog}: error: {' '.join(map(str, exc.cmd))} failed (exit {exc.returncode})", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    commands = tools()
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in commands:
        return _run_tool(argv[0], commands[argv[0]][0], argv[1:])
    parser = _parser(commands)
    args = parser.parse_args(argv)
    return _call(parser.prog, args.func, args)


if __name__ == "__main__":
    sys.exit(main())
