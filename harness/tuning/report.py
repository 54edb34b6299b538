"""What a tune run shows and writes: the table of every candidate, the picture (items/s vs p99, the
winner marked), the anomalies (a candidate far behind its sibling, with Triton's per-model queue and
compute times and the engine that ran) and ``--apply`` (the winner's values into the config.pbtxt files)."""

from __future__ import annotations

import json
from itertools import permutations, takewhile
from pathlib import Path

from matplotlib.figure import Figure
from optuna.trial import FrozenTrial, TrialState
from tabulate import tabulate

from harness.deployments import Deployment
from harness.manifest import ConfigOverrides
from harness.repository import read_config, write_config
from harness.tuning.search import over_shipped
from harness.variants import apply_overrides

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


def picture(found: list[dict], winner: int | None, shipped: int | None, path: Path, title: str) -> Path:
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
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


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
