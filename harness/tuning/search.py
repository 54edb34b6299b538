"""The search: candidates served on their own servers (a derived repository, as ``--config-variant``
serves one), gated by the deployment's checks, measured short, then long where promising, in an
Optuna study (seeded TPE, median pruning, SQLite under results/ so a run resumes); then the best few
and the shipped config measured again in alternating rounds on servers up at once."""

from __future__ import annotations

import logging
import statistics
import uuid
from dataclasses import dataclass, field

import optuna
import pytest

from harness.context import DeploymentContext
from harness.deployments import Benchmark, Deployment
from harness.manifest import ConfigOverrides, overrides_table
from harness.measuring.bench import model_backends
from harness.measuring.loadgen import GENERATOR, run_load
from harness.measuring.records import append_record, results_dir, scenario_fields
from harness.repository import dependencies, model_dirs
from harness.session import ServerPool
from harness.session import variant_key as variant_key_typed
from harness.tuning.space import Space
from harness.variants import describe as describe_typed

log = logging.getLogger(__name__)


class CandidateRejected(Exception):
    """A candidate whose server did not start or whose checks failed: recorded, never measured."""


@dataclass
class CheckOutcome:
    """The deployment's checks on one candidate: those that passed, those that do not apply (they
    skipped themselves, or fail on the shipped config too with only these models loaded), and each
    failure's reason."""

    passed: list[str] = field(default_factory=list)
    not_applicable: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        text = f"{len(self.passed)} passed"
        if self.failed:
            text += f", {len(self.failed)} failed"
        return text + (f", {len(self.not_applicable)} n/a" if self.not_applicable else "")

    def reason(self) -> str:
        name, why = next(iter(self.failed.items()))
        return f"check {name} failed: {' '.join(why.split())[:300]}"


def typed(overrides: dict[str, dict]) -> dict[str, ConfigOverrides]:
    """A candidate's overrides (plain dicts: Optuna keeps them as trial attributes) as the core takes them."""
    return overrides_table(overrides)


def describe(overrides: dict[str, dict]) -> str:
    return describe_typed(typed(overrides))


def variant_key(deployment, overrides: dict[str, dict]) -> str:
    return variant_key_typed(deployment, typed(overrides))


def loaded_models(deployment: Deployment, models: list[str], benchmark: Benchmark | None = None) -> list[str]:
    """What a candidate's server loads: the tuned models, the benchmark's, and what they call."""
    return dependencies(deployment.model_repository, [*models, *(benchmark.models if benchmark else [])])


def run_checks(ctx: DeploymentContext, names: list[str] | None = None) -> CheckOutcome:
    """The deployment's checks (``names``: only those) against ``ctx``; one that skips itself is not applicable."""
    outcome = CheckOutcome()
    for name, check in ctx.deployment.checks().items():
        if names is not None and name not in names:
            continue
        try:
            check(ctx)
        except pytest.skip.Exception:
            outcome.not_applicable.append(name)
        except Exception as exc:  # noqa: BLE001 - a failing check is the outcome recorded
            outcome.failed[name] = f"{type(exc).__name__}: {exc}"
        else:
            outcome.passed.append(name)
    return outcome


def benchmark_for(ctx: DeploymentContext, loaded: list[str], target: str) -> Benchmark | None:
    """The first benchmark without config overrides whose workload calls a model this server loads."""
    for benchmark in ctx.deployment.benchmarks:
        if benchmark.config or (benchmark.targets and target not in benchmark.targets):
            continue
        try:
            workload = ctx.deployment.resolve(benchmark.workload)(ctx)
        except Exception as exc:  # noqa: BLE001 - a workload that needs more than this server: not this one
            log.debug("%s: its workload cannot run here: %s", benchmark.id, exc)
            continue
        if workload.model in loaded:
            return benchmark
    return None


def tuned_benchmark(benchmark: Benchmark, overrides: dict[str, dict]) -> Benchmark:
    """``benchmark`` with the candidate's overrides as its config (what its records carry)."""
    return benchmark.model_copy(update={"config": {m: ConfigOverrides(**o) for m, o in overrides.items()}})


def measure(
    ctx: DeploymentContext,
    benchmark: Benchmark,
    *,
    concurrency: int,
    duration_s: float,
    tuned_models: list[str],
    record_fields: dict,
) -> dict:
    """One load level on the candidate's server; appends and returns its record (with Triton's queue
    and compute times per request and batch size of the workload's model, and the engines that ran)."""
    workload = ctx.deployment.resolve(benchmark.workload)(ctx)
    protocol = benchmark.protocol if ctx.server.grpc_url else "http"
    url = ctx.server.grpc_url if protocol == "grpc" else ctx.server.http_url
    level = run_load(
        workload,
        protocol=protocol,
        url=url,
        http_url=ctx.server.http_url,
        concurrency=concurrency,
        duration_s=duration_s,
        warmup_s=min(1.0, duration_s / 2),
    )
    backends = model_backends(ctx, workload.model)
    for model in tuned_models:
        if model not in backends:
            backends.update(model_backends(ctx, model))
    row = {
        **scenario_fields(
            ctx,
            benchmark,
            workload,
            protocol=protocol,
            generator=f"{GENERATOR} (tritonclient {protocol}.aio)",
            server=ctx.server.describe(),
            backends=backends,
        ),
        **level.metrics(workload.items_per_request),
        **record_fields,
    }
    append_record(row)
    return row


#: ``comparison`` of the records a tune run writes (the results matrix keeps them out of its cells).
COMPARISON = "tune"


@dataclass
class TuneSettings:
    """What one ``python -m harness tune`` run searches for, and how long it may take."""

    objective: str = "throughput"  # or "latency": the p99 at ``concurrency``
    p99_ms: float | None = None  # throughput: only candidates whose p99 stays within it win
    concurrency: int | None = None  # default: the benchmark's highest level
    budget_minutes: float = 10.0
    trials: int | None = None
    seed: int = 0
    short_s: float = 2.0
    long_s: float = 5.0
    rounds: int = 3
    finalists: int = 2
    benchmark: str | None = None
    target: str = "cpu"
    mode: str | None = None
    study: str | None = None

    def study_name(self, deployment: str, models: list[str], levers: set[str]) -> str:
        bound = f"@p99<={self.p99_ms:g}ms" if self.p99_ms and self.objective == "throughput" else ""
        chosen = "" if len(levers) >= 7 else "/" + "+".join(sorted(levers))
        where = f"/{self.benchmark}" if self.benchmark else ""
        return (
            self.study
            or f"{deployment}/{'+'.join(models)}{where}/{self.objective}{bound}/c{self.concurrency or 'max'}{chosen}"
        )


@dataclass
class Tuner:
    """The study of one deployment's space and the servers its trials run on."""

    deployment: Deployment
    space: Space
    settings: TuneSettings
    pool: ServerPool
    study: optuna.Study | None = None
    gate_names: list[str] | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    @property
    def models(self) -> list[str]:
        return [levers.model for levers in self.space.models]

    def open_study(self) -> optuna.Study:
        """Create or resume the study; the shipped config is its first trial."""
        s = self.settings
        direction = "minimize" if s.objective == "latency" else "maximize"
        optuna.logging.set_verbosity(optuna.logging.ERROR)  # rejections: our own line, no traceback
        levers = set().union(*(levers.only for levers in self.space.models))
        (results_dir() / "tune").mkdir(parents=True, exist_ok=True)
        self.study = optuna.create_study(
            study_name=s.study_name(self.deployment.name, self.models, levers),
            storage=f"sqlite:///{results_dir() / 'tune' / 'studies.db'}",
            load_if_exists=True,
            direction=direction,
            sampler=optuna.samplers.TPESampler(seed=s.seed, n_startup_trials=4),
            pruner=optuna.pruners.MedianPruner(n_startup_trials=3),
        )
        self.study.enqueue_trial(self.space.shipped_params(), skip_if_exists=True)
        return self.study

    def benchmark(self, ctx, loaded: list[str]) -> Benchmark:
        """The benchmark measured (``--benchmark``, else the first whose workload this server serves),
        kept in the study so a resumed run measures the same."""
        wanted = self.settings.benchmark or self.study.user_attrs.get("benchmark")
        if not wanted:
            found = benchmark_for(ctx, loaded, self.settings.target)
            if found is None:
                raise ValueError(f"no benchmark of {self.deployment.name} calls {', '.join(loaded)}: pass --benchmark")
            wanted = found.id
            self.study.set_user_attr("benchmark", wanted)
        by_id = {b.id: b for b in self.deployment.benchmarks}
        if wanted not in by_id:
            raise ValueError(f"{self.deployment.name} has no benchmark {wanted!r}")
        return by_id[wanted]

    def score(self, row: dict) -> float:
        """The objective's value of a measured level: its p99 (latency), or its items/s, scaled down
        by how far its p99 is over the bound."""
        p99 = row["perf_latency_p99"]
        if self.settings.objective == "latency":
            return p99
        bound = self.settings.p99_ms
        return row["items_per_second"] * (min(1.0, bound / p99) if bound else 1.0)

    def serve(self, overrides: dict[str, dict]):
        """The candidate's server (only the tuned models, what they call, and models its parameters
        name) and what it loads."""
        preset = self.settings.benchmark and {b.id: b for b in self.deployment.benchmarks}.get(self.settings.benchmark)
        named = {v for o in overrides.values() for v in (o.get("parameters") or {}).values()}
        models = [*self.models, *sorted(named & {p.name for p in model_dirs(self.deployment.model_repository)})]
        loaded = loaded_models(self.deployment, models, preset or None)
        try:
            return self.pool.context(self.deployment, typed(overrides), tuple(loaded)), loaded
        except Exception as exc:  # noqa: BLE001 - a server that does not start is the outcome recorded
            raise CandidateRejected(f"server did not start: {' '.join(str(exc).split())[:400]}") from exc

    def gate_checks(self) -> list[str] | None:
        """The checks every candidate must pass: those the shipped config passes with the same
        models loaded (None until the shipped config ran them)."""
        known = self.study.user_attrs.get("gate_checks") if self.study else None
        return self.gate_names if known is None else known

    def gate(self, trial, ctx, overrides: dict) -> None:
        """The deployment's checks on the candidate's server; a failure rejects it, with the reason.
        The shipped config runs them all first: what fails there does not apply to this load."""
        names = self.gate_checks()
        if names is None and describe(overrides) != self.shipped_key():
            self.baseline_checks()
            names = self.gate_checks()
        outcome = run_checks(ctx, names)
        if names is None:
            outcome.not_applicable += list(outcome.failed)
            outcome.failed = {}
            self.gate_names = outcome.passed
            if self.study:
                self.study.set_user_attr("gate_checks", outcome.passed)
                self.study.set_user_attr("not_applicable_checks", outcome.not_applicable)
        trial.set_user_attr("checks", outcome.summary())
        if outcome.failed:
            raise CandidateRejected(outcome.reason())
        if not outcome.passed:
            raise CandidateRejected("no check of the deployment passes on the shipped config with these models loaded")

    def baseline_checks(self) -> None:
        """Serve the shipped config and run every check on it (what ``gate`` needs first)."""
        overrides = self.space.suggest(optuna.trial.FixedTrial(self.space.shipped_params()))
        try:
            self.gate(optuna.trial.FixedTrial({}), self.serve(overrides)[0], overrides)
        finally:
            self.pool.release(variant_key(self.deployment, overrides))

    def shipped_key(self) -> str:
        return describe(self.space.suggest(optuna.trial.FixedTrial(self.space.shipped_params())))

    def measured(self, trial, ctx, benchmark: Benchmark, overrides: dict, seconds: float, **fields) -> dict:
        """One level on the candidate's server, as a record (``fields`` added); errors reject it."""
        fields = {"comparison": COMPARISON, "run_id": self.run_id, "trial": trial.number, **fields}
        row = measure(
            ctx,
            tuned_benchmark(benchmark, overrides),
            concurrency=self.settings.concurrency or max(benchmark.concurrency),
            duration_s=seconds,
            tuned_models=self.models,
            record_fields=fields,
        )
        if row["errors"]:
            raise CandidateRejected(f"{row['errors']} errors under load: {row['first_error']}")
        attrs = {"items_per_second": row["items_per_second"], "p99_ms": row["perf_latency_p99"], "duration_s": seconds}
        split = ("perf_server_queue", "perf_server_compute_infer", "server_avg_batch_size")
        attrs |= {
            "statistics": {row["model"]: {k: row.get(k) for k in split}},
            "backends": row["backend_implementation"],
        }
        attrs["feasible"] = not self.settings.p99_ms or row["perf_latency_p99"] <= self.settings.p99_ms
        for name, value in attrs.items():
            trial.set_user_attr(name, value)
        return row

    def objective(self, trial: optuna.Trial) -> float:
        """Serve, check, measure short; pruned where the short run trails; else measure long."""
        overrides = self.space.suggest(trial)
        key = describe(overrides)
        trial.set_user_attr("config", overrides)
        trial.set_user_attr("key", key)
        try:
            return self._served_trial(trial, overrides)
        except CandidateRejected as exc:
            trial.set_user_attr("status", "rejected")
            trial.set_user_attr("reason", str(exc))
            print(f"trial {trial.number}: rejected: {exc}", flush=True)
            raise
        finally:
            self.pool.release(variant_key(self.deployment, overrides))

    def _served_trial(self, trial, overrides: dict) -> float:
        ctx, loaded = self.serve(overrides)
        self.gate(trial, ctx, overrides)
        benchmark = self.benchmark(ctx, loaded)
        short = self.score(self.measured(trial, ctx, benchmark, overrides, self.settings.short_s, phase="search-short"))
        trial.report(short, 0)
        if trial.should_prune():
            trial.set_user_attr("status", "pruned")
            print(f"trial {trial.number}: pruned after the short run ({short:.1f})", flush=True)
            raise optuna.TrialPruned()
        value = self.score(self.measured(trial, ctx, benchmark, overrides, self.settings.long_s, phase="search-long"))
        trial.set_user_attr("status", "measured")
        print(f"trial {trial.number}: {value:.1f} ({trial.user_attrs['checks']})", flush=True)
        return value

    def search(self, seconds: float) -> None:
        self.study.optimize(self.objective, n_trials=self.settings.trials, timeout=seconds, catch=(CandidateRejected,))

    def candidates(self) -> tuple[optuna.trial.FrozenTrial | None, list[optuna.trial.FrozenTrial]]:
        """The shipped config's trial and the best measured others (feasible first), best first."""
        done = [t for t in self.study.get_trials(deepcopy=False) if t.user_attrs.get("status") == "measured"]
        shipped_key = self.shipped_key()
        shipped = next((t for t in done if t.user_attrs["key"] == shipped_key), None)
        sign = -1 if self.study.direction == optuna.study.StudyDirection.MAXIMIZE else 1
        others = {
            t.user_attrs["key"]: t
            for t in done
            if t.user_attrs["key"] != shipped_key and "repeat_of" not in t.user_attrs
        }
        ordered = sorted(others.values(), key=lambda t: (not t.user_attrs["feasible"], sign * t.value))
        return shipped, [t for t in ordered if t.user_attrs["feasible"]][: self.settings.finalists]

    def final_rounds(self, shipped, finalists) -> dict[int, dict]:
        """Shipped and finalists on servers up at once, measured in alternating rounds; per trial
        number: items/s, p99 and ratio to shipped (>1: better) of each round."""
        entries, contexts = [], {}
        for t in [shipped, *finalists]:
            try:
                contexts[t.number] = self.serve(t.user_attrs["config"])[0]
                entries.append(t)
            except CandidateRejected as exc:  # started once, not now: left out of the rounds, said why
                print(f"trial {t.number}: left out of the final rounds: {exc}", flush=True)
        if shipped not in entries:
            raise CandidateRejected("the shipped config's server did not start for the final rounds")
        benchmark = self.benchmark(contexts[shipped.number], [])
        rounds: dict[int, dict] = {t.number: {"items_per_second": [], "p99_ms": []} for t in entries}
        try:
            for r in range(self.settings.rounds):
                for t in entries if r % 2 == 0 else entries[::-1]:
                    config, ctx = t.user_attrs["config"], contexts[t.number]
                    row = self.measured(
                        optuna.trial.FixedTrial({}, t.number),
                        ctx,
                        benchmark,
                        config,
                        self.settings.long_s,
                        phase="final",
                        round=r + 1,
                    )
                    rounds[t.number]["items_per_second"].append(row["items_per_second"])
                    rounds[t.number]["p99_ms"].append(row["perf_latency_p99"])
                    print(
                        f"round {r + 1} trial {t.number}: {row['items_per_second']:.1f} items/s, p99 {row['perf_latency_p99']:.1f} ms"
                    )
        finally:
            for t in entries:
                self.pool.release(variant_key(self.deployment, t.user_attrs["config"]))
        for number, series in rounds.items():
            series["ratio"] = [self.ratio(series, rounds[shipped.number], i) for i in range(self.settings.rounds)]
        return rounds

    def ratio(self, series: dict, shipped: dict, i: int) -> float:
        if self.settings.objective == "latency":
            return shipped["p99_ms"][i] / series["p99_ms"][i]
        return series["items_per_second"][i] / shipped["items_per_second"][i]


@dataclass
class Verdict:
    """The winner of the final rounds: its trial, ratio to shipped (median, min, max over rounds)."""

    trial: optuna.trial.FrozenTrial | None
    median: float = 1.0
    low: float = 1.0
    high: float = 1.0

    @property
    def change(self) -> bool:
        return self.trial is not None and self.low > 1.0

    def describe(self) -> str:
        if self.trial is None:
            return "no change: no candidate passed its checks and was measured beside the shipped config"
        span = f"{self.median:.2f}x the shipped config [{self.low:.2f}-{self.high:.2f} over rounds]"
        return f"{'winner' if self.change else 'no change'}: trial {self.trial.number}, {span}"


def verdict(finalists, rounds: dict[int, dict]) -> Verdict:
    """The finalist with the best median ratio; a change only where its every round beats shipped."""
    best = None
    for trial in [t for t in finalists if t.number in rounds]:
        ratios = rounds[trial.number]["ratio"]
        found = Verdict(trial, statistics.median(ratios), min(ratios), max(ratios))
        if best is None or found.median > best.median:
            best = found
    return best or Verdict(None)
