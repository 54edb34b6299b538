"""The in-process ceiling: the same work as a served request, in one process, no server.

An ONNX kind (a key of the deployment's ``[peers] ceiling_onnx``, e.g. ``onnx-fp32``): tokenize
(fast tokenizer) + that ONNX file (onnxruntime, ``threads`` intra-op threads) + mean pooling +
normalisation, at ``batch`` sentences per call, run in length buckets of at most the rows
the served model ``[peers] ceiling_follows`` runs (its ``onnx_max_batch_size``;
on a small-cache core 16-row runs beat one 64-row run), its ``tokenizer_parallelism`` as there.
``<kind>@openvino`` (e.g. ``onnx-fp32@openvino``): the same, that file compiled by the
deployment's own ``openvino_run`` (a ``[peers] embedding`` piece: ``threads`` threads, the
engine's default precision, as the served model's ``in_process_engine = "openvino"`` runs it).
``sentence-transformers``: ``SentenceTransformer.encode`` (torch, ``threads`` threads). A worker of
``python -m harness peers`` (``measure.CeilingWorker``), pinned to the server's cores: it reads
``batch duration workload`` lines from stdin and answers each with a JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from harness.deployments import Deployment, ManifestError
from harness_lab.manifest import PeersSpec, chosen, lab_manifest, resolve

TORCH_KIND = "sentence-transformers"
#: Engines an ONNX kind also runs on (``<kind>@<engine>``); without one: onnxruntime.
ENGINES = ("openvino",)


def peers_table(deployment: Deployment) -> PeersSpec:
    """The deployment's lab ``[peers]`` table; ManifestError when it has none."""
    spec = lab_manifest(deployment).peers
    if spec is None:
        raise ManifestError(f"{deployment.name} has no [peers] table in lab/deployments/{deployment.name}.toml")
    return spec


def kinds(deployment: Deployment) -> list[str]:
    """Every ceiling kind of the deployment: its ONNX kinds, on each engine, and the torch one."""
    onnx = list(peers_table(deployment).ceiling_onnx)
    return [*onnx, *(f"{kind}@{engine}" for engine in ENGINES for kind in onnx), TORCH_KIND]


def served_parameter(deployment: Deployment, key: str, default: str) -> str:
    """A parameter of the served model the ceiling follows (``[peers] ceiling_follows``): the
    ceiling does what it does."""
    from harness.repository import parameter, read_config

    config = deployment.model_repository / peers_table(deployment).ceiling_follows / "config.pbtxt"
    return parameter(read_config(config), key, default)


def encoder(deployment: Deployment, kind: str, threads: int, max_rows: int = 64):
    """A function ``texts -> vectors`` doing a served request's whole work in this process
    on OpenVINO its ``precision`` is the one that runs."""
    spec = peers_table(deployment)
    pieces = resolve(deployment.name, spec.embedding)()
    if kind == TORCH_KIND:
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(threads)
        model = SentenceTransformer(str(pieces.model_dir), device="cpu")
        return lambda texts: model.encode(texts, batch_size=len(texts), normalize_embeddings=True)
    from harness.measuring.engines import cpu_session

    if served_parameter(deployment, "tokenizer_parallelism", "true").lower() in ("0", "false", "no"):
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    onnx, _, engine = kind.partition("@")
    path = deployment.path / spec.ceiling_onnx[onnx]
    run, precision = (
        pieces.openvino_run(path, threads) if engine == "openvino" else (cpu_session(path, threads).run, "")
    )

    def encode(texts):
        return pieces.embed(run, texts, max_rows)

    encode.precision = precision
    return encode


def measure(encode, groups: list[list[str]], duration_s: float) -> tuple[float, float]:
    """Sentences per second of ``encode(group)`` over ``duration_s``, the groups in turn (after two
    warm-up calls), and this process's CPU milliseconds per sentence (steady on a shared core,
    where the rate is not)."""
    encode(groups[0])
    encode(groups[-1])
    calls, items, began, cpu = 0, 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - began < duration_s:
        group = groups[calls % len(groups)]
        encode(group)
        calls, items = calls + 1, items + len(group)
    return items / (time.perf_counter() - began), 1e3 * (time.process_time() - cpu) / items


def main(argv: list[str] | None = None) -> int:
    from harness_lab.peers.workloads import texts_of

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployment", default=None, help="default: the one with a [peers] table")
    parser.add_argument(
        "--kind", required=True, help=f"a key of [peers] ceiling_onnx (optionally @openvino), or {TORCH_KIND}"
    )
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    try:
        deployment, lab = chosen("peers", args.deployment)
        peers_table(deployment)
    except ManifestError as exc:
        parser.error(str(exc))
    if args.kind not in kinds(deployment):
        parser.error(f"--kind {args.kind!r}: one of {', '.join(kinds(deployment))}")
    max_rows = int(served_parameter(deployment, "onnx_max_batch_size", "64"))
    encode = encoder(deployment, args.kind, args.threads, max_rows)
    pieces = resolve(deployment.name, lab.peers.embedding)()

    def report(batch: int, duration_s: float, workload: str) -> None:
        rate, cpu_ms = measure(encode, texts_of(pieces, workload, batch), duration_s)
        line = {"kind": args.kind, "batch": batch, "workload": workload, "threads": args.threads}
        print(json.dumps({**line, "items_per_second": round(rate, 2), "cpu_ms_per_item": round(cpu_ms, 4)}), flush=True)

    print(json.dumps({"ready": args.kind, "precision": getattr(encode, "precision", "")}), flush=True)
    for line in sys.stdin:  # "batch duration workload"
        batch, duration, workload = line.split()
        report(int(batch), float(duration), workload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
