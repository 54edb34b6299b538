"""perf_analyzer, Triton's own load generator, as a second generator beside the harness's asyncio one.

    python -m harness perf-analyzer status                  # where perf_analyzer runs here, or why not
    python -m harness perf-analyzer bench <deployment> --duration 3 --concurrency 1 4 \\
        --only <benchmark id> --compare                    # + the asyncio generator, level by level

A working local binary, else the image of ``make perf-analyzer-image`` (perf_analyzer_container.py);
records name their ``generator`` and ``pinning``. See docs/harness.md, "perf_analyzer as a second generator".
"""

from __future__ import annotations

import argparse
import base64
import csv
import io
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness_lab.perf_analyzer_container import DEFAULT_IMAGE, IMAGE_ENV, Runner, select_runner
from harness_lab.perf_analyzer_container import availability as availability

# availability: re-exported for the matrix note (harness/measuring/matrix/outputs.py)
from harness_lab.text_models import is_utf8

#: perf_analyzer -f CSV columns (µs) -> the harness's record fields (ms), model_analyzer names.
CSV_COLUMNS = {
    "Client Send": "perf_client_send",
    "Network+Server Send/Recv": "perf_network_server_send_recv",
    "Server Queue": "perf_server_queue",
    "Server Compute Input": "perf_server_compute_input",
    "Server Compute Infer": "perf_server_compute_infer",
    "Server Compute Output": "perf_server_compute_output",
    "Client Recv": "perf_client_recv",
    "p50 latency": "perf_latency_p50",
    "p90 latency": "perf_latency_p90",
    "p95 latency": "perf_latency_p95",
    "p99 latency": "perf_latency_p99",
    "Avg latency": "perf_latency_avg",
}


#: perf_analyzer's ``--stability-percentage`` here (its own default is 10).
STABILITY_PERCENT = 30


def parse_csv(text: str) -> list[dict]:
    """Rows of perf_analyzer's ``-f`` CSV as records (latencies in ms, sorted by concurrency)."""
    rows = []
    for raw in csv.DictReader(io.StringIO(text.strip())):
        raw = {(k or "").strip(): (v or "").strip() for k, v in raw.items()}
        if not raw.get("Concurrency"):
            continue
        row = {"concurrency": int(float(raw["Concurrency"])), "perf_throughput": float(raw["Inferences/Second"])}
        for column, field in CSV_COLUMNS.items():
            if raw.get(column):
                row[field] = round(float(raw[column]) / 1000.0, 3)
        request_us = sum(
            float(raw.get(c) or 0)
            for c in ("Server Queue", "Server Compute Input", "Server Compute Infer", "Server Compute Output")
        )
        row["perf_server_request"] = round(request_us / 1000.0, 3)
        rows.append(row)
    return sorted(rows, key=lambda r: r["concurrency"])


def input_data(inputs: dict[str, np.ndarray], batched: bool) -> tuple[dict, int]:
    """perf_analyzer ``--input-data`` JSON for fixed inputs, and the ``-b`` batch size.

    With a batching model (``max_batch_size > 0``) the shapes in the JSON leave out the batch
    dimension, which perf_analyzer adds from ``-b``.
    """
    from tritonclient.utils import serialize_byte_tensor

    from harness.tensors import as_triton_array

    entry, batch = {}, 1
    for name, value in inputs.items():
        array = as_triton_array(value)
        shape = list(array.shape)
        if batched:
            batch = shape[0] if shape else 1
            array = array[0] if array.ndim else array
            shape = shape[1:]
        if array.dtype == object:
            items = [v if isinstance(v, bytes) else str(v).encode() for v in np.ravel(array)]
            if all(is_utf8(v) for v in items):
                content = [v.decode() for v in items]
                entry[name] = {"content": content, "shape": shape}
            else:  # perf_analyzer sends b64 data as the raw tensor: Triton's length-prefixed BYTES serialization
                raw = serialize_byte_tensor(np.array(items, dtype=object)).item()
                entry[name] = {"b64": base64.b64encode(raw).decode(), "shape": shape}
        else:
            entry[name] = {"content": np.ravel(array).tolist(), "shape": shape}
    return {"data": [entry]}, batch


def command(
    model: str,
    url: str,
    protocol: str,
    concurrency: list[int],
    input_file: Path,
    csv_file: Path,
    measurement_ms: int,
    batch: int = 1,
    binary: str = "perf_analyzer",
    headers: dict[str, str] | None = None,
    stability_percent: int = STABILITY_PERCENT,
) -> list[str]:
    """The perf_analyzer command line for one scenario.

    perf_analyzer reports the last three of up to ten windows once they agree within
    ``stability_percent`` (its default, 10 %, rarely holds on 2 shared cores: it then fails).
    """
    levels = sorted(set(concurrency))
    cmd = [binary, "-m", model, "-u", url, "-i", protocol, "-b", str(batch), "--input-data", str(input_file)]
    cmd += ["--measurement-mode", "time_windows", "--measurement-interval", str(measurement_ms)]
    cmd += ["--concurrency-range", f"{levels[0]}:{levels[-1]}", "--stability-percentage", str(stability_percent)]
    cmd += ["-f", str(csv_file)]
    for name, value in (headers or {}).items():
        cmd += ["-H", f"{name}:{value}"]
    return cmd


@dataclass
class Scenario:
    """One benchmark scenario as perf_analyzer replays it: its fixed inputs, where, how big."""

    workload: object
    protocol: str
    url: str
    batch: int
    data: dict
    sent: int
    server: dict
    backends: dict


def plan_scenario(ctx, benchmark, protocol: str | None) -> Scenario:
    """The scenario's workload (fixed inputs only), its protocol and URL, and its records' server fields."""
    from harness.measuring.bench import model_backends
    from harness.tensors import make_inputs, make_outputs, request_bytes

    workload = ctx.deployment.resolve(benchmark.workload)(ctx)
    if workload.prepare is not None or workload.inputs is None:
        raise ValueError(
            f"{benchmark.id}: the client prepares every request (prepare()); perf_analyzer can only replay fixed inputs"
        )
    protocol = protocol or benchmark.protocol
    if protocol == "grpc" and not ctx.server.grpc_url:
        protocol = "http"
    with ctx.http_client() as client:
        batched = int(client.get_model_config(workload.model).get("max_batch_size", 0)) > 0
    data, batch = input_data(workload.inputs, batched)
    inputs, outputs = make_inputs(protocol, workload.inputs), make_outputs(protocol, workload.outputs)
    return Scenario(
        workload,
        protocol,
        ctx.server.grpc_url if protocol == "grpc" else ctx.server.http_url,
        batch,
        data,
        request_bytes(protocol, workload.model, inputs, outputs, workload.parameters),
        ctx.server.describe(),
        model_backends(ctx, workload.model),
    )


def run_level(runner: Runner, scenario: Scenario, level: int, tmp: Path, duration_s: float, stability: int, cpus):
    """perf_analyzer at one concurrency ``level``: (the command run, its CSV rows)."""
    workload, csv_file = scenario.workload, tmp / "result.csv"
    cmd = command(
        workload.model,
        scenario.url,
        scenario.protocol,
        [level],
        tmp / "input.json",
        csv_file,
        int(duration_s * 1000),
        scenario.batch,
        runner.binary,
        workload.headers,
        stability,
    )
    executed = runner.command(cmd, tmp, cpus)
    done = subprocess.run(executed, capture_output=True, text=True, timeout=duration_s * 20 + 120)
    if done.returncode != 0:
        raise RuntimeError(
            f"perf_analyzer failed ({done.returncode}): {' '.join(executed)}\n{(done.stdout + done.stderr)[-3000:]}"
        )
    return executed, parse_csv(csv_file.read_text())


def run_scenario(
    ctx,
    benchmark,
    *,
    duration_s: float,
    concurrencies: list[int] | None = None,
    protocol: str | None = None,
    binary: str = "perf_analyzer",
    runner: Runner | None = None,
    stability_percent: int = STABILITY_PERCENT,
) -> list[dict]:
    """Measure one benchmark scenario with perf_analyzer (``runner``, default: ``select_runner(binary)``);
    append and return its records."""
    from harness.measuring.pinning import apply_pinning, pin_plan
    from harness.measuring.records import append_record, scenario_fields

    runner = runner or select_runner(binary)
    scenario = plan_scenario(ctx, benchmark, protocol)
    workload, generator_cpus = scenario.workload, pin_plan().get("generator")
    fields = scenario_fields(
        ctx,
        benchmark,
        workload,
        protocol=scenario.protocol,
        generator=runner.generator,
        server=scenario.server,
        backends=scenario.backends,
    )
    records = []
    with tempfile.TemporaryDirectory(prefix="perf-analyzer-") as tmp:
        (Path(tmp) / "input.json").write_text(json.dumps(scenario.data))
        for level in concurrencies or benchmark.concurrency:  # one run per level: the levels are no range
            pinning = runner.pinning(apply_pinning(scenario.url), generator_cpus)
            executed, rows = run_level(
                runner, scenario, level, Path(tmp), duration_s, stability_percent, generator_cpus
            )
            for row in rows:
                record = {
                    **fields,
                    "duration_s": duration_s,
                    "errors": 0,
                    "requests": None,
                    "items_per_second": round(row["perf_throughput"] * workload.items_per_request, 2),
                    "bytes_sent_per_request": scenario.sent,
                    "bytes_received_per_request": None,
                    "pinning": pinning,
                    "perf_analyzer_command": " ".join(executed),
                    **row,
                }
                append_record(record)
                records.append(record)
    return records


def _status(args) -> int:
    try:
        runner = select_runner(args.binary, args.image)
    except RuntimeError as exc:
        print(exc)
        return 1
    where = f"in {runner.image} (docker run --network host)" if runner.image else f"as {runner.binary}"
    print(f"perf_analyzer runs here {where}: {runner.generator}")
    return 0


def _show(deployment: str, benchmark: str, m: dict, generator: str) -> None:
    print(
        f"{deployment:16} {benchmark:34} c={m['concurrency']:<3} {m['perf_throughput']:9.1f} infer/s  "
        f"p50 {m.get('perf_latency_p50', float('nan')):8.1f} ms  p99 {m.get('perf_latency_p99', float('nan')):8.1f} ms "
        f"({generator}; pinning: {m.get('pinning', 'none')})",
        flush=True,
    )


def _bench(args) -> int:
    from harness.measuring.bench import run_benchmark
    from harness.session import ServerPool, for_each_scenario

    try:
        runner = select_runner(args.binary, args.image)
    except RuntimeError as exc:
        print(f"perf_analyzer: {exc}", file=sys.stderr)
        return 1

    def run(deployment, benchmark, ctx):
        def perf_analyzer(level):
            try:
                rows = run_scenario(
                    ctx,
                    benchmark,
                    duration_s=args.duration,
                    concurrencies=[level],
                    runner=runner,
                    stability_percent=args.stability,
                )
            except RuntimeError as exc:  # no stable windows on a busy machine: say so, keep comparing
                if "Failed to obtain stable measurement" not in str(exc):
                    raise
                print(f"{deployment.name:16} {benchmark.id:34} c={level:<3} perf_analyzer: no stable windows")
                rows = []
            for m in rows:
                _show(deployment.name, benchmark.id, m, runner.generator)

        def asyncio(level):
            for m in run_benchmark(ctx, benchmark, duration_s=args.duration, concurrencies=[level]):
                _show(deployment.name, benchmark.id, m, m["generator"])

        for round_ in range(args.rounds):
            for level in args.concurrency or list(benchmark.concurrency):
                # with --compare the two generators take turns going first, round by round
                order = [perf_analyzer, asyncio][:: -1 if round_ % 2 else 1] if args.compare else [perf_analyzer]
                try:
                    for measure in order:
                        measure(level)
                except ValueError as exc:
                    print(f"{deployment.name:16} {benchmark.id:34} skipped: {exc}")
                    return

    pool = ServerPool(mode=args.mode, target=args.target, url=args.server_url)
    try:
        failed = for_each_scenario(
            pool, run, deployments=[args.deployment] if args.deployment else None, target=args.target, only=args.only
        )
    finally:
        pool.close()
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness perf-analyzer", description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", default="perf_analyzer", help="a local perf_analyzer, used when it runs here")
    parser.add_argument("--image", default=None, help=f"else this image (default: ${IMAGE_ENV} or {DEFAULT_IMAGE})")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("status", help="say where perf_analyzer runs here, or why not").set_defaults(func=_status)
    bench = sub.add_parser("bench", help="measure the benchmark scenarios with perf_analyzer")
    bench.add_argument("deployment", nargs="?")
    bench.add_argument("--mode", default=None)
    bench.add_argument("--target", default="cpu")
    bench.add_argument("--server-url", default=None)
    bench.add_argument("--duration", type=float, default=5.0, help="perf_analyzer's measurement window (s)")
    bench.add_argument("--concurrency", type=int, nargs="*")
    bench.add_argument("--only", nargs="*", help="benchmark ids to run (default: all)")
    bench.add_argument(
        "--compare", action="store_true", help="also the asyncio generator, level by level, taking turns first"
    )
    bench.add_argument("--stability", type=int, default=STABILITY_PERCENT, help="perf_analyzer -s (%%)")
    bench.add_argument("--rounds", type=int, default=1, help="repeat every level this many times")
    bench.set_defaults(func=_bench)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
