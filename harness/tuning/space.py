"""The search space: each tuned model's levers, derived from its ``config.pbtxt`` and from the config
overrides its manifest's benchmarks already name, so a copy made by ``harness new`` tunes as it is.

Levers: ``engine`` (the shipped config, or the engine part of a benchmark's overrides for the model:
another backend, an in-process engine, an INT8 file where its gate wrote it), ``precision`` (f32,
bf16 on a CPU with BF16; on OpenVINO only), ``dynamic_batching``, ``queue_delay_us``,
``preferred_batch_size``, ``instance_count`` (up to the cores) and ``threads`` per instance."""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path

from harness.deployments import Deployment
from harness.manifest import overrides_table
from harness.repository import ModelConfig, parameter, read_config

#: The thread-count parameter of each engine: onnxruntime's, OpenVINO's.
THREAD_KEYS = ("intra_op_thread_count", "INFERENCE_NUM_THREADS")
PRECISION_KEY = "INFERENCE_PRECISION_HINT"
#: ``/proc/cpuinfo`` flags of a CPU that runs BF16 natively.
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
QUEUE_DELAYS_US = (0, 100, 500, 2000, 10000)
SHIPPED = "shipped"
#: Override fields a lever of its own sets; what else a benchmark overrides is an engine choice.
LEVER_FIELDS = ("instance_count", "dynamic_batching", "max_queue_delay_microseconds", "preferred_batch_size")
LEVERS = (
    "engine",
    "precision",
    "dynamic_batching",
    "queue_delay_us",
    "preferred_batch",
    "instance_count",
    "threads",
)


def usable_cores() -> int:
    return len(os.sched_getaffinity(0))


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return {flag for line in text.splitlines() if line.startswith("flags") for flag in line.split(":", 1)[1].split()}


def runs_openvino(config: ModelConfig, overrides: dict) -> bool:
    """The model runs on OpenVINO: its backend, or an in-process engine parameter, says so."""
    values = {v.string_value for v in config.parameters.values()} | set((overrides.get("parameters") or {}).values())
    return (overrides.get("backend") or config.backend) == "openvino" or "openvino" in values


def batch_label(sizes) -> str:
    return ",".join(str(s) for s in sizes) or "none"


def engine_part(overrides: dict) -> dict:
    """``overrides`` less the fields the other levers set (a thread key stays: the threads lever sets it)."""
    part = {k: copy.deepcopy(v) for k, v in overrides.items() if k not in LEVER_FIELDS}
    parameters = {k: v for k, v in part.pop("parameters", {}).items() if k != PRECISION_KEY}
    return part | ({"parameters": parameters} if parameters else {})


def _without_threads(part: dict) -> dict:
    parameters = {k: v for k, v in (part.get("parameters") or {}).items() if k not in THREAD_KEYS}
    return {k: v for k, v in part.items() if k != "parameters"} | ({"parameters": parameters} if parameters else {})


def engine_choices(deployment: Deployment, model: str, target: str) -> dict[str, dict[str, dict]]:
    """``{label: {model: overrides}}``: the shipped config, and each distinct engine part a benchmark
    gives ``model`` (with what that benchmark changes on the other models, e.g. an ensemble's batch)."""
    choices: dict[str, dict[str, dict]] = {SHIPPED: {}}
    seen = [{}]
    for benchmark in deployment.benchmarks:
        overrides = benchmark.overrides
        if model not in overrides or (benchmark.targets and target not in benchmark.targets):
            continue
        part = engine_part(overrides[model])
        if _without_threads(part) in seen or deployment.unexported_files(overrides_table({model: part})):
            continue
        seen.append(_without_threads(part))
        choices[benchmark.id] = {**{m: o for m, o in overrides.items() if m != model}, model: part}
    return choices


@dataclass
class ModelLevers:
    """The levers of one model and their ranges."""

    model: str
    config: ModelConfig
    engines: dict[str, dict[str, dict]]
    cores: int
    bf16: bool
    only: set[str] = field(default_factory=lambda: set(LEVERS))

    def name(self, lever: str) -> str:
        return f"{self.model}:{lever}"

    @property
    def thread_keys(self) -> list[str]:
        return [k for k in THREAD_KEYS if k in self.config.parameters]

    def threads_of(self, overrides: dict) -> list[str]:
        return sorted(set(self.thread_keys) | {k for k in THREAD_KEYS if k in (overrides.get("parameters") or {})})

    def delays(self) -> list[int]:
        return sorted({*QUEUE_DELAYS_US, self.config.dynamic_batching.max_queue_delay_microseconds})

    def preferred(self) -> list[str]:
        sizes = [2**k for k in range(1, 12) if 2**k <= self.config.max_batch_size]
        shipped = batch_label(self.config.dynamic_batching.preferred_batch_size)
        return sorted({"none", shipped, *map(str, sizes)}, key=lambda s: (s != "none", len(s), s))

    def precisions(self) -> list[str]:
        return ["f32", "bf16"] if self.bf16 else ["f32"]

    def suggest(self, trial) -> dict[str, dict]:
        """``{model: overrides}`` of the values ``trial`` picks (``optuna.Trial`` or a fixed one)."""
        on = self.only.__contains__
        engine = trial.suggest_categorical(self.name("engine"), list(self.engines)) if on("engine") else SHIPPED
        companions = copy.deepcopy(self.engines[engine])
        overrides = companions.pop(self.model, {})
        parameters = overrides.setdefault("parameters", {})
        if on("precision") and runs_openvino(self.config, overrides):
            parameters[PRECISION_KEY] = trial.suggest_categorical(self.name("precision"), self.precisions())
        if self.config.max_batch_size > 0 and overrides.get("max_batch_size") != 0:
            batching = self.config.HasField("dynamic_batching")  # as shipped, unless the lever is tuned
            if on("dynamic_batching"):
                batching = overrides["dynamic_batching"] = trial.suggest_categorical(
                    self.name("dynamic_batching"), [True, False]
                )
            if batching and on("queue_delay_us"):
                delay = trial.suggest_categorical(self.name("queue_delay_us"), self.delays())
                overrides["max_queue_delay_microseconds"] = delay
            if batching and on("preferred_batch"):
                label = trial.suggest_categorical(self.name("preferred_batch"), self.preferred())
                overrides["preferred_batch_size"] = [] if label == "none" else [int(s) for s in label.split(",")]
        if on("instance_count"):
            overrides["instance_count"] = trial.suggest_int(self.name("instance_count"), 1, self.cores)
        keys = self.threads_of(overrides)
        if keys and on("threads"):
            threads = trial.suggest_int(self.name("threads"), 1, self.cores)
            parameters.update({key: str(threads) for key in keys})
        if not parameters:
            overrides.pop("parameters")
        return {**companions, self.model: overrides}

    def shipped_params(self) -> dict:
        """The lever values of the config as shipped (the first trial of every study)."""
        batching = self.config.dynamic_batching
        params = {
            "engine": SHIPPED,
            "dynamic_batching": self.config.HasField("dynamic_batching"),
            "queue_delay_us": batching.max_queue_delay_microseconds,
            "preferred_batch": batch_label(batching.preferred_batch_size),
            "instance_count": max([g.count for g in self.config.instance_group] or [1]),
        }
        if self.thread_keys:
            params["threads"] = int(parameter(self.config, self.thread_keys[0]) or 1)
        if runs_openvino(self.config, {}) and parameter(self.config, PRECISION_KEY) in self.precisions():
            params["precision"] = parameter(self.config, PRECISION_KEY)
        return {self.name(k): v for k, v in params.items() if k in self.only}

    def values(self) -> dict[str, list]:
        """Each lever's values to try one at a time (integers: their ends), for the smoke."""
        ends = sorted({1, self.cores})
        found = {
            "engine": list(self.engines),
            "precision": self.precisions(),
            "dynamic_batching": [True, False],
            "queue_delay_us": self.delays(),
            "preferred_batch": self.preferred(),
            "instance_count": ends,
            "threads": ends,
        }
        return {self.name(k): v for k, v in found.items() if k in self.only}


@dataclass
class Space:
    """The levers of every tuned model of one deployment."""

    deployment: Deployment
    models: list[ModelLevers]

    def suggest(self, trial) -> dict[str, dict]:
        overrides: dict[str, dict] = {}
        for levers in self.models:
            picked = levers.suggest(trial)
            own = picked.pop(levers.model)
            overrides = {**picked, **overrides, levers.model: own}  # a tuned model's own values win
        return overrides

    def shipped_params(self) -> dict:
        return {k: v for levers in self.models for k, v in levers.shipped_params().items()}


def build_space(
    deployment: Deployment, models: list[str], target: str = "cpu", levers: list[str] | None = None
) -> Space:
    """The space of ``models`` of ``deployment`` (``levers``: only those; default all)."""
    unknown = sorted(set(levers or []) - set(LEVERS))
    if unknown:
        raise ValueError(f"--levers: no lever {unknown} (levers: {', '.join(LEVERS)})")
    found = []
    for model in models:
        path = deployment.model_repository / model / "config.pbtxt"
        if not path.exists():
            raise ValueError(f"{deployment.name} has no model {model!r} (no {path})")
        config = read_config(path)
        if config.platform == "ensemble":
            raise ValueError(f"{model} is an ensemble: it has no instances or batcher of its own; tune its steps")
        found.append(
            ModelLevers(
                model=model,
                config=config,
                engines=engine_choices(deployment, model, target),
                cores=usable_cores(),
                bf16=bool(cpu_flags() & set(BF16_FLAGS)),
                only=set(levers or LEVERS),
            )
        )
    return Space(deployment, found)
