"""The measured footprint of one replica in the CPU image (``python -m harness scaleout footprint``),
written to ``footprints.json`` beside this module; deploy/k8s/<deployment>/ sizes its requests and
startup probe from it (lab/tests/test_k8s.py checks they cover it)."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from harness.context import DeploymentContext
from harness.deployments import Deployment, discover
from harness.measuring.loadgen import run_load
from harness.measuring.records import machine

FOOTPRINTS = Path(__file__).with_name("footprints.json")
COMMAND = "python -m harness_lab.scaleout footprint"


def load_footprints(path: Path = FOOTPRINTS) -> dict:
    """``{"deployments": {name: footprint}, ...}`` or an empty table when never measured."""
    if not path.exists():
        return {"deployments": {}}
    return json.loads(path.read_text())


def working_set_mib(stats: dict) -> float | None:
    """Memory a container holds, as ``docker stats`` and the kubelet count it (cache excluded)."""
    memory = stats.get("memory_stats") or {}
    usage = memory.get("usage")
    if usage is None:
        return None
    detail = memory.get("stats") or {}
    cache = detail.get("total_inactive_file", detail.get("inactive_file", 0))
    return (usage - cache) / 2**20


def cpu_cores(stats: dict) -> float | None:
    """Cores used between this stats sample and the previous one."""
    cpu, pre = stats.get("cpu_stats") or {}, stats.get("precpu_stats") or {}
    try:
        used = cpu["cpu_usage"]["total_usage"] - pre["cpu_usage"]["total_usage"]
        system = cpu["system_cpu_usage"] - pre["system_cpu_usage"]
    except KeyError:
        return None
    online = cpu.get("online_cpus") or len(cpu["cpu_usage"].get("percpu_usage") or [1])
    return used / system * online if system > 0 else None


class StatsSampler:
    """Reads a container's stats stream (one sample a second) in a thread."""

    def __init__(self, container):
        self.container = container
        self.samples: list[tuple[float, float | None, float | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)

    def _read(self) -> None:
        try:
            for stats in self.container.stats(stream=True, decode=True):
                self.samples.append((time.monotonic(), working_set_mib(stats), cpu_cores(stats)))
                if self._stop.is_set():
                    return
        except Exception:  # noqa: BLE001 - container stopped
            return

    def __enter__(self) -> StatsSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def between(self, began: float, ended: float) -> list[tuple[float, float | None, float | None]]:
        return [s for s in self.samples if began <= s[0] <= ended]


def default_scenarios(deployment: Deployment, target: str = "cpu") -> list:
    """Benchmarks that run the repository as shipped (no config variant) on ``target``."""
    return [b for b in deployment.benchmarks if not b.config and (not b.targets or target in b.targets)]


def load_scenario(benchmark, deployment: Deployment, server, sampler: StatsSampler, duration_s: float) -> dict:
    """One benchmark at its highest concurrency: throughput, p99, errors and the container's mean cores."""
    context = DeploymentContext(deployment, server, "cpu")
    workload = deployment.resolve(benchmark.workload)(context)
    protocol = benchmark.protocol if server.grpc_url else "http"
    url = server.grpc_url if protocol == "grpc" else server.http_url
    concurrency = max(benchmark.concurrency)
    began = time.monotonic()
    level = run_load(
        workload,
        protocol=protocol,
        url=url,
        http_url=server.http_url,
        concurrency=concurrency,
        duration_s=duration_s,
        warmup_s=0.5,
    )
    window = [c for _, _, c in sampler.between(began + 1.0, time.monotonic()) if c is not None]
    metrics = level.metrics(workload.items_per_request)
    return {
        "benchmark": benchmark.id,
        "model": workload.model,
        "concurrency": concurrency,
        "protocol": protocol,
        "infer_per_s": metrics["perf_throughput"],
        "p99_ms": metrics["perf_latency_p99"],
        "errors": metrics["errors"],
        "cpu_cores": round(sum(window) / len(window), 2) if window else None,
    }


def measure(deployment: Deployment, image: str | None = None, duration_s: float = 4.0, log=print) -> dict:
    """Serve ``deployment`` in the CPU image and measure one replica (see the module docstring)."""
    from harness.serving.launchers.docker import DockerTritonServer
    from harness.serving.launchers.docker_envs import attach_packed_env

    deployment.export()
    options = deployment.server_options("cpu")
    if image:
        options.image = image
    attach_packed_env(deployment, options)
    server = DockerTritonServer(options)
    began = time.monotonic()
    server.start()
    try:
        with StatsSampler(server.container) as sampler:
            server.wait_ready()
            ready_at = time.monotonic()
            time.sleep(2.5)  # two stats samples of the idle, ready server
            idle = [m for _, m, _ in sampler.between(ready_at, time.monotonic()) if m is not None]
            scenarios = []
            for benchmark in default_scenarios(deployment):
                scenarios.append(load_scenario(benchmark, deployment, server, sampler, duration_s))
                log(
                    f"{deployment.name}: {benchmark.id} c={scenarios[-1]['concurrency']}: {scenarios[-1]['infer_per_s']} infer/s"
                )
            time.sleep(1.5)
            memory = [m for _, m, _ in sampler.between(ready_at, time.monotonic()) if m is not None]
    finally:
        server.stop()
    cores = [s["cpu_cores"] for s in scenarios if s["cpu_cores"] is not None]
    return {
        "start_to_ready_s": round(ready_at - began, 1),
        "idle_mib": round(min(idle) if idle else memory[0], 1),
        "peak_mib": round(max(memory), 1),
        "cpu_cores_under_load": max(cores) if cores else None,
        "scenarios": scenarios,
        "image": options.image or server.profile.image,
        # Other work on the machine takes cores from the container: read cpu figures against it.
        "host_load_avg_1m": round(os.getloadavg()[0], 1),
    }


def measure_all(
    names: list[str] | None = None, image: str | None = None, path: Path = FOOTPRINTS, duration_s: float = 4.0
) -> dict:
    """Measure the named deployments (default: all) and merge them into ``path``."""
    table = load_footprints(path)
    failed: list[str] = []
    for deployment in discover():
        if names and deployment.name not in names:
            continue
        if "cpu" not in deployment.targets:
            continue
        print(f"{deployment.name}: measuring one replica in the CPU image ...", flush=True)
        try:
            measured = measure(deployment, image=image, duration_s=duration_s)
        except Exception as exc:  # noqa: BLE001 - one deployment that cannot start keeps its old figures
            print(
                f"{deployment.name}: not measured, previous figures kept: {' '.join(str(exc).split())[:400]}",
                flush=True,
            )
            failed.append(deployment.name)
            continue
        measured["measured"] = time.strftime("%Y-%m-%d", time.gmtime())
        table["deployments"][deployment.name] = measured
        print(f"{deployment.name}: {json.dumps(measured)}", flush=True)
        table["machine"] = machine()
        table["command"] = COMMAND
        path.write_text(json.dumps(table, indent=2, sort_keys=True) + "\n")
    if failed:
        raise RuntimeError(f"not measured: {', '.join(failed)} (see above)")
    return table
