"""``python -m harness_lab.scaleout {bundle,run,down}``: see lab/harness_lab/scaleout/__init__.py.
The Kubernetes objects and swarm stacks are committed files (deploy/README.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

#: ``scaleout run`` scenarios, in the order they run; the last two need a second node (``--nodes 2``).
SCENARIOS = ("throughput", "kill", "roll", "rollback", "drain", "node-loss")


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m harness_lab.scaleout", description="bundles and multi-replica runs of the swarm stacks"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    bundle = sub.add_parser(
        "bundle", help="write a deployment's bundle (what deploy/k8s and deploy/swarm mount at /mnt/models)"
    )
    bundle.add_argument("deployment")
    bundle.add_argument("--out", required=True, help="folder to write (replaced): model_repository/ + envs/")
    bundle.add_argument("--image", default=None, help="the image its env is packed for (default: `make image`'s)")
    run = sub.add_parser(
        "run",
        help="deploy/swarm/<d>/stack.yml on Docker swarm: throughput 1..N, kill one, roll a version, roll back a bad "
        "one; the load fits text-in, vector-out models (one BYTES input, one float output, named by the model's config)",
    )
    run.add_argument("--deployment", default=None, help="default: the one whose [scaleout] table names a model")
    run.add_argument("--replicas", type=int, default=3)
    run.add_argument("--concurrency", type=int, default=8)
    run.add_argument("--duration", type=float, default=10.0, help="seconds measured per throughput level")
    run.add_argument(
        "--nodes", type=int, default=1, choices=[1, 2], help="2: a second swarm node (a dockerd in a container) joins"
    )
    run.add_argument(
        "--scenarios",
        nargs="+",
        default=None,
        choices=SCENARIOS,
        help="default: throughput kill roll rollback; with --nodes 2: throughput drain node-loss",
    )
    run.add_argument("--lb", default="haproxy", choices=["haproxy", "nginx"], help="lab/docs/scaling.md: why haproxy")
    run.add_argument("--keep", action="store_true", help="leave the stack running")
    run.add_argument("--out", default=None, help="results JSON (default results/scaleout/<deployment>.json)")
    sub.add_parser("down", help="remove every stack and node of ours and leave the swarm (after a crashed run)")
    return parser


def run(args) -> int:
    from harness.deployments import ManifestError
    from harness.serving.launchers.base import interrupt_on_sigterm
    from harness_lab.manifest import declaring
    from harness_lab.scaleout import ScaleoutError
    from harness_lab.scaleout.run import run as run_stack

    # SIGTERM (a CI timeout, kill) unwinds like Ctrl-C: the run's teardown still removes the stack.
    interrupt_on_sigterm()
    default = SCENARIOS[:-2] if args.nodes == 1 else ("throughput", "drain", "node-loss")
    try:
        run_stack(
            args.deployment or declaring("scaleout.model").name,
            replicas=args.replicas,
            concurrency=args.concurrency,
            duration_s=args.duration,
            scenarios=tuple(args.scenarios or default),
            keep=args.keep,
            out=Path(args.out) if args.out else None,
            lb=args.lb,
            nodes=args.nodes,
        )
    except (ScaleoutError, ManifestError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "bundle":
        from harness.deployments import get_deployment
        from harness_lab.scaleout.swarm import CPU_IMAGE, write_bundle

        print(write_bundle(get_deployment(args.deployment), Path(args.out).resolve(), args.image or CPU_IMAGE).parent)
        return 0
    if args.command == "down":
        from harness_lab.scaleout.swarm import teardown

        for line in teardown():
            print(f"removed {line}")
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
