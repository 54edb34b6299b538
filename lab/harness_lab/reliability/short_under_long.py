"""Short-query latency while long texts are in flight: what a user's query waits behind passages.

    python -m harness short-under-long --deployment embedding_cpu --model embedding_onnx_text
    python -m harness short-under-long --config '{"embedding_onnx_text": {"instance_count": 1}}'
    python -m harness short-under-long --query-lane 1

Texts: the deployment's ``[peers] embedding`` ``mixed`` texts, split at ``LONG_FACTOR`` x their median
length into short queries and long passages. On one server, each round measures the probe (short
queries, c=1) alone, then the same probe while ``--long-concurrency`` passages are held in flight;
every answer is checked against the vector the server gave that text alone. ``--query-lane N``
serves a second copy of the model, ``<model>_queries`` with N instances of its own, and sends the
probe there: the queries' own instances, which no passage occupies. The report
(results/reliability/short_under_long.json) gives the probe's p50/p99 idle and loaded per round, the
medians, loaded / idle, and the queries/s and passages/s meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import psutil

from harness.deployments import declaring, get_deployment
from harness.manifest import ConfigOverrides, overrides_table
from harness.measuring.loadgen import percentiles, run_checked_load
from harness.repository import read_config, write_config
from harness.testing.servers import deployment_server, started, stop_server
from harness.variants import apply_overrides
from harness_lab.reliability.report import RESULTS_DIR, write_json
from harness_lab.reliability.servers import chosen_target
from harness_lab.reliability.workloads import bytes_workload
from harness_lab.text_models import text_tensors

#: A text is long when it is this many times longer (characters) than the median text.
LONG_FACTOR = 4


def split_texts(texts: list[str]) -> tuple[list[str], list[str]]:
    """(short, long) of ``texts``, in their order: long ones are over ``LONG_FACTOR`` x the median length."""
    cut = LONG_FACTOR * statistics.median(len(t) for t in texts)
    return [t for t in texts if len(t) <= cut], [t for t in texts if len(t) > cut]


def add_query_lane(server, model: str, instances: int, overrides: ConfigOverrides | None = None) -> str:
    """Add ``<model>_queries`` to ``server``'s repository (not started yet): ``model``'s files under a
    config of its own name, ``instances`` instances and ``overrides`` (harness.variants), public
    behind the gate. Returns its name."""
    repository = Path(server.options.model_repository)
    lane = f"{model}_queries"
    (repository / lane).mkdir()
    for item in (repository / model).iterdir():
        if item.name != "config.pbtxt":
            os.symlink(item.resolve(), repository / lane / item.name)
    lane_overrides = (overrides or ConfigOverrides()).model_copy(update={"instance_count": instances})
    config = apply_overrides(read_config(repository / model / "config.pbtxt"), lane_overrides)
    config.name = lane
    write_config(config, repository / lane / "config.pbtxt")
    server.options.required_models = [*server.options.required_models, lane]
    policy = server.options.gate_policy
    server.options.gate_policy = policy.model_copy(update={"public": [*policy.public, lane]})
    return lane


def probe(server, short, long, concurrency: int, long_concurrency: int, duration_s: float, warmup_s: float) -> dict:
    """The probe's latency (``concurrency`` short queries) alone, then behind ``long_concurrency`` passages."""
    found: dict = {}

    def hold(log) -> None:
        time.sleep(warmup_s + duration_s)

    def measured_probe(background=None) -> None:
        log = run_checked_load(short, server.http_url, concurrency=concurrency, during=hold)
        found["probe"] = log.steady(warmup_s)
        if background is not None:  # the passages that ended while the probe measured
            since, until = log.began + warmup_s, log.ended
            passages = background.select(ended_from=since, ended_before=until)
            ok = [r for r in passages if r.status == "ok"]
            found["long"] = {
                "requests": len(passages),
                "ok": len(ok),
                "first_problem": next((r.detail for r in passages if r.status != "ok"), None),
                "throughput_rps": round(len(ok) / max(until - since, 1e-9), 1),
                "latency_all": percentiles([(r.end - r.start) * 1e3 for r in ok]),
            }

    measured_probe()
    idle = found["probe"]
    run_checked_load(long, server.http_url, concurrency=long_concurrency, during=measured_probe)
    loaded, passages = found["probe"], found["long"]
    for part in (idle, loaded, passages):
        problems = part["requests"] - part["ok"]
        if problems:
            raise RuntimeError(f"{problems} of {part['requests']} requests failed: {part['first_problem']}")
    return {
        "idle": idle["latency_all"],
        "loaded": loaded["latency_all"],
        "short_per_s": loaded["throughput_rps"],
        "long_per_s": passages["throughput_rps"],
        "long_latency": passages["latency_all"],
    }


def run(
    deployment: str,
    model: str,
    concurrency: int,
    long_concurrency: int,
    rounds: int,
    duration_s: float,
    warmup_s: float,
    overrides: dict | None = None,
    query_lane: int = 0,
    lane_overrides: dict | None = None,
) -> dict:
    dep = get_deployment(deployment)
    if dep.manifest.peers is None:
        raise SystemExit(f"{dep.name} has no [peers] table: its `embedding` gives the mixed texts")
    short_texts, long_texts = split_texts(dep.resolve(dep.manifest.peers.embedding)().mixed)
    input_name, output = text_tensors(dep.model_repository, model)
    server = deployment_server(dep, [model], overrides=overrides_table(overrides))
    lane_config = ConfigOverrides.model_validate(lane_overrides or {})
    probe_model = add_query_lane(server, model, query_lane, lane_config) if query_lane else model
    started(server)
    rows = []
    try:

        def workload(texts, served):
            cases = [t.encode() for t in texts]
            return bytes_workload(server.http_url, served, cases, input_name=input_name, output=output, atol=2e-4)

        short, long = workload(short_texts[:64], probe_model), workload(long_texts[:32], model)
        for index in range(rounds):
            row = {"round": index, **probe(server, short, long, concurrency, long_concurrency, duration_s, warmup_s)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        stop_server(server)

    def median(part: str, key: str) -> float:
        return round(statistics.median(r[part][key] for r in rows), 2)

    summary = {f"{part}_{key}_median": median(part, key) for part in ("idle", "loaded") for key in ("p50_ms", "p99_ms")}
    return {
        "deployment": deployment,
        "model": model,
        "config_overrides": overrides,
        "query_lane": {"model": probe_model, "instances": query_lane, "config_overrides": lane_overrides}
        if query_lane
        else None,
        "short_texts": len(short_texts[:64]),
        "long_texts": len(long_texts[:32]),
        "concurrency": concurrency,
        "long_concurrency": long_concurrency,
        "rounds": rounds,
        "duration_s": duration_s,
        "rows": rows,
        **summary,
        "p99_loaded_over_idle": round(summary["loaded_p99_ms_median"] / summary["idle_p99_ms_median"], 2),
        "short_per_s_median": round(statistics.median(r["short_per_s"] for r in rows), 1),
        "long_per_s_median": round(statistics.median(r["long_per_s"] for r in rows), 1),
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load_average_1m": round(psutil.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deployment", default=None, help="default: the one with a [peers] table")
    parser.add_argument("--model", default=None, help="a text-in, vector-out model (default: [reliability] model)")
    parser.add_argument("--concurrency", type=int, default=1, help="short queries in flight (the probe)")
    parser.add_argument("--long-concurrency", type=int, default=4, help="passages held in flight meanwhile")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=8.0, help="seconds each probe measures")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--config", default=None, help="JSON config overrides of the served models (harness.variants)")
    parser.add_argument(
        "--query-lane", type=int, default=0, metavar="N", help="probe a copy of the model with N instances of its own"
    )
    parser.add_argument("--lane-config", default=None, help="JSON config overrides of the query lane's model only")
    parser.add_argument("--json", type=Path, default=RESULTS_DIR / "short_under_long.json")
    args = parser.parse_args(argv)
    if args.deployment is None:
        args.deployment = declaring("peers").name
    deployment, model = chosen_target(parser, args)
    overrides = json.loads(args.config) if args.config else None
    report = run(
        deployment,
        model,
        args.concurrency,
        args.long_concurrency,
        args.rounds,
        args.duration,
        args.warmup,
        overrides,
        args.query_lane,
        json.loads(args.lane_config) if args.lane_config else None,
    )
    write_json(report, args.json)
    print({k: v for k, v in report.items() if k.endswith("_median") or k == "p99_loaded_over_idle"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
