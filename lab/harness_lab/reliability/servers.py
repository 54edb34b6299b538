"""What the reliability runs load by default: the deployment's ``[reliability]`` table (its entry
model and its checked workload); the servers themselves are in ``harness.testing.servers``."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.measuring.loadgen import Workload
from harness_lab.reliability.report import RESULTS_DIR
from harness_lab.reliability.workloads import echo_workload


def target_parser(doc: str, report: str, concurrency: int) -> argparse.ArgumentParser:
    """A reliability command's parser: ``--deployment``, ``--model``, ``--workload`` (``chosen_target``),
    ``--concurrency`` and ``--json`` (default ``results/reliability/<report>``)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--deployment", default=None, help="default: the one with a [reliability] table")
    parser.add_argument("--model", default=None, help="default: its [reliability] model; echo: the toy echo model")
    parser.add_argument("--workload", default=None, help="file.py:function (default: its [reliability] workload)")
    parser.add_argument("--concurrency", type=int, default=concurrency)
    parser.add_argument("--json", type=Path, default=RESULTS_DIR / report)
    return parser


def chosen_target(parser, args) -> tuple[str, str]:
    """(deployment, model) of ``args``: as given, else the one deployment with a ``[reliability]`` table
    and its ``model``; ``echo`` needs no deployment. A manifest without them: a usage error."""
    from harness.deployments import ManifestError, declaring, get_deployment

    if args.model == "echo":
        return args.deployment or "", args.model
    try:
        dep = get_deployment(args.deployment) if args.deployment else declaring("reliability")
        if args.model is None and dep.manifest.reliability is None:
            raise ManifestError(f"{dep.name} has no [reliability] table in its deployment.toml: pass --model")
    except ManifestError as exc:
        parser.error(str(exc))
    return dep.name, args.model or dep.manifest.reliability.model


def checked_workload(deployment: str, model: str, http_url: str, reference: str | None = None) -> Workload:
    """The checked workload of ``model`` served at ``http_url``: ``echo`` answers its own text; any other
    model gets ``reference`` (``"file.py:function"`` of the deployment folder) or else the deployment's
    ``[reliability] workload``, called as ``function(http_url, model)``."""
    if model == "echo":
        return echo_workload()
    from harness.deployments import ManifestError, get_deployment

    dep = get_deployment(deployment)
    reference = reference or (dep.manifest.reliability.workload if dep.manifest.reliability else None)
    if reference is None:
        raise ManifestError(f"{dep.name} has no [reliability] workload in its deployment.toml: pass --workload")
    return dep.resolve(reference)(http_url, model)
