"""Where the OpenAI path's time goes: CPU ms per sentence of each process (front gate, tritonserver,
each Python stub) for the native request and ``/v1/embeddings`` (float, base64, and without the
``usage`` count) on one gated server, wrk at each (batch, concurrency), alternating rounds;
then the gate's own JSON work timed in-process (parse the request, build and encode the answer).

CPU time per sentence is steadier than sentences/s on a shared machine; the rounds alternate the
paths so that drift hits each alike. Which model: the deployment's ``[peers] openai_models``.

    python -m harness_lab.peers.openai_cost --batch 1,32 --concurrency 8 --rounds 2 --duration 3
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import time
from collections import defaultdict

import numpy as np

from harness.deployments import declaring, get_deployment
from harness.measuring.generators.wrk import WrkGenerator, cores_label
from harness.measuring.pair_bench import cpu_seconds
from harness.testing.servers import stop_server
from harness_lab.peers import workloads
from harness_lab.peers.__main__ import _post, check_openai, openai_calls, start_triton
from harness_lab.peers.processes import wait_idle
from harness_lab.text_models import text_tensors
from triton_gate.policy import GatePolicy, OpenAIMapping


def process_cpu(root_pid: int) -> dict[str, float]:
    """CPU seconds of the server tree by part: ``gate``, ``tritonserver``, ``stub:<model>``."""
    parts = cpu_seconds(root_pid)
    parts.pop("generator")
    return parts


def gate_json_costs(batch: int, dimension: int, pool: list[str], repeats: int = 200) -> dict[str, float]:
    """ms per request of the gate's request parsing and answer encoding (its own ``dump``: float
    arrays, base64 strings), and of ``row.tolist()`` + ``json.dumps`` for comparison."""
    import base64

    from triton_gate.openai_api import dump, parse_request

    policy = OpenAIMapping(models={"m": {"text": {"model": "m"}}}, default="m")
    body = workloads.openai_body(workloads.sentences(pool, batch), "m")
    vectors = np.random.default_rng(0).standard_normal((batch, dimension)).astype(np.float32)

    def answer(embed) -> dict:
        data = [{"object": "embedding", "index": i, "embedding": embed(row)} for i, row in enumerate(vectors)]
        return {"object": "list", "data": data, "model": "m"}

    def timed(function) -> float:
        start = time.process_time()
        for _ in range(repeats):
            function()
        return 1e3 * (time.process_time() - start) / repeats

    return {
        "parse_request": timed(lambda: parse_request(body, policy)),
        "answer_float": timed(lambda: dump(answer(lambda row: row))),
        "answer_base64": timed(
            lambda: dump(answer(lambda row: base64.b64encode(row.astype("<f4").tobytes()).decode()))
        ),
        "answer_float_tolist_json_dumps": timed(
            lambda: json.dumps(answer(lambda row: row.tolist()), separators=(",", ":")).encode()
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployment", default=None)
    parser.add_argument("--batch", default="1,32")
    parser.add_argument("--concurrency", default="8")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--server-cores", default=None, help="default: every core but 0")
    parser.add_argument("--generator-cores", default="0")
    parser.add_argument("--json", default=None, help="also write the report here")
    args = parser.parse_args(argv)
    deployment = get_deployment(args.deployment) if args.deployment else declaring("peers")
    spec = deployment.manifest.peers
    model, name = next(iter(spec.openai_models.items()))
    text_input = text_tensors(deployment.model_repository, model)[0]
    pieces = deployment.resolve(spec.embedding)()
    pool, dimension = pieces.sentences, pieces.dimension
    generator_cores = {int(c) for c in args.generator_cores.split(",")}
    all_cores = set(os.sched_getaffinity(0))
    server_cores = {int(c) for c in args.server_cores.split(",")} if args.server_cores else all_cores - generator_cores
    served = list(dict.fromkeys([model] + openai_calls(deployment, [model], spec)))
    # a second server whose /v1/embeddings counts no usage (no tokenizer call, no token-count output)
    policy = deployment.gate_policy().model_dump()
    mapped = policy["openai"]["models"][name]
    mapped["tokenizer"] = None
    if mapped["text"]:
        mapped["text"]["tokens_output"] = None
    policy = GatePolicy.model_validate(policy)
    servers = {
        "": start_triton(deployment, served, server_cores, None, True),
        "no-usage": start_triton(deployment, served, server_cores, None, True, gate_policy=policy),
    }
    generator = WrkGenerator(generator_cores)
    report = {"model": model, "server_cores": cores_label(server_cores), "generator": generator.describe(), "rows": []}
    try:
        paths = {
            "native": (
                servers[""],
                f"/v2/models/{model}/infer",
                functools.partial(workloads.triton_text_body, text_input=text_input),
            ),
            "openai float": (servers[""], "/v1/embeddings", lambda t: workloads.openai_body(t, name)),
            "openai base64": (servers[""], "/v1/embeddings", lambda t: workloads.openai_body(t, name, "base64")),
            "openai float, no usage": (servers["no-usage"], "/v1/embeddings", lambda t: workloads.openai_body(t, name)),
        }
        for batch in [int(b) for b in args.batch.split(",")]:
            bodies = {
                path: workloads.bodies(make, pieces, workloads.UNIFORM, batch) for path, (_, _, make) in paths.items()
            }
            for path, (server, route, _) in paths.items():
                if route == "/v1/embeddings":
                    check_openai(_post(f"http://{server.http_url}{route}", bodies[path][0]).content, batch, dimension)
            for concurrency in [int(c) for c in args.concurrency.split(",")]:
                rates, cpu = defaultdict(list), defaultdict(lambda: defaultdict(list))
                for round_index in range(args.rounds):
                    order = list(paths) if round_index % 2 == 0 else list(paths)[::-1]
                    for path in order:
                        server, route, _ = paths[path]
                        url = f"http://{server.http_url}{route}"
                        warm = generator.run(url, bodies[path], concurrency, max(1.0, batch * concurrency / 100))
                        # long enough for every connection to complete a few requests at the warm-up's pace
                        pace = max(warm.requests_per_second * batch, 10.0)
                        duration = min(max(args.duration, 3 * batch * concurrency / pace), 60.0)
                        wait_idle(server.process.pid, 20)
                        before = process_cpu(server.process.pid)
                        run = generator.run(url, bodies[path], concurrency, duration)
                        wait_idle(server.process.pid, 20)
                        after = process_cpu(server.process.pid)
                        sentences = (run.requests + concurrency) * batch
                        rates[path].append(run.requests_per_second * batch)
                        for part in after:
                            cpu[path][part].append(1e3 * (after[part] - before.get(part, 0.0)) / max(sentences, 1))
                for path in paths:
                    parts = {part: round(statistics.median(v), 3) for part, v in sorted(cpu[path].items())}
                    row = {
                        "batch": batch,
                        "concurrency": concurrency,
                        "path": path,
                        "sentences_per_s": [round(r, 1) for r in rates[path]],
                        "cpu_ms_per_sentence": parts,
                        "cpu_ms_per_sentence_total": round(sum(parts.values()), 3),
                    }
                    report["rows"].append(row)
                    print(json.dumps(row), flush=True)
            report.setdefault("gate_json_ms_per_request", {})[batch] = {
                k: round(v, 3) for k, v in gate_json_costs(batch, dimension, pool).items()
            }
            print(json.dumps({"batch": batch, "gate_json_ms_per_request": report["gate_json_ms_per_request"][batch]}))
    finally:
        generator.close()
        for server in servers.values():
            stop_server(server)
    report["load_average_1m"] = os.getloadavg()[0]
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
