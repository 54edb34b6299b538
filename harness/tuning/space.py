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

import optuna

from harness.deployments import Deployment
from harness.manifest import overrides_table
from harness.measuring.engines import cpu_flags
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


def runs_openvino(config: ModelConfig, overrides: dict) -> bool:
    """The model runs on OpenVINO: its backend, or an in-process engine parameter, says so."""
    values = {v.string_value for v in config.parameters.values()} | set((overrides.get("parameters") or {}).values())
    return (overrides.get("backend") or config.backend) == "openvino" or "openvino" in values


def batch_label(sizes) -> str:
    return ",".join(str(s) for s in sizes) or "none"


def engine_part(overrides: dict, dropped: tuple[str, ...] = (PRECISION_KEY,)) -> dict:
    """``overrides`` less the fields the other levers set and the ``dropped`` parameters (a thread
    key stays by default: the threads lever sets it)."""
    part = {k: copy.deepcopy(v) for k, v in overrides.items() if k not in LEVER_FIELDS}
    parameters = {k: v for k, v in part.pop("parameters", {}).items() if k not in dropped}
    return part | ({"parameters": parameters} if parameters else {})


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
        engine = engine_part(part, dropped=THREAD_KEYS)
        if engine in seen or deployment.unexported_files(overrides_table({model: part})):
            continue
        seen.append(engine)
        choices[benchmark.id] = {**{m: o for m, o in overrides.items() if m != model}, model: part}
    return choices


@dataclass
class ModelLevers:
    """The levers of one model and their ranges."""

    model: str
    config: ModelConfig
    engines: dict[str, dict[str, dict]]
    cores: int = field(default_factory=lambda: len(os.sched_getaffinity(0)))  # the cores this process may use
    bf16: bool = field(default_factory=lambda: bool(set(BF16_FLAGS) & set(cpu_flags())))
    only: set[str] = field(default_factory=lambda: set(LEVERS))

    def name(self, lever: str) -> str:
        return f"{self.model}:{lever}"

    @property
    def thread_keys(self) -> list[str]:
        return [k for k in THREAD_KEYS if k in self.config.parameters]

    def values(self) -> dict[str, list]:
        """Each lever's values (integers: their range's ends, what the smoke tries)."""
        batching = self.config.dynamic_batching
        sizes = [2**k for k in range(1, 12) if 2**k <= self.config.max_batch_size]
        preferred = {"none", batch_label(batching.preferred_batch_size), *map(str, sizes)}
        return {
            "engine": list(self.engines),
            "precision": ["f32", "bf16"] if self.bf16 else ["f32"],
            "dynamic_batching": [True, False],
            "queue_delay_us": sorted({*QUEUE_DELAYS_US, batching.max_queue_delay_microseconds}),
            "preferred_batch": sorted(preferred, key=lambda s: (s != "none", len(s), s)),
            "instance_count": sorted({1, self.cores}),
            "threads": sorted({1, self.cores}),
        }

    def suggest(self, trial) -> dict[str, dict]:
        """``{model: overrides}`` of the values ``trial`` picks (``optuna.Trial`` or a fixed one)."""
        values = self.values()
        tuned = self.only.__contains__

        def pick(lever: str):
            if lever in ("instance_count", "threads"):
                return trial.suggest_int(self.name(lever), 1, self.cores)
            return trial.suggest_categorical(self.name(lever), values[lever])

        companions = copy.deepcopy(self.engines[pick("engine") if tuned("engine") else SHIPPED])
        overrides = companions.pop(self.model, {})
        parameters = overrides.setdefault("parameters", {})
        if tuned("precision") and runs_openvino(self.config, overrides):
            parameters[PRECISION_KEY] = pick("precision")
        if self.config.max_batch_size > 0 and overrides.get("max_batch_size") != 0:
            batching = self.config.HasField("dynamic_batching")  # as shipped, unless the lever is tuned
            if tuned("dynamic_batching"):
                batching = overrides["dynamic_batching"] = pick("dynamic_batching")
            if batching and tuned("queue_delay_us"):
                overrides["max_queue_delay_microseconds"] = pick("queue_delay_us")
            if batching and tuned("preferred_batch"):
                label = pick("preferred_batch")
                overrides["preferred_batch_size"] = [] if label == "none" else [int(s) for s in label.split(",")]
        if tuned("instance_count"):
            overrides["instance_count"] = pick("instance_count")
        keys = sorted(set(self.thread_keys) | (set(THREAD_KEYS) & set(parameters)))
        if keys and tuned("threads"):
            parameters.update(dict.fromkeys(keys, str(pick("threads"))))
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
        if runs_openvino(self.config, {}) and parameter(self.config, PRECISION_KEY) in self.values()["precision"]:
            params["precision"] = parameter(self.config, PRECISION_KEY)
        return {self.name(k): v for k, v in params.items() if k in self.only}


@dataclass
class Space:
    """The levers of every tuned model of one deployment."""

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

    def shipped_overrides(self) -> dict[str, dict]:
        """The overrides of the shipped lever values (they change nothing)."""
        return self.suggest(optuna.trial.FixedTrial(self.shipped_params()))


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
        engines = engine_choices(deployment, model, target)
        found.append(ModelLevers(model, config, engines, only=set(levers or LEVERS)))
    return Space(found)
