"""The search: candidates served on their own servers (a derived repository, as ``--config-variant``
serves one), gated by the deployment's checks, measured short, then long where promising, in an
Optuna study (seeded TPE, median pruning, SQLite under results/ so a run resumes); then the best few
and the shipped config measured again in alternating rounds on servers up at once."""

from __future__ import annotations

import argparse
import statistics
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace

import optuna
from optuna.trial import FixedTrial, FrozenTrial, TrialState

from harness.context import DeploymentContext, run_checks
from harness.deployments import Benchmark, Deployment
from harness.manifest import overrides_table
from harness.measuring.bench import run_benchmark
from harness.measuring.records import results_dir
from harness.repository import dependencies, model_dirs
from harness.session import ServerPool, variant_key
from harness.tuning.space import LEVERS, Space
from harness.variants import describe as describe_typed

#: ``comparison`` of the records a tune run writes (the results matrix keeps them out of its cells).
COMPARISON = "tune"
#: Proposals in a row of configs already tried after which the search stops: the sampler has
#: converged, or the space is small. A repeat costs no server, so this can be generous.
REPEATS_TO_STOP = 50


class CandidateRejected(Exception):
    """A candidate whose server did not start or whose checks failed: recorded, never measured."""


def describe(overrides: dict[str, dict]) -> str:
    """The label of a candidate's overrides (plain dicts: Optuna keeps them as trial attributes)."""
    return describe_typed(overrides_table(overrides))


def benchmark_for(ctx: DeploymentContext, loaded: list[str], target: str) -> Benchmark | None:
    """The first benchmark without config overrides whose workload calls a model this server loads."""
    for benchmark in ctx.deployment.benchmarks:
        if benchmark.config or (benchmark.targets and target not in benchmark.targets):
            continue
        try:
            workload = ctx.deployment.resolve(benchmark.workload)(ctx)
        except Exception:  # noqa: BLE001 - a workload that needs more than this server: not this one
            continue
        if workload.model in loaded:
            return benchmark
    return None


@dataclass
class Tuner:
    """The study of one deployment's space and the servers its trials run on; ``settings`` is the
    parsed command line (``harness.tuning.cli.parse``)."""

    deployment: Deployment
    space: Space
    settings: argparse.Namespace
    pool: ServerPool
    study: optuna.Study | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    repeats_in_a_row: int = 0

    @property
    def models(self) -> list[str]:
        return [levers.model for levers in self.space.models]

    def study_name(self) -> str:
        """``--study``, else one from the deployment, models, benchmark, objective and levers."""
        s = self.settings
        levers = set().union(*(levers.only for levers in self.space.models))
        bound = f"@p99<={s.p99_ms:g}ms" if s.p99_ms and s.objective == "throughput" else ""
        chosen = "" if len(levers) >= len(LEVERS) else "/" + "+".join(sorted(levers))
        where = f"/{s.benchmark}" if s.benchmark else ""
        name = f"{self.deployment.name}/{'+'.join(self.models)}{where}/{s.objective}{bound}"
        return s.study or f"{name}/c{s.concurrency or 'max'}{chosen}"

    def open_study(self) -> optuna.Study:
        """Create or resume the study; the shipped config is its first trial."""
        s = self.settings
        (results_dir() / "tune").mkdir(parents=True, exist_ok=True)
        self.study = optuna.create_study(
            study_name=self.study_name(),
            storage=f"sqlite:///{results_dir() / 'tune' / 'studies.db'}",
            load_if_exists=True,
            direction="minimize" if s.objective == "latency" else "maximize",
            sampler=optuna.samplers.TPESampler(seed=s.seed, n_startup_trials=4),
            pruner=optuna.pruners.MedianPruner(n_startup_trials=3),
        )
        self.study.enqueue_trial(self.space.shipped_params(), skip_if_exists=True)
        return self.study

    def benchmark(self, ctx, loaded: list[str]) -> Benchmark:
        """The benchmark measured (``--benchmark``, else the first whose workload this server serves),
        kept in the study so a resumed run measures the same."""
        wanted = self.settings.benchmark or self.study.user_attrs.get("benchmark")
        found = self.deployment.benchmark(wanted) if wanted else benchmark_for(ctx, loaded, self.settings.target)
        if found is None:
            raise ValueError(f"no benchmark of {self.deployment.name} calls {', '.join(loaded)}: pass --benchmark")
        self.study.set_user_attr("benchmark", found.id)
        return found

    def score(self, row: dict) -> float:
        """The objective's value of a measured level: its p99 (latency), or its items/s, scaled down
        by how far its p99 is over the bound."""
        p99, bound = row["perf_latency_p99"], self.settings.p99_ms
        if self.settings.objective == "latency":
            return p99
        return row["items_per_second"] * (min(1.0, bound / p99) if bound else 1.0)

    @contextmanager
    def served(self, overrides: dict[str, dict]) -> Iterator[tuple[DeploymentContext, list[str]]]:
        """The candidate's server and what it loads (the tuned models, models its parameters name,
        ``--benchmark``'s, and what they call); stopped on leaving."""
        named = {v for o in overrides.values() for v in (o.get("parameters") or {}).values()}
        models = [*self.models, *sorted(named & {p.name for p in model_dirs(self.deployment.model_repository)})]
        if self.settings.benchmark:
            models += self.deployment.benchmark(self.settings.benchmark).models
        loaded = dependencies(self.deployment.model_repository, models)
        with ExitStack() as stack:
            stack.callback(self.pool.release, variant_key(self.deployment, overrides_table(overrides)))
            try:
                ctx = self.pool.context(self.deployment, overrides_table(overrides), tuple(loaded))
            except Exception as exc:  # noqa: BLE001 - a server that does not start is the outcome recorded
                raise CandidateRejected(f"server did not start: {' '.join(str(exc).split())[:400]}") from exc
            yield ctx, loaded

    def gate(self, trial, ctx, overrides: dict) -> None:
        """The deployment's checks on the candidate's server; a failure rejects it, with the reason.
        The shipped config runs them all first: what fails there does not apply to this load, and
        what passes there (the study's ``gate_checks``) every candidate must pass."""
        names = self.study.user_attrs.get("gate_checks")
        shipped = self.space.shipped_overrides()
        if names is None and describe(overrides) != describe(shipped):
            with self.served(shipped) as (shipped_ctx, _):
                self.gate(FixedTrial({}), shipped_ctx, shipped)
            names = self.study.user_attrs["gate_checks"]
        outcome = run_checks(ctx, names)
        if names is None:
            outcome.not_applicable += list(outcome.failed)
            outcome.failed = {}
            self.study.set_user_attr("gate_checks", outcome.passed)
            self.study.set_user_attr("not_applicable_checks", outcome.not_applicable)
        trial.set_user_attr("checks", outcome.summary())
        if outcome.failed:
            raise CandidateRejected(outcome.reason())
        if not outcome.passed:
            raise CandidateRejected("no check of the deployment passes on the shipped config with these models loaded")

    def measured(self, trial, ctx, benchmark: Benchmark, overrides: dict, seconds: float, **fields) -> dict:
        """One level on the candidate's server, as a record (``fields`` added; its benchmark's config:
        the candidate's overrides); errors reject it."""
        [row] = run_benchmark(
            ctx,
            benchmark.model_copy(update={"config": overrides_table(overrides)}),
            duration_s=seconds,
            warmup_s=min(1.0, seconds / 2),
            concurrencies=[self.settings.concurrency or max(benchmark.concurrency)],
            record_fields={"comparison": COMPARISON, "run_id": self.run_id, "trial": trial.number, **fields},
            backends_of=tuple(self.models),
            ceiling=False,
        )
        if row["errors"]:
            raise CandidateRejected(f"{row['errors']} errors under load: {row['first_error']}")
        split = ("perf_server_queue", "perf_server_compute_infer", "server_avg_batch_size")
        attrs = {
            "items_per_second": row["items_per_second"],
            "p99_ms": row["perf_latency_p99"],
            "duration_s": seconds,
            "statistics": {row["model"]: {k: row.get(k) for k in split}},
            "backends": row["backend_implementation"],
            "feasible": not self.settings.p99_ms or row["perf_latency_p99"] <= self.settings.p99_ms,
        }
        for name, value in attrs.items():
            trial.set_user_attr(name, value)
        return row

    def objective(self, trial: optuna.Trial) -> float:
        """Serve, check, measure short; pruned where the short run trails; else measure long."""
        overrides = self.space.suggest(trial)
        trial.set_user_attr("config", overrides)
        trial.set_user_attr("key", describe(overrides))
        earlier = [t for t in self.tried() if t.state.is_finished() and t.user_attrs.get("key") == describe(overrides)]
        if earlier:  # the first finished trial of this config
            return self.repeat(trial, earlier[0])
        self.repeats_in_a_row = 0
        try:
            with self.served(overrides) as (ctx, loaded):
                self.gate(trial, ctx, overrides)
                return self._measured_trial(trial, ctx, self.benchmark(ctx, loaded), overrides)
        except CandidateRejected as exc:
            trial.set_user_attr("reason", str(exc))
            print(f"trial {trial.number}: rejected: {exc}", flush=True)
            raise

    def tried(self, *states: TrialState) -> list[FrozenTrial]:
        """The study's trials (``states``: in those only), less the repeats of earlier ones."""
        trials = self.study.get_trials(deepcopy=False, states=states or None)
        return [t for t in trials if "repeat_of" not in t.user_attrs]

    def repeat(self, trial, earlier: FrozenTrial) -> float:
        """A config tried before is not served again: the earlier trial's outcome stands (Optuna's
        advice for repeated samples); the search stops after ``REPEATS_TO_STOP`` in a row."""
        for name, value in earlier.user_attrs.items():
            trial.set_user_attr(name, value)
        trial.set_user_attr("repeat_of", earlier.number)
        self.repeats_in_a_row += 1
        if self.repeats_in_a_row >= REPEATS_TO_STOP:
            print(f"search stopped: {REPEATS_TO_STOP} proposals in a row were configs already tried", flush=True)
            self.study.stop()
        if earlier.state == TrialState.PRUNED:
            raise optuna.TrialPruned()
        if earlier.state == TrialState.FAIL:
            raise CandidateRejected(earlier.user_attrs.get("reason", "rejected before"))
        return earlier.value

    def _measured_trial(self, trial, ctx, benchmark: Benchmark, overrides: dict) -> float:
        short = self.score(self.measured(trial, ctx, benchmark, overrides, self.settings.short_s, phase="search-short"))
        trial.report(short, 0)
        if trial.should_prune():
            print(f"trial {trial.number}: pruned after the short run ({short:.1f})", flush=True)
            raise optuna.TrialPruned()
        value = self.score(self.measured(trial, ctx, benchmark, overrides, self.settings.long_s, phase="search-long"))
        print(f"trial {trial.number}: {value:.1f} ({trial.user_attrs['checks']})", flush=True)
        return value

    def search(self, seconds: float) -> None:
        self.study.optimize(self.objective, n_trials=self.settings.trials, timeout=seconds, catch=(CandidateRejected,))

    def candidates(self) -> tuple[FrozenTrial | None, list[FrozenTrial]]:
        """The shipped config's trial and the best measured others (feasible only), best first."""
        done = self.tried(TrialState.COMPLETE)
        shipped_key = describe(self.space.shipped_overrides())
        shipped = next((t for t in done if t.user_attrs["key"] == shipped_key), None)
        sign = -1 if self.study.direction == optuna.study.StudyDirection.MAXIMIZE else 1
        others = {t.user_attrs["key"]: t for t in done if t.user_attrs["key"] != shipped_key}  # a config's last trial
        feasible = [t for t in others.values() if t.user_attrs["feasible"]]
        return shipped, sorted(feasible, key=lambda t: sign * t.value)[: self.settings.finalists]

    def final_rounds(self, shipped, finalists) -> dict[int, dict]:
        """Shipped and finalists on servers up at once, measured in alternating rounds; per trial
        number: items/s, p99 and ratio to shipped (>1: better) of each round."""
        # ``--against``: benchmark variants of the manifest, entrants under their ids
        against = [self.deployment.benchmark(b) for b in self.settings.against or []]
        hand_made = [SimpleNamespace(number=b.id, user_attrs={"config": b.overrides}) for b in against]
        entries = [shipped, *finalists, *hand_made]
        with ExitStack() as servers:
            contexts = {}
            for t in entries:
                try:
                    contexts[t.number] = servers.enter_context(self.served(t.user_attrs["config"]))[0]
                except CandidateRejected as exc:  # started once, not now: left out of the rounds, said why
                    print(f"trial {t.number}: left out of the final rounds: {exc}", flush=True)
            if shipped.number not in contexts:
                raise CandidateRejected("the shipped config's server did not start for the final rounds")
            entries = [t for t in entries if t.number in contexts]
            rounds = {t.number: {"items_per_second": [], "p99_ms": []} for t in entries}
            benchmark = self.benchmark(contexts[shipped.number], [])
            for r in range(self.settings.rounds):
                for t in entries if r % 2 == 0 else entries[::-1]:
                    trial, ctx, config = FixedTrial({}, t.number), contexts[t.number], t.user_attrs["config"]
                    row = self.measured(trial, ctx, benchmark, config, self.settings.long_s, phase="final", round=r + 1)
                    items, p99 = row["items_per_second"], row["perf_latency_p99"]
                    rounds[t.number]["items_per_second"].append(items)
                    rounds[t.number]["p99_ms"].append(p99)
                    print(f"round {r + 1} trial {t.number}: {items:.1f} items/s, p99 {p99:.1f} ms")
        key = "p99_ms" if self.settings.objective == "latency" else "items_per_second"
        for series in rounds.values():
            pairs = zip(series[key], rounds[shipped.number][key])
            series["ratio"] = [over_shipped(value, base, self.settings.objective) for value, base in pairs]
        return rounds


@dataclass
class Verdict:
    """The winner of the final rounds: its trial, ratio to shipped (median, min, max over rounds)."""

    trial: FrozenTrial | None
    median: float = 1.0
    low: float = 1.0
    high: float = 1.0

    @property
    def change(self) -> bool:
        return self.trial is not None and self.low > 1.0

    def describe(self) -> str:
        if self.trial is None:
            return "no change: no candidate but shipped passed its checks and its short run (none to measure beside it)"
        span = f"{self.median:.2f}x the shipped config [{self.low:.2f}-{self.high:.2f} over rounds]"
        return f"{'winner' if self.change else 'no change'}: trial {self.trial.number}, {span}"


def verdict(finalists, rounds: dict[int, dict]) -> Verdict:
    """The finalist with the best median ratio; a change only where its every round beats shipped."""
    entered = [Verdict(t, *spread(rounds[t.number]["ratio"])) for t in finalists if t.number in rounds]
    return max(entered, key=lambda found: found.median, default=Verdict(None))


def spread(values: list[float]) -> tuple[float, float, float]:
    """The median, lowest and highest of ``values``."""
    return statistics.median(values), min(values), max(values)


def over_shipped(value: float, shipped: float, objective: str) -> float:
    """How many times better ``value`` is than the shipped config's (>1: better; latency: lower)."""
    return shipped / value if objective == "latency" else value / shipped
