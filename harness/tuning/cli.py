"""``python -m harness tune DEPLOYMENT [--models M ...]``: the config that serves the deployment's
workload best, each candidate checked before it is measured (docs/tuning.md).

    python -m harness tune <deployment> --models <model> --concurrency 8 --budget-minutes 20
    python -m harness tune <deployment> --models <model> --objective latency --concurrency 1

The study (Optuna, SQLite) lives in results/tune/studies.db: the same command resumes it. Every
measurement is a record (``comparison: "tune"``) in results/records.jsonl; the table, picture and a
summary go to results/tune/<study>.{png,json}."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys

import optuna
from optuna.trial import TrialState

from harness.context import run_checks
from harness.deployments import get_deployment
from harness.measuring.records import results_dir
from harness.repository import read_config
from harness.session import ServerPool
from harness.tuning.report import anomalies, apply, picture, rows, table
from harness.tuning.search import Tuner, spread, verdict
from harness.tuning.space import LEVERS, build_space


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


def apply_trial(tuner: Tuner, number: int, command: str) -> int:
    """``--apply-trial N``: trial N of the study, measured after passing its checks, written and checked."""
    trials = {t.number: t for t in tuner.tried(TrialState.COMPLETE)}
    if number not in trials:
        raise ValueError(f"study {tuner.study.study_name!r} has no measured trial {number} (the table lists them)")
    return applied(tuner, trials[number].user_attrs["config"], f"Tuned values: trial {number} of {command}")


def tune(tuner: Tuner, args) -> int:
    """Search within the budget less the final rounds' share, then the final rounds and the verdict."""
    final_s = (args.finalists + 1 + len(args.against)) * (args.rounds * (args.long_s + 1) + 30)
    tuner.open_study()
    if args.apply_trial is not None:
        return apply_trial(tuner, args.apply_trial, args.command)
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
