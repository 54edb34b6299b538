"""``python -m harness tune``: the space each deployment brings, the correctness gate on a real
server (a candidate whose outputs leave the checks' tolerance is discarded with its reason, never
measured or chosen), ``--apply`` on a copy made by ``harness new``, and the lever smoke
(``-m tune_smoke``, `make test-tune-smoke`: every lever value of every deployment served and checked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from types import SimpleNamespace

import optuna
import pytest
from optuna.trial import FixedTrial

from harness import PROJECT_ROOT
from harness.deployments import discover, get_deployment
from harness.manifest import ConfigOverrides
from harness.new import copy_deployment, install_packages
from harness.repository import read_config
from harness.session import ServerPool
from harness.tests.test_new import _project_layout
from harness.tuning.cli import against, anomalies, default_models, parse
from harness.tuning.search import CandidateRejected, Tuner, describe, verdict
from harness.tuning.space import build_space
from harness.variants import apply_overrides

TUNABLE = [
    pytest.param(d.name, model, id=f"{d.name}-{model}")
    for d in discover()
    for model in d.entry_models
    if read_config(d.model_repository / model / "config.pbtxt").platform != "ensemble"
]


@pytest.mark.parametrize(("deployment", "model"), TUNABLE)
def test_the_shipped_lever_values_are_the_shipped_config(deployment, model):
    """The study's first trial must serve the config as shipped: its overrides change nothing."""
    deployment = get_deployment(deployment)
    space = build_space(deployment, [model])
    overrides = space.suggest(optuna.trial.FixedTrial(space.shipped_params()))
    shipped = read_config(deployment.model_repository / model / "config.pbtxt")
    rewritten = apply_overrides(
        read_config(deployment.model_repository / model / "config.pbtxt"), ConfigOverrides(**overrides[model])
    )
    assert rewritten == shipped, f"{model}: the shipped lever values {overrides[model]} change its config"


def test_one_lever_alone_is_tuned_with_the_others_as_shipped():
    """``--levers queue_delay_us``: the delay changes, dynamic batching stays as shipped."""
    space = build_space(get_deployment("embedding_cpu"), ["embedding_onnx_text"], levers=["queue_delay_us"])
    params = {**space.shipped_params(), "embedding_onnx_text:queue_delay_us": 500}
    assert space.suggest(optuna.trial.FixedTrial(params)) == {
        "embedding_onnx_text": {"max_queue_delay_microseconds": 500}
    }


@pytest.mark.exported
def test_engines_come_from_the_manifest_and_an_ensemble_is_refused():
    deployment = get_deployment("embedding_cpu")
    deployment.export()  # an engine joins the space only where its files are exported
    engines = build_space(deployment, ["embedding_onnx"]).models[0].engines
    declared = {b.id for b in deployment.benchmarks if "embedding_onnx" in b.overrides}
    assert "shipped" in engines and set(engines) - {"shipped"} <= declared
    assert any(part["embedding_onnx"].get("backend") == "openvino" for part in engines.values() if part)
    with pytest.raises(ValueError, match="ensemble"):
        build_space(deployment, ["embedding_onnx_text_ensemble"])
    with pytest.raises(ValueError, match="no lever"):
        build_space(deployment, ["embedding_onnx"], levers=["turbo"])


def test_a_range_over_rounds_that_includes_one_is_no_change():
    finalists = [SimpleNamespace(number=1), SimpleNamespace(number=2)]
    noisy = verdict(finalists, {1: {"ratio": [1.2, 0.97, 1.1]}, 2: {"ratio": [1.05, 1.02, 1.01]}})
    assert (noisy.trial.number, noisy.change) == (1, False) and "no change" in noisy.describe()
    clear = verdict(finalists, {1: {"ratio": [1.2, 1.03, 1.1]}, 2: {"ratio": [0.9, 0.95, 0.92]}})
    assert (clear.trial.number, clear.change, clear.low) == (1, True, 1.03)


def test_against_gives_each_hand_made_variant_its_ratio_round_by_round():
    """``--against``: the best finalist over a hand-made variant in each round of the same run."""
    rounds = {1: {"ratio": [1.2, 1.1, 1.3]}, "handmade": {"ratio": [1.0, 1.1, 1.3]}}
    found = against(SimpleNamespace(trial=SimpleNamespace(number=1)), rounds, ["handmade", "not-run"])
    assert found == {"handmade": {"ratio_to_shipped": [1.0, 1.1, 1.3], "best_over_it": [1.2, 1.0, 1.0]}}


def test_an_engine_far_behind_its_sibling_is_flagged_even_when_pruned():
    """OpenVINO brings a precision lever the shipped config lacks: the two are still one lever apart,
    and a candidate pruned after its short run is compared by that run."""
    dist = optuna.distributions.CategoricalDistribution(["shipped", "openvino", "f32"])
    shipped = optuna.trial.create_trial(params={"m:engine": "shipped"}, distributions={"m:engine": dist}, value=6.0)
    slow = optuna.trial.create_trial(
        params={"m:engine": "openvino", "m:precision": "f32"},
        distributions={"m:engine": dist, "m:precision": dist},
        intermediate_values={0: 0.5},
        state=optuna.trial.TrialState.PRUNED,
    )
    shipped.number, slow.number = 0, 1
    [note] = anomalies([shipped, slow], "throughput")
    assert note.startswith("trial 1 (m:engine=openvino) is far behind trial 0 (m:engine=shipped): 0.5 vs 6.0")


def test_a_config_tried_before_is_not_served_again():
    """A repeated proposal takes the earlier trial's outcome without a server of its own and is left
    out of the candidates, so the budget goes to configs not tried yet."""
    deployment = get_deployment("embedding_cpu")
    space = build_space(deployment, ["embedding_onnx_text"], levers=["queue_delay_us"])
    params = {**space.shipped_params(), "embedding_onnx_text:queue_delay_us": 500}
    settings = parse(["embedding_cpu", "--study", "repeats"])
    tuner = Tuner(deployment, space, settings, pool=ServerPool(), study=optuna.create_study(direction="maximize"))
    key = describe(space.suggest(optuna.trial.FixedTrial(params)))
    attrs = {"key": key, "config": {}, "feasible": True, "items_per_second": 7.0}
    distributions = {k: optuna.distributions.CategoricalDistribution([v]) for k, v in params.items()}
    tuner.study.add_trial(
        optuna.trial.create_trial(params=params, distributions=distributions, value=7.0, user_attrs=attrs)
    )
    tuner.study.enqueue_trial(params)
    tuner.study.optimize(tuner.objective, n_trials=1)
    first, repeated = tuner.study.trials
    assert (repeated.value, repeated.user_attrs["repeat_of"]) == (7.0, first.number)
    assert tuner.candidates()[1] == [first]


@pytest.mark.server
def test_a_candidate_that_fails_the_checks_is_discarded_and_never_measured(tmp_path, monkeypatch):
    """embedding_onnx_text running the INT8 file (a precision its FP32 gate does not allow) is rejected
    with the failing check named; the shipped config is measured; the verdict never names the INT8 one."""
    monkeypatch.setenv("HARNESS_RESULTS_DIR", str(tmp_path))
    deployment = get_deployment("embedding_cpu")
    space = build_space(deployment, ["embedding_onnx_text"], levers=["engine"])
    space.models[0].engines["int8-file"] = {
        "embedding_onnx_text": {"parameters": {"onnx_model": "embedding_onnx_int8"}}
    }
    argv = ["embedding_cpu", "--trials", "2", "--short", "1", "--long", "1", "--rounds", "1"]
    settings = parse([*argv, "--concurrency", "1", "--study", "gate"])
    tuner = Tuner(deployment, space, settings, pool=ServerPool())
    try:
        tuner.open_study().enqueue_trial({"embedding_onnx_text:engine": "int8-file"})
        tuner.search(900)
        shipped, finalists = tuner.candidates()
    finally:
        tuner.pool.close()
    trials = {t.params["embedding_onnx_text:engine"]: t for t in tuner.study.get_trials()}
    rejected = trials["int8-file"]
    assert rejected.state == optuna.trial.TrialState.FAIL
    assert rejected.user_attrs["reason"].startswith("check ") and "failed" in rejected.user_attrs["reason"]
    assert "items_per_second" not in rejected.user_attrs
    assert shipped is trials["shipped"] or shipped.number == trials["shipped"].number
    assert shipped.state == optuna.trial.TrialState.COMPLETE and finalists == []
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert records and {r["trial"] for r in records} == {shipped.number}, "only the shipped config was measured"


@pytest.fixture
def embedding_copy(tmp_path):
    """A copy of embedding_cpu (``harness new``, in a project layout of its own)."""
    name = f"tune_copy{os.getpid()}"
    made = copy_deployment(name, "embedding_cpu", root=_project_layout(tmp_path))
    distributions = [tomllib.loads((p / "pyproject.toml").read_text())["project"]["name"] for p in made.packages]
    install_packages(made.packages)
    yield made.deployment
    subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", *distributions], check=False)


@pytest.mark.server
def test_apply_writes_a_measured_candidate_into_a_copy_whose_checks_pass(embedding_copy, tmp_path):
    """What a user runs on a fresh copy: a short tune of the queue delay, then ``--apply-trial N`` of a
    measured candidate other than shipped (the path ``--apply`` takes with a winner): its value is
    written into the copy's config.pbtxt and the gate's checks pass on the configs as written."""
    argv = [embedding_copy.name, "--models", "embedding_onnx_text", "--concurrency", "2", "--levers", "queue_delay_us"]
    argv += ["--trials", "3", "--short", "1", "--long", "1", "--rounds", "1", "--finalists", "1"]
    results = tmp_path / "results"
    env = {
        **os.environ,
        "HARNESS_DEPLOYMENTS_DIR": str(embedding_copy.path.parent),
        "HARNESS_RESULTS_DIR": str(results),
    }

    def tune(*extra):
        command = [sys.executable, "-m", "harness", "tune", *argv, *extra]
        run = subprocess.run(command, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=1800)
        assert run.returncode == 0, f"{run.stdout[-4000:]}\n{run.stderr[-3000:]}"
        return run.stdout

    tune()
    summary = json.loads(next((results / "tune").glob("*.json")).read_text())
    measured = [c for c in summary["candidates"] if c["status"] == "measured" and c["config"] != "shipped"]
    assert measured, f"no candidate but shipped was measured: {summary['candidates']}"
    delay = int(measured[0]["config"].split("queue_delay_us=")[1].split()[0])
    out = tune("--apply-trial", str(measured[0]["trial"]))
    applied = out.split("checks on the applied configs: ")[-1]
    assert "passed" in applied and "failed" not in applied, out[-3000:]
    written = read_config(embedding_copy.model_repository / "embedding_onnx_text" / "config.pbtxt")
    assert written.dynamic_batching.max_queue_delay_microseconds == delay != 0


def smoke_candidates(space) -> list[dict]:
    """The shipped lever values, then each lever's every value with the others as shipped (each engine
    at each precision: one that runs OpenVINO picks one, where the shipped config may have none)."""
    shipped = space.shipped_params()
    found = [shipped]
    for levers in space.models:
        values = {lever: choices for lever, choices in levers.values().items() if lever in levers.only}
        for lever, choices in values.items():
            for value in choices:
                picked = {**shipped, levers.name(lever): value}
                precisions = values.get("precision", []) if lever == "engine" else []
                found += [{**picked, levers.name("precision"): p} for p in precisions] or [picked]
    return found


@pytest.mark.server
@pytest.mark.tune_smoke
@pytest.mark.skipif(
    not os.environ.get("HARNESS_TUNE_SMOKE"), reason="make test-tune-smoke runs it (HARNESS_TUNE_SMOKE=1)"
)
@pytest.mark.parametrize("deployment", [d.name for d in discover()])
def test_every_lever_value_starts_and_passes_the_checks(deployment):
    """What `make test-variants` proves for the hand-written variants, for every lever value of the
    deployment's first tunable model: each served on its own server and put through tune's gate
    (a study in memory keeps the gate's checks). A precision below the shipped one (bf16, where the
    CPU has it) must start, and may be refused by a check: deciding that is the gate's job."""
    found = get_deployment(deployment)
    space = build_space(found, default_models(found))
    args = parse([deployment])
    tuner = Tuner(found, space, args, pool=ServerPool(mode=args.mode, target=args.target), study=optuna.create_study())
    shipped = space.shipped_params()
    candidates = {}
    for params in smoke_candidates(space):  # lever values that change nothing: once
        overrides = space.suggest(FixedTrial(params))
        lowered = any(k.endswith(":precision") and v != shipped.get(k, "f32") for k, v in params.items())
        candidates.setdefault(describe(overrides), (overrides, lowered))
    failed = {}
    try:
        for key, (overrides, lowered) in candidates.items():
            try:
                with tuner.served(overrides) as (ctx, _):
                    tuner.gate(FixedTrial({}), ctx, overrides)
            except CandidateRejected as exc:
                if not (lowered and str(exc).startswith("check ")):
                    failed[key] = str(exc)
    finally:
        tuner.pool.close()
    assert not failed, f"{len(failed)}/{len(candidates)} candidates failed:\n" + "\n".join(
        f"{k}: {v}" for k, v in failed.items()
    )
