"""One (workload, batch, concurrency) cell of a side-by-side run: each round, every ceiling worker
measures in-process, then every target is loaded by wrk in turn (the order reversed on odd rounds),
its server tree's CPU counted; and the record each target's rounds make."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from dataclasses import dataclass, field, fields

from harness import PROJECT_ROOT
from harness.measuring.engines import cpu_flags
from harness.measuring.pinning import cores_label
from harness_lab.peers import workloads
from harness_lab.peers.processes import tree_cpu_parts, wait_idle
from harness_lab.peers.targets import Target

#: The largest batch a ceiling is measured at (a served model's dynamic batches reach it).
CEILING_MAX_BATCH = 64
CEILING_RULE = f"max(in-process at batch, at min(batch x c, {CEILING_MAX_BATCH}))"
#: Named where the record is INT8: the ops onnxruntime runs and the kernels MLAS dispatches to here.
INT8_KERNEL_PATH = "onnxruntime dynamic INT8, QOperator (DynamicQuantizeMatMul + QAttention), MLAS u8s8 GEMM, {isa}"


def int8_kernel_path() -> str:
    flags = cpu_flags()
    isa = (
        "AVX512-VNNI kernels (avx512_vnni)"
        if "avx512_vnni" in flags
        else "AVX-VNNI kernels (avx_vnni)"
        if "avx_vnni" in flags
        else "AVX2 u8s8 kernels without VNNI (int16 pair sums)"
    )
    return INT8_KERNEL_PATH.format(isa=isa)


class CeilingWorker:
    """``harness_lab.peers.ceiling`` pinned to the server's cores; ``precision``: the one
    its OpenVINO engine runs (empty on onnxruntime and torch)."""

    def __init__(self, deployment: str, kind: str, cores: set[int], threads: int):
        options = f"--deployment {deployment} --kind {kind} --threads {threads}"
        command = [sys.executable, "-m", "harness_lab.peers.ceiling", *options.split()]
        self.process = subprocess.Popen(
            ["taskset", "-c", cores_label(cores)] + command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=PROJECT_ROOT,
        )
        ready = self.process.stdout.readline()
        if not ready:
            raise RuntimeError(f"ceiling worker {kind} did not start")
        self.precision = json.loads(ready).get("precision", "")

    def measure(self, batch: int, duration_s: float, workload: str) -> tuple[float, float]:
        """Sentences/s and the worker's CPU ms per sentence at ``batch`` texts of ``workload``."""
        self.process.stdin.write(f"{batch} {duration_s} {workload}\n")
        self.process.stdin.flush()
        answer = json.loads(self.process.stdout.readline())
        return answer["items_per_second"], answer["cpu_ms_per_item"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


@dataclass
class Cell:
    """One workload at one concurrency: what is loaded, and for how long each round."""

    workload: str
    batch: int
    concurrency: int
    rounds: int
    duration_s: float

    @property
    def ceiling_batch(self) -> int:
        return min(self.batch * self.concurrency, CEILING_MAX_BATCH)

    @property
    def name(self) -> str:
        return self.workload if self.workload == workloads.MIXED else f"b={self.batch}"


@dataclass
class TargetRounds:
    """A target's rounds: the wrk runs, and the server tree's CPU ms per sentence (in all, by process)."""

    runs: list = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    cpu_parts: list[dict] = field(default_factory=list)


@dataclass
class CeilingRounds:
    """A ceiling kind's rounds: sentences/s and the worker's CPU ms per sentence."""

    rates: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)


def measure_ceiling(worker: CeilingWorker, cell: Cell) -> tuple[float, float]:
    """The best of the request's batch and the largest the server could form (a 64-row batch can be
    slower per sentence than 8 rows on a small-cache core): (sentences/s, CPU ms per sentence)."""
    measured = [
        worker.measure(size, min(cell.duration_s, 2.0), cell.workload)
        for size in sorted({cell.batch, cell.ceiling_batch})
    ]
    return max(rate for rate, _ in measured), min(cpu for _, cpu in measured)


def measure_target(generator, target: Target, bodies: list[bytes], cell: Cell, pace: float, into: TargetRounds):
    """One wrk window on ``target``, long enough for every connection to complete a few requests at
    ``pace`` (sentences/s; its ceiling's), and the CPU its server tree spent on it."""
    in_flight = cell.batch * cell.concurrency
    warm = generator.run(target.url, bodies, cell.concurrency, max(1.0, in_flight / (pace or 1.0)))
    # a target far below its ceiling: its own warm-up pace (none done: slower than one round of
    # requests per half the warm-up), so no window ends before a request
    own = warm.requests_per_second * cell.batch or in_flight / (2 * max(warm.duration_s, 1e-3))
    pace = min(pace or 1.0, own)
    duration = min(max(cell.duration_s, 3 * in_flight / pace), 120.0)
    idle_s = 10 * in_flight / pace + 10
    wait_idle(target.pid, idle_s)
    root = "peer" if target.server["path"] == "peer" else "gate"
    before = tree_cpu_parts(target.pid, root)
    run = generator.run(target.url, bodies, cell.concurrency, duration)
    wait_idle(target.pid, idle_s)
    # the server also finishes the (at most ``concurrency``) requests in flight at the end
    items = max((run.requests + cell.concurrency) * cell.batch, 1)
    by_part = {k: 1e3 * (v - before.get(k, 0.0)) / items for k, v in tree_cpu_parts(target.pid, root).items()}
    into.runs.append(run)
    into.cpu_ms.append(sum(by_part.values()))
    into.cpu_parts.append({k: round(v, 4) for k, v in by_part.items()})


def measure_cell(generator, targets: list[Target], workers: dict, bodies: dict, cell: Cell):
    """``cell.rounds`` rounds of every ceiling and every target, alternating the targets' order:
    ({target: TargetRounds}, {ceiling kind: CeilingRounds})."""
    measured = {t.name: TargetRounds() for t in targets}
    ceilings = {kind: CeilingRounds() for kind in workers}
    for round_index in range(cell.rounds):
        for kind, worker in workers.items():
            rate, cpu_ms = measure_ceiling(worker, cell)
            ceilings[kind].rates.append(rate)
            ceilings[kind].cpu_ms.append(cpu_ms)
        for target in targets if round_index % 2 == 0 else targets[::-1]:
            pace = ceilings[target.ceiling].rates[-1]
            measure_target(generator, target, bodies[target.name], cell, pace, measured[target.name])
    return measured, ceilings


@dataclass
class SideBySideRecord:
    """One target's line in results/records.jsonl: the run, the target (``server``: its own fields),
    the median round's generator metrics, every round's sentences/s and CPU, and its ceiling's."""

    deployment: str
    benchmark: str
    workload: str
    run_id: str
    model: str
    variant: str
    generator: str
    server_cores: str
    generator_cores: str
    items_per_request: int
    config_overrides: dict | None
    label: str
    base_model: str
    server: dict
    metrics: dict
    items_per_second: float
    rounds_items_per_second: list[float]
    errors: int
    ceiling_kind: str
    ceiling_precision: str | None
    ceiling_batch_size: int
    ceiling_items_per_second: float
    rounds_ceiling_items_per_second: list[float]
    served_over_ceiling: float | None
    rounds_cpu_ms_per_item: list[float]
    #: the same by process (gate, tritonserver, each stub; a peer's own programs)
    rounds_cpu_ms_per_item_by_process: list[dict]
    rounds_ceiling_cpu_ms_per_item: list[float]
    cpu_ceiling_over_served: float | None
    kernel_path: str | None = None
    comparison: str = "side-by-side"
    target: str = "cpu"
    protocol: str = "http"
    ceiling_rule: str = CEILING_RULE

    def as_dict(self) -> dict:
        """The record's fields in order, ``server`` and ``metrics`` spread where they stand (the
        fields after them win: the run's own ``items_per_second`` and ``errors``)."""
        found = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name in ("server", "metrics"):
                found |= value
            elif item.name != "kernel_path" or value:
                found[item.name] = value
        return found

    def line(self, cell: Cell) -> str:
        return (
            f"{cell.name:<5} c={cell.concurrency:<2} {self.model:28s} {self.items_per_second:8.1f} sent/s "
            f"rounds {self.rounds_items_per_second} errors {self.errors} "
            f"/ceiling({self.ceiling_kind}@{self.ceiling_batch_size}) {self.served_over_ceiling} "
            f"cpu ms/sent {self.rounds_cpu_ms_per_item} ceiling {self.rounds_ceiling_cpu_ms_per_item} "
            f"-> {self.cpu_ceiling_over_served}"
        )


def side_by_side_record(run: dict, target: Target, cell: Cell, rounds: TargetRounds, ceiling: CeilingRounds, precision):
    """The record of ``target``'s ``rounds`` in ``cell`` against its ceiling's; ``run``: the run's own
    fields (``deployment``, ``run_id``, ``generator``, cores, ``config_overrides``, ``label``)."""
    rates = [r.requests_per_second * cell.batch for r in rounds.runs]
    median_run = sorted(rounds.runs, key=lambda r: r.requests_per_second)[len(rounds.runs) // 2]
    ceiling_rate, served = statistics.median(ceiling.rates), statistics.median(rates)
    # CPU per sentence: the server tree's (counted up to idle after the window) against the ceiling
    # worker's; steadier than rates on a core shared with other jobs
    cpu_ratios = [c / s for c, s in zip(ceiling.cpu_ms, rounds.cpu_ms) if s]
    return SideBySideRecord(
        **run,
        benchmark="side-by-side-" + (cell.workload if cell.workload == workloads.MIXED else f"b{cell.batch}"),
        workload=cell.workload,
        model=target.name,
        variant=f"{target.name}: {target.describe}{run['label']}",
        items_per_request=cell.batch,
        base_model=target.name.split("[")[0].removeprefix("openai:"),
        server=target.server,
        metrics=median_run.metrics(cell.batch),
        items_per_second=round(served, 2),
        rounds_items_per_second=[round(r, 2) for r in rates],
        errors=sum(r.errors for r in rounds.runs),
        ceiling_kind=target.ceiling,
        ceiling_precision=precision or None,
        ceiling_batch_size=cell.ceiling_batch,
        ceiling_items_per_second=round(ceiling_rate, 2),
        rounds_ceiling_items_per_second=[round(c, 2) for c in ceiling.rates],
        served_over_ceiling=round(served / ceiling_rate, 3) if ceiling_rate else None,
        rounds_cpu_ms_per_item=[round(c, 4) for c in rounds.cpu_ms],
        rounds_cpu_ms_per_item_by_process=rounds.cpu_parts,
        rounds_ceiling_cpu_ms_per_item=[round(c, 4) for c in ceiling.cpu_ms],
        cpu_ceiling_over_served=round(statistics.median(cpu_ratios), 3) if cpu_ratios else None,
        kernel_path=int8_kernel_path() if "int8" in target.name or target.ceiling == "onnx-int8" else None,
    )
