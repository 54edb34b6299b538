"""What a tune run shows and writes: the table of every candidate, the picture (items/s vs p99, the
winner marked), the anomalies (a candidate far behind its sibling, with Triton's per-model queue and
compute times and the engine that ran) and ``--apply`` (the winner's values into the config.pbtxt files)."""

from __future__ import annotations

import json
from pathlib import Path

import optuna

from harness.deployments import Deployment
from harness.manifest import ConfigOverrides
from harness.repository import read_config, write_config
from harness.variants import apply_overrides

#: A candidate this far behind a sibling (one lever apart) is an anomaly worth a look.
ANOMALY_FACTOR = 2.0


def changed(trial: optuna.trial.FrozenTrial, shipped: dict) -> str:
    """The lever values of ``trial`` that differ from the shipped config's."""
    diff = [f"{k.split(':', 1)[-1]}={v}" for k, v in sorted(trial.params.items()) if shipped.get(k) != v]
    return " ".join(diff) or "shipped"


def rows(trials, shipped_params: dict, shipped_value: float | None, objective: str) -> list[dict]:
    """One row per trial: its config (what differs from shipped), checks, items/s, p99, ratio."""
    found = []
    for t in trials:
        attrs = t.user_attrs
        ratio = None
        if attrs.get("status") == "measured" and shipped_value:
            ratio = shipped_value / t.value if objective == "latency" else t.value / shipped_value
        found.append(
            {
                "trial": t.number,
                "config": changed(t, shipped_params),
                "status": attrs.get("status", t.state.name.lower()),
                "checks": attrs.get("checks", "-"),
                "items_per_second": attrs.get("items_per_second"),
                "p99_ms": attrs.get("p99_ms"),
                "ratio": ratio,
                "reason": attrs.get("reason", ""),
            }
        )
    return found


def table(found: list[dict]) -> str:
    fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    lines = [f"{'#':>3} {'status':9} {'checks':24} {'items/s':>9} {'p99 ms':>8} {'ratio':>6}  config"]
    for r in found:
        lines.append(
            f"{r['trial']:>3} {r['status']:9} {r['checks']:24} {fmt(r['items_per_second'], '9.1f')} "
            f"{fmt(r['p99_ms'], '8.1f')} {fmt(r['ratio'], '6.2f')}  {r['config']}"
            + (f"\n{'':>4}{r['reason']}" if r["reason"] else "")
        )
    return "\n".join(lines)


def picture(found: list[dict], winner: int | None, shipped: int | None, path: Path, title: str) -> Path:
    """items/s vs p99 of every measured candidate, the shipped config and the winner marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = [r for r in found if r["items_per_second"] is not None and r["status"] == "measured"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.scatter(
        [r["p99_ms"] for r in measured], [r["items_per_second"] for r in measured], c="tab:blue", label="candidate"
    )
    for number, style in (
        (shipped, dict(c="black", marker="s", label="shipped")),
        (winner, dict(c="tab:red", marker="*", s=200, label="winner")),
    ):
        mine = [r for r in measured if r["trial"] == number]
        if mine:
            ax.scatter([mine[0]["p99_ms"]], [mine[0]["items_per_second"]], **style)
    ax.set_xlabel("p99 latency (ms)")
    ax.set_ylabel("items/s")
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def anomalies(trials, objective: str) -> list[str]:
    """Candidates one lever apart where one is ``ANOMALY_FACTOR`` times worse: what Triton's
    statistics say of each (queue vs compute per request, batch) and which engine settings ran."""
    measured = [t for t in trials if t.user_attrs.get("status") == "measured"]
    worse = (
        (lambda a, b: a.value > ANOMALY_FACTOR * b.value)
        if objective == "latency"
        else (lambda a, b: a.value * ANOMALY_FACTOR < b.value)
    )
    notes = []
    for slow in measured:
        for sibling in measured:
            apart = [k for k in slow.params if slow.params[k] != sibling.params.get(k)]
            if len(apart) == 1 and worse(slow, sibling):
                k = apart[0]
                notes.append(
                    f"trial {slow.number} ({k}={slow.params[k]}) is far behind trial {sibling.number} ({k}={sibling.params[k]}): "
                    f"{slow.value:.1f} vs {sibling.value:.1f}\n"
                    f"    trial {slow.number}: {describe_statistics(slow)}\n    trial {sibling.number}: {describe_statistics(sibling)}"
                )
    return notes


def describe_statistics(trial) -> str:
    parts = []
    for model, split in (trial.user_attrs.get("statistics") or {}).items():
        parts.append(
            f"{model} queue {split.get('perf_server_queue', '-')} ms, compute {split.get('perf_server_compute_infer', '-')} ms "
            f"per request, batch {split.get('server_avg_batch_size', '-')}"
        )
    engine = trial.user_attrs.get("backends") or {}
    config = trial.user_attrs.get("config") or {}
    return "; ".join(parts) + f"; engine {json.dumps(engine)}; config {json.dumps(config, sort_keys=True)}"


def apply(deployment: Deployment, overrides: dict[str, dict], note: str) -> list[Path]:
    """Write ``overrides`` into each model's ``config.pbtxt`` (as ``ModelConfig`` protobufs); the file's
    leading comments stay, with a line saying which run chose the values."""
    written = []
    for model, fields in overrides.items():
        path = deployment.model_repository / model / "config.pbtxt"
        header = [line for line in _leading_comments(path.read_text())]
        write_config(apply_overrides(read_config(path), ConfigOverrides(**fields)), path)
        path.write_text("\n".join([*header, f"# {note}", path.read_text()]))
        written.append(path)
    return written


def _leading_comments(text: str) -> list[str]:
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return lines
