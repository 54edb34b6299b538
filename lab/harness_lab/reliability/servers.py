"""What the reliability runs load by default: the deployment's lab ``[reliability]`` table (its entry
model, its checked workload); the servers themselves are in ``harness.testing.servers``."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.measuring.loadgen import Workload
from harness_lab.reliability.report import RESULTS_DIR
from harness_lab.reliability.workloads import echo_workload, text_embedding_workload


def target_parser(doc: str, report: str, concurrency: int) -> argparse.ArgumentParser:
    """A reliability command's parser: ``--deployment``, ``--model``, ``--workload`` (``chosen_target``),
    ``--concurrency`` and ``--json`` (default ``results/reliability/<report>``)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--deployment", default=None, help="default: the one with a [reliability] table")
    parser.add_argument("--model", default=None, help="default: its [reliability] model; echo: the toy echo model")
    parser.add_argument(
        "--workload",
        default=None,
        help="file.py:function of lab/deployments/ (default: its [reliability] workload, else unique sentences)",
    )
    parser.add_argument("--concurrency", type=int, default=concurrency)
    parser.add_argument("--json", type=Path, default=RESULTS_DIR / report)
    return parser


def chosen_target(parser, args) -> tuple[str, str]:
    """(deployment, model) of ``args``: as given, else the one deployment whose lab file has a
    ``[reliability]`` table, and its ``model``; ``echo`` needs no deployment. Neither: a usage error."""
    from harness.deployments import ManifestError
    from harness_lab.manifest import chosen

    if args.model == "echo":
        return args.deployment or "", args.model
    try:
        dep, lab = chosen("reliability", args.deployment)
        if args.model is None and lab.reliability is None:
            raise ManifestError(
                f"{dep.name} has no [reliability] table in lab/deployments/{dep.name}.toml: pass --model"
            )
    except ManifestError as exc:
        parser.error(str(exc))
    return dep.name, args.model or lab.reliability.model


def checked_workload(deployment: str, model: str, http_url: str, reference: str | None = None) -> Workload:
    """The checked workload of ``model`` served at ``http_url``: ``echo`` answers its own text; any other
    model gets ``reference`` (``"file.py:function"`` of the lab folder) or else the lab ``[reliability]``
    table's ``workload``, called as ``function(http_url, model)``; neither: unique sentences to the
    model's one text input, each answer compared with its vector alone (``text_embedding_workload``)."""
    if model == "echo":
        return echo_workload()
    from harness.deployments import get_deployment
    from harness_lab.manifest import lab_manifest, resolve
    from harness_lab.text_models import text_tensors

    dep = get_deployment(deployment)
    table = lab_manifest(dep).reliability
    reference = reference or (table.workload if table else None)
    if reference:
        return resolve(dep.name, reference)(http_url, model)
    input_name, output = text_tensors(dep.model_repository, model)
    return text_embedding_workload(http_url, model, input_name=input_name, output=output)
