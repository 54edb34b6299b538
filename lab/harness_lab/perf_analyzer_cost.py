"""What a load generator costs: CPU-ms per request of perf_analyzer and of the asyncio generator,
each against the same ``echo`` toy model (a server that costs almost nothing, so the generator's
own work shows), level after level, taking turns going first.

    python -m harness_lab.perf_analyzer_cost --concurrency 1 4 --duration 3 --rounds 2

perf_analyzer's CPU is its process's user + system time (bash ``times`` around it in the
container; the ``docker`` client is not counted), the asyncio generator's that of this process
(``getrusage``); requests are the echo model's successes in Triton's statistics over each run.
Printed, not recorded.
"""

from __future__ import annotations

import argparse
import json
import resource
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from harness_lab.perf_analyzer import command, input_data, select_runner

SENTENCE = b"a sentence of about fifteen tokens, as the embedding benchmarks send"


def _cpu_s(usage) -> float:
    return usage.ru_utime + usage.ru_stime


def _times_s(line: str) -> float:
    """User + system seconds from the children line of bash ``times`` (``0m0.70s 0m0.12s``)."""
    total = 0.0
    for part in line.split()[:2]:
        minutes, _, seconds = part.partition("m")
        total += float(minutes) * 60 + float(seconds.rstrip("s"))
    return total


def perf_analyzer_cpu(runner, cmd: list[str], workdir: Path) -> float:
    """Run ``cmd``; CPU seconds perf_analyzer spent."""
    from harness_lab.perf_analyzer_container import docker_command

    if runner.image is None:
        before = _cpu_s(resource.getrusage(resource.RUSAGE_CHILDREN))
        subprocess.run(cmd, capture_output=True, check=True)
        return _cpu_s(resource.getrusage(resource.RUSAGE_CHILDREN)) - before
    inner = ["bash", "-c", f"{shlex.join(['perf_analyzer', *cmd[1:]])} >&2 && times"]
    done = subprocess.run(docker_command(inner, runner.image, workdir), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"perf_analyzer failed ({done.returncode}): {done.stderr[-2000:]}")
    return _times_s(done.stdout.strip().splitlines()[-1])


def generator_cost(args, runner) -> int:
    from harness.measuring.loadgen import Workload, _stats, run_load
    from harness.testing.servers import model_server, started, stop_server

    text = np.array([[SENTENCE]], dtype=object)
    workload = Workload(model="echo", inputs={"TEXT": text}, outputs=["TEXT_OUT"])
    with tempfile.TemporaryDirectory(prefix="generator-cost-") as tmp:
        workdir = Path(tmp)
        server = started(model_server("", "echo"), 120)
        try:
            data, batch = input_data({"TEXT": text}, batched=True)
            (workdir / "input.json").write_text(json.dumps(data))

            def served() -> int:
                return int(_stats(server.http_url, "echo")["success_count"])

            def with_perf_analyzer(level: int) -> tuple[str, float]:
                cmd = command(
                    "echo", server.grpc_url, "grpc", [level], workdir / "input.json", workdir / "out.csv",
                    int(args.duration * 1000), batch, runner.binary, stability_percent=100,
                )  # fmt: skip
                return runner.generator, perf_analyzer_cpu(runner, cmd, workdir)

            def with_asyncio(level: int) -> tuple[str, float]:
                before = _cpu_s(resource.getrusage(resource.RUSAGE_SELF))
                run_load(
                    workload, protocol="grpc", url=server.grpc_url, http_url=server.http_url,
                    concurrency=level, duration_s=args.duration, warmup_s=1.0,
                )  # fmt: skip
                return "harness-asyncio", _cpu_s(resource.getrusage(resource.RUSAGE_SELF)) - before

            for round_ in range(args.rounds):
                for level in args.concurrency:
                    for measure in [with_perf_analyzer, with_asyncio][:: -1 if round_ % 2 else 1]:
                        count = served()
                        generator, cpu = measure(level)
                        requests = max(served() - count, 1)
                        print(
                            f"round {round_} c={level:<3} {generator:36} {cpu * 1e3 / requests:6.3f} CPU-ms/request "
                            f"({requests} requests)",
                            flush=True,
                        )
        finally:
            stop_server(server)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness_lab.perf_analyzer_cost", description=__doc__)
    parser.add_argument("--binary", default="perf_analyzer", help="a local perf_analyzer, used when it runs here")
    parser.add_argument("--image", default=None, help="else this perf_analyzer image")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    return generator_cost(args, select_runner(args.binary, args.image))


if __name__ == "__main__":
    sys.exit(main())
