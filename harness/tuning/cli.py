"""``python -m harness tune DEPLOYMENT [--models M ...]``: the config that serves the deployment's
workload best, each candidate checked before it is measured (docs/tuning.md).

    python -m harness tune <deployment> --models <model> --concurrency 8 --budget-minutes 20
    python -m harness tune <deployment> --models <model> --objective latency --concurrency 1

The study (Optuna, SQLite) lives in results/tune/studies.db: the same command resumes it. Every
measurement is a record (``comparison: "tune"``) in results/records.jsonl; the table, picture and a
summary go to results/tune/<study>.{png,json}. The table lists every candidate; the picture is items/s
vs p99, the winner marked; an anomaly is a candidate far behind its sibling, with Triton's per-model
queue and compute times and the engine that ran; ``--apply`` writes the winner into config.pbtxt."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from itertools import permutations, takewhile
from pathlib import Path

import optuna
from matplotlib.figure import Figure
from optuna.trial import FrozenTrial, TrialState
from tabulate import tabulate

from harness.context import run_checks
from harness.deployments import Deployment, get_deployment
from harness.manifest import ConfigOverrides
from harness.measuring.records import results_dir
from harness.repository import read_config, write_config
from harness.session import ServerPool
from harness.tuning.search import Tuner, over_shipped, spread, verdict
from harness.tuning.space import LEVERS, build_space
from harness.variants import apply_overrides


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m harness tune", description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("deployment")
    add("--models", nargs="+", help="models whose configs are tuned (default: the first entry model, no ensemble)")
    add("--objective", choices=["throughput", "latency"], default="throughput")
    add("--p99-ms", type=float, default=None, help="throughput: the p99 bound a winner keeps")
    add("--concurrency", type=int, default=None, help="requests in flight (default: the benchmark's highest)")
    add("--budget-minutes", type=float, default=10.0, help="search and final rounds together")
    add("--trials", type=int, default=None, help="at most this many trials in this run")
    add("--levers", nargs="+", choices=LEVERS, help="tune only these levers (default: all)")
    add("--benchmark", default=None, help="whose workload is measured (default: the first calling the models)")
    add("--seed", type=int, default=0)
    add("--short", dest="short_s", type=float, default=2.0, help="seconds of a trial's first run")
    add("--long", dest="long_s", type=float, default=5.0, help="seconds of a promising trial's run, of a round")
    add("--rounds", type=int, default=3, help="alternating final rounds of shipped vs the best")
    add("--finalists", type=int, default=2, help="best candidates measured again beside shipped")
    add("--against", nargs="+", default=[], help="benchmark ids whose configs run in the final rounds too")
    add("--study", default=None, help="study name (default: from deployment, models, objective)")
    add("--apply", action="store_true", help="write the winner into the config.pbtxt files, then check them")
    add("--apply-trial", type=int, default=None, help="write trial N of the study and check it (no search)")
    add("--mode", default=None, help="local (default) or docker")
    add("--target", default="cpu")
    return parser.parse_args(argv)


#: A candidate this far behind a sibling (one lever apart) is an anomaly worth a look.
ANOMALY_FACTOR = 2.0
#: What the table calls a trial in each state (a rejected candidate's trial failed).
STATUS = {TrialState.COMPLETE: "measured", TrialState.FAIL: "rejected", TrialState.PRUNED: "pruned"}


def changed(trial: FrozenTrial, shipped: dict) -> str:
    """The lever values of ``trial`` that differ from the shipped config's."""
    diff = [f"{k.split(':', 1)[-1]}={v}" for k, v in sorted(trial.params.items()) if shipped.get(k) != v]
    return " ".join(diff) or "shipped"


def rows(trials, shipped_params: dict, shipped_value: float | None, objective: str) -> list[dict]:
    """One row per trial: its config (what differs from shipped), checks, items/s, p99, ratio."""
    measured = {t.number for t in trials if t.state == TrialState.COMPLETE and shipped_value}
    return [
        {
            "trial": t.number,
            "config": changed(t, shipped_params),
            "status": STATUS.get(t.state, t.state.name.lower()),
            "checks": t.user_attrs.get("checks", "-"),
            "items_per_second": t.user_attrs.get("items_per_second"),
            "p99_ms": t.user_attrs.get("p99_ms"),
            "ratio": over_shipped(t.value, shipped_value, objective) if t.number in measured else None,
            "reason": t.user_attrs.get("reason", ""),
        }
        for t in trials
    ]


def table(found: list[dict]) -> str:
    """The rows as a text table; a rejected candidate's reason on the line under it."""
    headers = ["#", "status", "checks", "items/s", "p99 ms", "ratio", "config"]
    keys = ["trial", "status", "checks", "items_per_second", "p99_ms", "ratio", "config"]
    body = [[r[k] for k in keys[:-1]] + [r["config"] + (f"\n{r['reason']}" if r["reason"] else "")] for r in found]
    return tabulate(body, headers, floatfmt=("", "", "", ".1f", ".1f", ".2f"), missingval="-", tablefmt="plain")


def picture(found: list[dict], winner: int | None, shipped: int | None, path: Path, title: str) -> None:
    """items/s vs p99 of every measured candidate, the shipped config and the winner marked."""
    measured = [r for r in found if r["items_per_second"] is not None and r["status"] == "measured"]
    fig = Figure(figsize=(7, 4.5), layout="tight")
    ax = fig.subplots()
    for label, trials, style in (
        ("candidate", measured, dict(c="tab:blue")),
        ("shipped", [r for r in measured if r["trial"] == shipped], dict(c="black", marker="s")),
        ("winner", [r for r in measured if r["trial"] == winner], dict(c="tab:red", marker="*", s=200)),
    ):
        if trials:
            ax.scatter([r["p99_ms"] for r in trials], [r["items_per_second"] for r in trials], label=label, **style)
    ax.set(xlabel="p99 latency (ms)", ylabel="items/s")
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.savefig(path, dpi=110)  # results/tune/ is made by the study


def anomalies(trials, objective: str) -> list[str]:
    """Candidates one lever apart where one is ``ANOMALY_FACTOR`` times worse (a pruned one by its
    short run): what Triton's statistics say of each (queue vs compute per request, batch) and which
    engine settings ran."""
    value = {t.number: t.value if t.state == TrialState.COMPLETE else t.intermediate_values.get(0) for t in trials}
    measured = [t for t in trials if value[t.number] is not None and "repeat_of" not in t.user_attrs]
    notes = []
    for slow, sibling in permutations(measured, 2):
        # a lever only one of them has (precision: OpenVINO's) comes with the engine, not apart from it
        apart = [k for k in slow.params if k in sibling.params and slow.params[k] != sibling.params[k]]
        a, b = value[slow.number], value[sibling.number]
        if len(apart) == 1 and (b * ANOMALY_FACTOR < a if objective == "latency" else a * ANOMALY_FACTOR < b):
            k = apart[0]
            notes.append(
                f"trial {slow.number} ({k}={slow.params[k]}) is far behind trial {sibling.number} "
                f"({k}={sibling.params[k]}): {a:.1f} vs {b:.1f}\n"
                f"    trial {slow.number}: {describe_statistics(slow)}\n"
                f"    trial {sibling.number}: {describe_statistics(sibling)}"
            )
    return notes


def describe_statistics(trial) -> str:
    """Triton's queue and compute per request and batch of each model, the engine that ran, the config."""
    parts = [
        f"{model} queue {split.get('perf_server_queue', '-')} ms, "
        f"compute {split.get('perf_server_compute_infer', '-')} ms per request, "
        f"batch {split.get('server_avg_batch_size', '-')}"
        for model, split in (trial.user_attrs.get("statistics") or {}).items()
    ]
    engine = json.dumps(trial.user_attrs.get("backends") or {})
    config = json.dumps(trial.user_attrs.get("config") or {}, sort_keys=True)
    return "; ".join(parts) + f"; engine {engine}; config {config}"


def apply(deployment: Deployment, overrides: dict[str, dict], note: str) -> list[Path]:
    """Write ``overrides`` into each model's ``config.pbtxt`` (as ``ModelConfig`` protobufs); the file's
    leading comments stay, with a line saying which run chose the values."""
    written = []
    for model, fields in overrides.items():
        path = deployment.model_repository / model / "config.pbtxt"
        header = list(takewhile(lambda line: line.startswith("#"), path.read_text().splitlines()))
        write_config(apply_overrides(read_config(path), ConfigOverrides(**fields)), path)
        path.write_text("\n".join([*header, f"# {note}", path.read_text()]))
        written.append(path)
    return written


def default_models(deployment) -> list[str]:
    for model in deployment.entry_models:
        if read_config(deployment.model_repository / model / "config.pbtxt").platform != "ensemble":
            return [model]
    raise ValueError(f"{deployment.name}: every entry model is an ensemble: pass --models")


def against(result, rounds: dict, ids: list[str]) -> dict[str, dict]:
    """Per ``--against`` variant: its ratio to shipped and the best finalist's ratio to it, each round."""
    best = rounds.get(result.trial.number) if result.trial else None
    found = {}
    for name in (i for i in ids if i in rounds):
        ratios = rounds[name]["ratio"]
        over = [b / r for b, r in zip(best["ratio"], ratios)] if best else None
        found[name] = {"ratio_to_shipped": ratios, "best_over_it": over}
        line = "against {}: {:.2f}x shipped [{:.2f}-{:.2f}]".format(name, *spread(ratios))
        if over:
            line += "; trial {} / it {:.2f} [{:.2f}-{:.2f}]".format(result.trial.number, *spread(over))
        print(line)
    return found


def report(tuner: Tuner, shipped, result, args, hand_made: dict | None = None) -> None:
    """Print the table, the anomalies and the verdict; write the picture and a summary JSON."""
    trials, name = tuner.tried(), tuner.study.study_name
    found = rows(trials, tuner.space.shipped_params(), shipped.value if shipped else None, args.objective)
    print("\n" + table(found))
    for note in anomalies(trials, args.objective):
        print("anomaly: " + note)
    path = results_dir() / "tune" / (re.sub(r"[^A-Za-z0-9_.=+-]+", "_", name) + ".png")
    picture(found, result.trial.number if result.change else None, shipped and shipped.number, path, name)
    summary = {
        "study": name,
        "benchmark": tuner.study.user_attrs.get("benchmark"),
        "verdict": result.describe(),
        "change": result.change,
        "ratio": {"median": result.median, "low": result.low, "high": result.high},
        "winner_config": result.trial.user_attrs["config"] if result.trial else None,
        "command": args.command,
        "against": hand_made or {},
        "candidates": found,
    }
    path.with_suffix(".json").write_text(json.dumps(summary, indent=2, default=str))
    print(f"\n{result.describe()}\npicture {path}\nsummary {path.with_suffix('.json')}")


def applied(tuner: Tuner, config: dict[str, dict], note: str) -> int:
    """Write ``config`` into the deployment's configs, then the gate's checks on the configs as written."""
    for path in apply(tuner.deployment, config, note):
        print(f"wrote {path}")
    noop = {tuner.models[0]: {}}  # the configs as now written, on a server of the tuned models only
    with tuner.served(noop) as (ctx, _):
        outcome = run_checks(ctx, tuner.study.user_attrs.get("gate_checks"))
    print(f"checks on the applied configs: {outcome.summary()}" + (f"\n{outcome.reason()}" if outcome.failed else ""))
    return 1 if outcome.failed or not outcome.passed else 0


def tune(tuner: Tuner, args) -> int:
    """Search within the budget less the final rounds' share, then the final rounds and the verdict."""
    final_s = (args.finalists + 1 + len(args.against)) * (args.rounds * (args.long_s + 1) + 30)
    tuner.open_study()
    if args.apply_trial is not None:  # trial N of the study, measured after passing its checks
        trials = {t.number: t for t in tuner.tried(TrialState.COMPLETE)}
        if args.apply_trial not in trials:
            raise ValueError(
                f"study {tuner.study.study_name!r} has no measured trial {args.apply_trial} (see the table)"
            )
        note = f"Tuned values: trial {args.apply_trial} of {args.command}"
        return applied(tuner, trials[args.apply_trial].user_attrs["config"], note)
    tuner.search(max(60.0, args.budget_minutes * 60 - final_s))
    shipped, finalists = tuner.candidates()
    rounds = tuner.final_rounds(shipped, finalists) if shipped is not None and finalists else {}
    result = verdict(finalists, rounds)
    report(tuner, shipped, result, args, against(result, rounds, args.against))
    if shipped is None:
        print("the shipped config was not measured (its trial was rejected: see the table)", file=sys.stderr)
        return 1
    if not args.apply:
        return 0
    if not result.change:
        print("--apply: nothing written (no change)")
        return 0
    return applied(tuner, result.trial.user_attrs["config"], f"Tuned values: {args.command} ({result.describe()})")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv)
    args.command = "python -m harness tune " + shlex.join(argv)
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # rejections: our own line, no traceback
    deployment = get_deployment(args.deployment)
    space = build_space(deployment, args.models or default_models(deployment), args.target, args.levers)
    tuner = Tuner(deployment, space, args, pool=ServerPool(mode=args.mode, target=args.target))
    try:
        return tune(tuner, args)
    finally:
        tuner.pool.close()


if __name__ == "__main__":
    raise SystemExit(main())
