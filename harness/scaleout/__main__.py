"""``python -m harness.scaleout {k8s,footprint,run}``: see harness/scaleout/__init__.py."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _k8s(args) -> int:
    from harness.deployments import ManifestError, discover, get_deployment
    from harness.scaleout.k8s import RenderOptions, dump, render, write

    try:
        deployments = [get_deployment(args.deployment)] if args.deployment else discover()
    except ManifestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for deployment in deployments:
        options = RenderOptions(image=args.image, namespace=args.namespace)
        if args.stdout:
            for name, objects in render(deployment, options).items():
                print(f"# {deployment.name}/{name}\n---\n{dump(objects)}", end="")
            continue
        out = Path(args.out) / deployment.name if args.out else None
        for path in write(deployment, out, options):
            print(path)
    return 0


def main(argv: list[str] | None = None) -> int:
    from harness.scaleout.k8s import DEFAULT_IMAGE

    parser = argparse.ArgumentParser(prog="python -m harness.scaleout",
                                     description="Kubernetes objects, replica footprints, multi-replica runs")
    sub = parser.add_subparsers(dest="command", required=True)
    k8s = sub.add_parser("k8s", help="render Kubernetes objects of a deployment (default: all) into build/k8s/<d>/")
    k8s.add_argument("deployment", nargs="?")
    k8s.add_argument("--image", default=DEFAULT_IMAGE, help="tritonserver image as your cluster pulls it")
    k8s.add_argument("--namespace", default=None)
    k8s.add_argument("--out", default=None, help="folder for <deployment>/*.yaml (default build/k8s)")
    k8s.add_argument("--stdout", action="store_true", help="print the YAML instead of writing files")
    fp = sub.add_parser("footprint", help="measure one replica of each deployment in the CPU image (docker)")
    fp.add_argument("deployments", nargs="*", help="default: every deployment with a cpu target")
    fp.add_argument("--image", default=None, help="tritonserver image (default: the CPU image of `make image`)")
    fp.add_argument("--duration", type=float, default=4.0, help="seconds of load per scenario")
    args = parser.parse_args(argv)
    if args.command == "k8s":
        return _k8s(args)
    if args.command == "footprint":
        from harness.scaleout.footprint import measure_all

        measure_all(args.deployments or None, image=args.image, duration_s=args.duration)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
