"""``python -m harness_lab.scaleout {k8s,footprint,capacity,run,down}``: see lab/harness_lab/scaleout/__init__.py."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _k8s(args) -> int:
    from harness.deployments import ManifestError, discover, get_deployment
    from harness_lab.scaleout.k8s import RenderOptions, dump, render, write

    try:
        deployments = [get_deployment(args.deployment)] if args.deployment else discover()
    except ManifestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for deployment in deployments:
        options = RenderOptions(image=args.image, namespace=args.namespace, gate=args.gate)
        if args.stdout:
            for name, objects in render(deployment, options).items():
                print(f"# {deployment.name}/{name}\n---\n{dump(objects)}", end="")
            continue
        out = Path(args.out) / deployment.name if args.out else None
        for path in write(deployment, out, options):
            print(path)
    return 0


#: ``scaleout run`` scenarios, in the order they run; the last two need a second node (``--nodes 2``).
SCENARIOS = ("throughput", "kill", "roll", "rollback", "signal", "drain", "node-loss")


def main(argv: list[str] | None = None) -> int:
    from harness_lab.scaleout.k8s import DEFAULT_IMAGE

    parser = argparse.ArgumentParser(
        prog="python -m harness_lab.scaleout",
        description="Kubernetes objects, replica footprints, multi-replica runs",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    k8s = sub.add_parser("k8s", help="render Kubernetes objects of a deployment (default: all) into build/k8s/<d>/")
    k8s.add_argument("deployment", nargs="?")
    k8s.add_argument("--image", default=DEFAULT_IMAGE, help="tritonserver image as your cluster pulls it")
    k8s.add_argument("--namespace", default=None)
    k8s.add_argument("--out", default=None, help="folder for <deployment>/*.yaml (default build/k8s)")
    k8s.add_argument("--stdout", action="store_true", help="print the YAML instead of writing files")
    k8s.add_argument(
        "--gate",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="serve through the front gate (python -m triton_gate serve; default): the image must carry "
        "triton_gate as the CPU image does; --no-gate for an image without it (NGC, Ascend)",
    )
    fp = sub.add_parser("footprint", help="measure one replica of each deployment in the CPU image (docker)")
    fp.add_argument("deployments", nargs="*", help="default: every deployment with a cpu target")
    fp.add_argument("--image", default=None, help="tritonserver image (default: the CPU image of `make image`)")
    fp.add_argument("--duration", type=float, default=4.0, help="seconds of load per scenario")
    run = sub.add_parser(
        "run",
        help="replicas on Docker swarm: throughput 1..N, kill one, roll a version, roll back a bad one; the load "
        "fits text-in, vector-out models (one BYTES input, one float output, named by the model's config)",
    )
    run.add_argument("--deployment", default=None, help="default: the one whose [scaleout] table names a model")
    run.add_argument("--replicas", type=int, default=3)
    run.add_argument("--concurrency", type=int, default=8)
    run.add_argument("--duration", type=float, default=10.0, help="seconds measured per throughput level")
    run.add_argument(
        "--nodes",
        type=int,
        default=1,
        choices=[1, 2],
        help="2: a second swarm node (a dockerd in a container) joins; the replicas spread over both",
    )
    run.add_argument(
        "--scenarios",
        nargs="+",
        default=None,
        choices=SCENARIOS,
        help="default: throughput kill roll rollback signal; with --nodes 2: throughput drain node-loss",
    )
    run.add_argument(
        "--lb",
        default="haproxy",
        choices=["haproxy", "nginx"],
        help="the stack's balancer (lab/docs/scaling.md: why haproxy)",
    )
    run.add_argument("--keep", action="store_true", help="leave the stack running (build/scaleout/<d>/)")
    run.add_argument(
        "--gate", action=argparse.BooleanOptionalAction, default=True, help="replicas behind the front gate (default)"
    )
    run.add_argument("--out", default=None, help="results JSON (default results/scaleout/<deployment>.json)")
    sub.add_parser("down", help="remove every stack and node of ours and leave the swarm (after a crashed run)")
    cap = sub.add_parser("capacity", help="replicas for N requests/s at a p99 target, from docs/results.json")
    cap.add_argument("--source", default=None, help="results JSON of `make matrix` (default docs/results.json)")
    cap.add_argument("--server-mode", default="local")
    cap.add_argument("--p99", type=float, nargs="+", default=[100, 300, 1000], help="p99 targets, ms")
    cap.add_argument("--rate", type=int, nargs="+", default=[100, 1000], help="requests/s to serve")
    cap.add_argument("--scenario", nargs="+", default=None, help="only these benchmark ids")
    cap.add_argument("--utilisation", type=float, default=0.7, help="share of a replica's measured maximum to plan for")
    args = parser.parse_args(argv)
    if args.command == "capacity":
        from harness_lab.scaleout.capacity import SOURCE, markdown, model

        lines = model(
            args.source or SOURCE,
            server_mode=args.server_mode,
            p99_targets_ms=args.p99,
            rates=args.rate,
            utilisation=args.utilisation,
            scenarios_wanted=args.scenario,
        )
        print(markdown(lines, rates=args.rate))
        return 0
    if args.command == "k8s":
        return _k8s(args)
    if args.command == "footprint":
        from harness_lab.scaleout.footprint import measure_all

        measure_all(args.deployments or None, image=args.image, duration_s=args.duration)
        return 0
    if args.command == "down":
        from harness_lab.scaleout.swarm import teardown

        for line in teardown():
            print(f"removed {line}")
        return 0
    import signal

    from harness.deployments import ManifestError
    from harness_lab.manifest import declaring
    from harness_lab.scaleout import ScaleoutError
    from harness_lab.scaleout.run import run as run_stack

    try:
        deployment = args.deployment or declaring("scaleout.model").name
    except ManifestError as exc:
        parser.error(str(exc))

    def interrupted(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    # SIGTERM (a CI timeout, kill) unwinds like Ctrl-C: the run's teardown still removes the stack.
    signal.signal(signal.SIGTERM, interrupted)
    try:
        run_stack(
            deployment,
            replicas=args.replicas,
            concurrency=args.concurrency,
            duration_s=args.duration,
            scenarios=tuple(
                args.scenarios or (SCENARIOS[:-2] if args.nodes == 1 else ("throughput", "drain", "node-loss"))
            ),
            keep=args.keep,
            out=Path(args.out) if args.out else None,
            gate=args.gate,
            lb=args.lb,
            nodes=args.nodes,
        )
    except (ScaleoutError, ManifestError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
