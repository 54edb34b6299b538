"""Where one request's time goes, stage by stage, on a text-in embedding model.

    python -m harness stages                      # [peers] ceiling_follows of the [peers] deployment
    python -m harness stages --deployment <d> --model <m> --batch 1,32 --rounds 3

Requests go one at a time (c=1), so the stages add up to what the client waits:
- ``front gate``: client latency through the gate minus the same request sent to tritonserver
  directly (two servers, one at a time, in alternating rounds);
- ``HTTP front end, loopback, client``: direct latency minus Triton's own request time (``success``
  of the model's statistics): tritonserver's HTTP parsing and JSON reply, the loopback hop, the
  Python client's own work;
- Triton's ``queue``, ``compute input`` and ``compute output`` (its per-model statistics);
- ``compute infer`` split by the in-process ceiling (``harness_lab.peers.ceiling``) on the same
  texts in this process: the ONNX Runtime run, the rest of the model's work (tokenize, length
  buckets, pooling), and what is left (the stub round trip and the Python model's own code).

Each reply kind is measured: ``json`` (the vectors as JSON numbers) and ``binary`` (the vector
output as binary data, what ``tritonclient`` asks for). Each round's means go to
results/records.jsonl as ``comparison: stages`` records (never a matrix cell); the matrix's stages
table shows the latest run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid

import requests

from harness.measuring.loadgen import _stats, server_split
from harness.measuring.records import append_record
from harness.testing.servers import deployment_server, started, stop_server
from harness_lab.manifest import chosen, resolve
from harness_lab.peers import workloads
from harness_lab.peers.ceiling import encoder, served_parameter
from harness_lab.text_models import text_tensors

#: The stages in the order a request meets them (``ms`` of each in a record's ``stages_ms``).
STAGES = (
    "front gate",
    "HTTP front end, loopback, client",
    "queue",
    "compute input",
    "ONNX Runtime run",
    "tokenize, buckets, pool",
    "stub round trip and model code",
    "compute output",
)
#: How the vectors come back: JSON numbers, or binary data after the JSON header.
REPLIES = ("json", "binary")


def client_latency_ms(session: requests.Session, url: str, bodies: list[bytes], duration_s: float) -> float:
    """Mean latency of sequential POSTs of ``bodies`` in turn over ``duration_s``."""
    latencies, began = [], time.perf_counter()
    while not latencies or time.perf_counter() - began < duration_s:
        sent = time.perf_counter()
        reply = session.post(
            url, data=bodies[len(latencies) % len(bodies)], headers={"Content-Type": "application/json"}
        )
        reply.raise_for_status()
        latencies.append((time.perf_counter() - sent) * 1e3)
    return statistics.fmean(latencies)


def served(
    deployment, model: str, gate: bool, bodies: dict[tuple, list[bytes]], duration_s: float
) -> dict[tuple, dict]:
    """Per (batch, reply): the client's mean latency on a fresh server of ``model``, Triton's split."""
    server = started(deployment_server(deployment, [model], gate=gate))
    url = f"http://{server.http_url}/v2/models/{model}/infer"
    found = {}
    session = requests.Session()
    try:
        for key, bodies_of_key in bodies.items():
            client_latency_ms(session, url, bodies_of_key, 1.0)  # warm-up
            before = _stats(server.http_url, model)
            latency = client_latency_ms(session, url, bodies_of_key, duration_s)
            found[key] = {"latency_ms": latency, **server_split(before, _stats(server.http_url, model))}
    finally:
        session.close()
        stop_server(server)
    return found


def timed_encoder(deployment, kind: str, threads: int):
    """The served model's work in this process (``encode(texts)``, in its length buckets), and a dict
    whose ``ms`` adds up the time of its ONNX runs."""
    runs = {"ms": 0.0}

    def timed(run):
        def wrapped(*args, **kwargs):
            began = time.perf_counter()
            try:
                return run(*args, **kwargs)
            finally:
                runs["ms"] += (time.perf_counter() - began) * 1e3

        return wrapped

    max_rows = int(served_parameter(deployment, "onnx_max_batch_size", "64"))
    return encoder(deployment, kind, threads, max_rows, wrap_run=timed), runs


def in_process_ms(encode, runs: dict, texts: list[list[str]], duration_s: float) -> tuple[float, float]:
    """Mean ms per call of ``encode`` on ``texts`` in turn, and of its ONNX runs (``runs``)."""
    encode(texts[0])
    runs["ms"], calls, began = 0.0, 0, time.perf_counter()
    while time.perf_counter() - began < duration_s:
        encode(texts[calls % len(texts)])
        calls += 1
    return (time.perf_counter() - began) * 1e3 / calls, runs["ms"] / calls


def breakdown(gated: dict, direct: dict, whole_ms: float, onnx_ms: float) -> dict[str, float]:
    """The stages (``STAGES``) of one round at one batch, in ms."""
    return dict(
        zip(
            STAGES,
            (
                gated["latency_ms"] - direct["latency_ms"],
                direct["latency_ms"] - direct["perf_server_request"],
                direct["perf_server_queue"],
                direct["perf_server_compute_input"],
                onnx_ms,
                whole_ms - onnx_ms,
                direct["perf_server_compute_infer"] - whole_ms,
                direct["perf_server_compute_output"],
            ),
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deployment", default=None, help="default: the one with a [peers] table")
    parser.add_argument("--model", default=None, help="a text-in model of [peers.models] (default: ceiling_follows)")
    parser.add_argument("--batch", default="1,32", help="sentences per request")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per server, batch and round")
    args = parser.parse_args(argv)
    deployment, lab = chosen("peers", args.deployment)
    spec = lab.peers
    if spec is None:
        parser.error(f"{deployment.name} has no [peers] table: its `embedding` gives the texts and the ceiling")
    model = args.model or spec.ceiling_follows
    if model not in spec.models or spec.models[model].request != "text":
        parser.error(f"--model {model}: not a text-in model of {deployment.name}'s [peers.models]")
    pieces = resolve(deployment.name, spec.embedding)()
    text_input, output = text_tensors(deployment.model_repository, model)
    batches = [int(b) for b in args.batch.split(",")]
    texts = {b: workloads.texts_of(pieces, workloads.UNIFORM, b) for b in batches}
    bodies = {
        (b, reply): [workloads.triton_text_body(t, text_input, output if reply == "binary" else None) for t in texts[b]]
        for b in batches
        for reply in REPLIES
    }
    threads = int(served_parameter(deployment, "intra_op_thread_count", "1"))
    encode, onnx_runs = timed_encoder(deployment, spec.models[model].ceiling, threads)
    run_id = uuid.uuid4().hex[:12]
    for index in range(args.rounds):
        order = (True, False) if index % 2 == 0 else (False, True)
        measured = {gate: served(deployment, model, gate, bodies, args.duration) for gate in order}
        in_process = {b: in_process_ms(encode, onnx_runs, texts[b], 2.0) for b in batches}
        for batch, reply in bodies:
            gated, direct = measured[True][batch, reply], measured[False][batch, reply]
            stages = breakdown(gated, direct, *in_process[batch])
            record = {
                "deployment": deployment.name,
                "benchmark": f"stages-b{batch}-{reply}",
                "comparison": "stages",
                "run_id": run_id,
                "round": index,
                "model": model,
                "variant": f"{model}: one request at a time, through the gate and directly",
                "target": "cpu",
                "generator": "python requests, sequential (c=1)",
                "protocol": "http",
                "concurrency": 1,
                "items_per_request": batch,
                "reply": reply,
                "items_per_second": round(1e3 * batch / gated["latency_ms"], 2),
                "client_ms_gate": round(gated["latency_ms"], 3),
                "client_ms_direct": round(direct["latency_ms"], 3),
                "server_avg_batch_size": direct.get("server_avg_batch_size"),
                "in_process_threads": threads,
                "stages_ms": {k: round(v, 3) for k, v in stages.items()},
            }
            append_record(record)
            print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
