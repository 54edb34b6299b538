"""Side-by-side runs (``make bench-peers``: ``python -m harness_lab.peers``): their section of
``docs/results.md`` and the headline lesson ``serving``, ratios taken round by round.

Each record of a run carries every round's sentences/s; targets of one workload ran in the
same rounds, alternating, so a ratio is the median over rounds of the per-round quotients
(``served / ceiling`` likewise, against the ceiling worker's measurement of that round). Which
ratios, and their goals, are the measured deployment's ``[[peers.ratios]]`` (lab/deployments/<d>.toml).
Records since the OpenAI path name their ``path`` (``native``, ``openai``, ``peer``) and ``gate``;
the OpenAI path against the native one and infinity-emb are ratios of the deployment's
``[[peers.ratios]]`` like any other.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from harness.measuring.matrix.cells import dates, stamp
from harness.measuring.matrix.fmt import rate, ratio, spread, table
from harness.measuring.matrix.headlines import machine
from harness.measuring.matrix.plots import bars, mark_legend
from harness.measuring.matrix.rows import NOT_MEASURED
from harness.measuring.matrix.sections import Lesson
from harness_lab.manifest import PeersSpec
from harness_lab.matrix_sections.shared import latest_run, load, median, round_quotients
from harness_lab.peers.workloads import MIXED

COMMAND = "make bench-peers && make matrix"


def peers_spec(records: list[dict]) -> PeersSpec | None:
    """The ``[peers]`` table of the deployment the records measured (None when it has none)."""
    from harness.deployments import ManifestError
    from harness_lab.manifest import lab_manifest

    name = next((r["deployment"] for r in records if r.get("deployment")), None)
    try:
        return lab_manifest(name).peers if name else None
    except ManifestError:
        return None


def latest_peers_run(records: list[dict]) -> list[dict]:
    """The latest side-by-side run that measured one of its deployment's ``[peers.models]`` (not only
    peers or config variants)."""

    def served(run: list[dict]) -> bool:
        spec = peers_spec(run)
        return spec is not None and any(r.get("model") in spec.models for r in run)

    return latest_run(records, "side-by-side", served)


#: Per-round speeds a ratio is taken from: sentences/s (wall clock) of a target and of its ceiling,
#: and (records since the CPU fields) sentences per CPU second, which a busy shared core disturbs less.
RATE_KEYS = ("rounds_items_per_second", "rounds_ceiling_items_per_second")
CPU_KEYS = ("rounds_cpu_ms_per_item", "rounds_ceiling_cpu_ms_per_item")


def per_round(record: dict, key: str = "rounds_items_per_second") -> list[float]:
    values = [float(v) for v in record.get(key) or []]
    return [1e3 / v if v else 0.0 for v in values] if "cpu_ms" in key else values


def workload_label(record: dict) -> int | str:
    """The sentences per request, or ``mixed`` for the mixed-length workload (records since it:
    one text a request)."""
    return MIXED if record.get("workload") == MIXED else int(record["items_per_request"])


def workloads_of(run: list[dict]) -> dict[tuple[int | str, int], dict[str, dict]]:
    """(workload label, concurrency) -> target name -> record, uniform batches first, by size."""
    workloads: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for record in run:
        workloads[(workload_label(record), int(record["concurrency"]))][record["model"]] = record
    order = sorted(workloads, key=lambda key: (key[0] == MIXED, 0 if key[0] == MIXED else key[0], key[1]))
    return {key: workloads[key] for key in order}


def _is_infinity(name: str, record: dict) -> bool:
    return record.get("peer") == "infinity-emb" or name.startswith("infinity-")


def ratios(run: list[dict]) -> list[dict]:
    """Per workload (batch, concurrency): each ratio of the deployment's ``[[peers.ratios]]`` with
    its per-round values; ``applies`` is False where its ``only_where_ahead`` target is not ahead
    of the bottom (``condition``: that quotient's median)."""
    spec = peers_spec(run)
    if spec is None:
        return []
    rows = []
    for (batch, concurrency), targets in workloads_of(run).items():

        def series(name: str, keys: tuple[str, str]) -> list[float] | None:
            served, ceiling = keys
            if name.startswith("ceiling:"):
                kind = name.split(":", 1)[1]
                found = next((r for r in targets.values() if r.get("ceiling_kind") == kind), None)
                return per_round(found, ceiling) if found else None
            if name == "best-peer":
                peers = [per_round(r, served) for n, r in targets.items() if _is_infinity(n, r)]
                return [max(values) for values in zip(*peers)] if all(peers) and peers else None
            return per_round(targets[name], served) if name in targets else None

        def quotients(top: str, bottom: str, keys: tuple[str, str]) -> list[float]:
            numerator = series(top, keys)
            if bottom == "ceiling":
                denominator = per_round(targets[top], keys[1]) if top in targets else None
            else:
                denominator = series(bottom, keys)
            return round_quotients(numerator or [], denominator or [])

        for goal in spec.ratios:
            values = quotients(goal.top, goal.bottom, RATE_KEYS)
            if not values:
                continue
            cpu = quotients(goal.top, goal.bottom, CPU_KEYS)
            condition = quotients(goal.only_where_ahead, goal.bottom, RATE_KEYS) if goal.only_where_ahead else []
            rows.append(
                {
                    "batch": batch,
                    "concurrency": concurrency,
                    "ratio": goal.label,
                    "goal": goal.goal,
                    "value": statistics.median(values),
                    "rounds": values,
                    "cpu_value": median(cpu),
                    "generator": next(iter(targets.values())).get("generator"),
                    "applies": not condition or median(condition) >= 1.0,
                    "condition": median(condition),
                    "only_where_ahead": goal.only_where_ahead,
                }
            )
    return rows


def _gate_phrase(run: list[dict]) -> str:
    """How tritonserver was served in the run (every server of a run alike): behind the front gate,
    or not (records before the ``gate`` field ran without it)."""
    if any(r.get("gate") for r in run if "peer" not in (r.get("server_mode"), r.get("path"))):
        return "tritonserver behind the front gate as users run it, native and OpenAI paths alike"
    return "tritonserver without the front gate"


def _verdict(row: dict) -> str:
    if not row.get("applies", True):
        return f"n/a ({row['only_where_ahead']} behind: {row['condition']:.2f})"
    return "met" if row["value"] >= row["goal"] else "NOT met"


def _introduction(run: list[dict]) -> list[str]:
    """The section's heading and the sentence of how the run was made."""
    first = min(run, key=lambda r: str(r.get("timestamp", "")))
    spec = peers_spec(run)
    return [
        "",
        f"## {first.get('deployment')} side by side: {spec.title}",
        "",
        f"One run (`make bench-peers`, run `{first.get('run_id')}`, {first.get('timestamp')}, "
        f"{machine(first)}, {load(run)}). Generator: "
        f"{first.get('generator')}; servers ({_gate_phrase(run)}, its stubs, the peers) and the "
        f"in-process ceiling on cores {first.get('server_cores')}. Every workload ran its targets in turn, "
        "alternating order, for several rounds; a ratio is the median of the per-round quotients (the rounds "
        "column). Ceiling: the same work (tokenize + model + pool) in one process on the server's cores, at "
        "the batch the server could form (`min(batch x c, 64)`; runs whose records carry `ceiling_rule` take the "
        "better of that and the request's own batch; runs whose records carry `rounds_cpu_ms_per_item` run the "
        f"ONNX ceiling in `{spec.ceiling_follows}`'s length buckets of `onnx_max_batch_size` rows). Batch `mixed`: "
        "one text a request from the deployment's mixed-length texts (short queries and long passages, seeded), "
        "its ceiling on the same texts.",
        "",
    ]


def _targets_table(run: list[dict]) -> str:
    """Every target of every workload: its rate, rounds, latency, errors and ceiling."""
    order = {key: i for i, key in enumerate(workloads_of(run))}
    rows = [
        [
            workload_label(r),
            r["concurrency"],
            r["model"],
            f"{r['items_per_second']:.1f}",
            ", ".join(f"{v:.0f}" for v in per_round(r)),
            f"{r.get('perf_latency_p50', 0):.1f}",
            f"{r.get('perf_latency_p99', 0):.1f}",
            r.get("errors", 0),
            f"{r.get('ceiling_kind')}@{r.get('ceiling_batch_size')}",
            f"{r.get('served_over_ceiling') or 0:.2f}",
            r.get("kernel_path", ""),
        ]
        for r in sorted(run, key=lambda r: (order[(workload_label(r), int(r["concurrency"]))], r["model"]))
    ]
    return table(
        rows,
        "batch | c | target | sentences/s | rounds | p50 ms | p99 ms | errors | ceiling | served / ceiling | "
        "INT8 kernel path",
    )


def _ratios_lines(run: list[dict]) -> list[str]:
    """The ``[[peers.ratios]]`` table: median, rounds, CPU-time ratio, goal and verdict."""
    rows = [
        [
            r["batch"],
            r["concurrency"],
            r["ratio"],
            f"{r['value']:.2f}",
            ", ".join(f"{v:.2f}" for v in r["rounds"]),
            f"{r['cpu_value']:.2f}" if r.get("cpu_value") else "–",
            f">= {r['goal']:g}" + (f" where {r['only_where_ahead']} is ahead" if r.get("only_where_ahead") else ""),
            _verdict(r),
        ]
        for r in ratios(run)
    ]
    return [
        "",
        "Ratios (goals: the deployment's `[[peers.ratios]]`; `met` when the median reaches it, `n/a` where the "
        "goal holds only where another target is ahead and it is not). CPU-time ratio: the same quotient "
        "from CPU seconds per sentence (the server's process tree, counted until idle after each window, "
        "against the ceiling worker's), steadier than wall-clock rates when other jobs share the core:",
        "",
        table(rows, ["batch", "c", "ratio", "median", "rounds", "CPU-time ratio", "goal", ""]),
    ]


def render(records: list[dict]) -> list[str]:
    """Markdown lines: the side-by-side table and its ratios (empty when no such run exists)."""
    run = latest_peers_run(records)
    if not run:
        return []
    variants = sorted({(r["model"], r.get("variant") or "") for r in run})
    targets = "Targets: " + "; ".join(f"`{m}`: {(v or '').split(': ', 1)[-1]}" for m, v in variants)
    return [*_introduction(run), _targets_table(run), *_ratios_lines(run), "", targets, ""]


# -- the headline lesson "serving": which way to serve an embedding model on a CPU --------------
def latest_side_by_side_run(records: list[dict]) -> list[dict]:
    """The latest run that measured a served model (not only peers) beside at least one other
    target, and not only config variants."""
    return latest_run(
        records,
        "side-by-side",
        lambda run: (
            len({r.get("model") for r in run}) > 1
            and any(r.get("server_mode") != "peer" for r in run)
            and not all(r.get("label") for r in run)
        ),
    )


def serving_lesson(records: list[dict]) -> dict:
    """The latest side-by-side run: per (items per request, concurrency), each target's items/s,
    ceiling and round-by-round ratio of the fastest to each other target."""
    run = latest_side_by_side_run(records)
    if not run:
        return {"measured": False, "command": COMMAND}
    targets = sorted(
        {r["model"] for r in run},
        key=lambda m: -statistics.median(r["items_per_second"] for r in run if r["model"] == m),
    )
    result = []
    for (label, concurrency), found in workloads_of(run).items():
        if label == MIXED:  # the lesson compares sentences per request
            continue
        batch = label
        best = max(found.values(), key=lambda r: r["items_per_second"])
        result.append(
            {
                "batch": batch,
                "concurrency": concurrency,
                "best": best["model"],
                "items_per_second": {m: r["items_per_second"] for m, r in found.items()},
                "ceiling": {m: r.get("ceiling_items_per_second") for m, r in found.items()},
                "versus": {
                    m: {"median": statistics.median(q), "rounds": q}
                    for m, r in found.items()
                    if m != best["model"] and (q := round_quotients(per_round(best), per_round(r)))
                },
            }
        )
    first = min(run, key=stamp)
    return {
        "measured": True,
        "deployment": first.get("deployment"),
        "run_id": first.get("run_id"),
        "targets": targets,
        # peer servers (server_mode "peer"): the kind of peer their records name (infinity-emb)
        "peers": {r["model"]: r.get("peer") or "" for r in run if r.get("server_mode") == "peer"},
        "workloads": result,
        "when": dates(run),
        "machine": machine(first),
        "load": load(run),
        "records": run,
        "command": COMMAND,
    }


def peer_suffix(lesson: dict, model: str) -> str:
    """`` (peer)`` / `` (<kind> peer)`` after a peer server's name, "" after ours."""
    if model not in lesson["peers"]:
        return ""
    kind = lesson["peers"][model]
    return f" ({kind} peer)" if kind and kind not in model else " (peer)"


def shown_batches(lesson: dict) -> list[int]:
    """One item per request and the largest request of the run (the screen's two rows)."""
    batches = sorted({w["batch"] for w in lesson["workloads"]})
    return sorted({batches[0], batches[-1]})


def render_serving_lesson(lesson: dict) -> list[str]:
    lines = ["### Which way to serve an embedding model on a CPU", ""]
    if not lesson["measured"]:
        return lines + [f"{NOT_MEASURED}: `{lesson['command']}`", ""]

    def name(model: str) -> str:
        return f"`{model}`" + peer_suffix(lesson, model)

    for batch in shown_batches(lesson):
        at = [w for w in lesson["workloads"] if w["batch"] == batch]
        focus = at[len(at) // 2]  # the middle concurrency: the ratios of the sentence
        versus = sorted(focus["versus"].items(), key=lambda kv: kv[1]["median"])
        levels = "/".join(str(w["concurrency"]) for w in at)
        rates = " / ".join(rate(w["items_per_second"][w["best"]]) for w in at)
        bests = {w["best"] for w in at}
        fastest = (
            f"{name(focus['best'])} is fastest at every c ({rates} sentences/s at c={levels})"
            if len(bests) == 1
            else "fastest: "
            + ", ".join(f"c={w['concurrency']} {name(w['best'])}" for w in at)
            + f" ({rates} sentences/s)"
        )
        lines.append(
            f"- {batch} sentence{'s' if batch > 1 else ''} per request: {fastest}; at c={focus['concurrency']} "
            f"{name(focus['best'])} serves "
            + ", ".join(f"{ratio(v['median'])} ({spread(v['rounds'])}) {name(m)}" for m, v in versus)
            + "."
        )
    lines += [
        f"- ratios: median of per-round quotients (range over rounds); run `{lesson['run_id']}`, {lesson['when']}, "
        f"{lesson['machine']}, {lesson['load']}. Reproduce: `{lesson['command']}`",
        "",
        "![sentences/s per serving method](plots/headline-serving.png)",
        "",
    ]
    return lines


def plot_serving_lesson(serving: dict, plt, save) -> None:
    batches = shown_batches(serving)
    fig, axes = plt.subplots(1, len(batches), figsize=(6.2 * len(batches), 5.2), squeeze=False)
    for ax, batch in zip(axes.flat, batches):
        at = [w for w in serving["workloads"] if w["batch"] == batch]
        label = {m: m + peer_suffix(serving, m) for m in serving["targets"]}
        series = {label[m]: [w["items_per_second"].get(m, float("nan")) for w in at] for m in serving["targets"]}
        marks = {label[m]: [w["ceiling"].get(m) for w in at] for m in serving["targets"]}
        bars(ax, [f"c={w['concurrency']}" for w in at], series, marks)
        ax.set(
            xlabel="concurrency (requests in flight)",
            ylabel="sentences/s" if ax is axes.flat[0] else None,
            title=f"{batch} sentence{'s' if batch > 1 else ''} per request",
        )
    legend = {"fontsize": 8, "loc": "lower center", "ncol": 4, "frameon": False}
    mark_legend(fig, axes.flat[0], "in-process ceiling of the method below it", **legend)
    fig.suptitle(
        f"{serving['deployment']}: sentences/s of each serving method, one run "
        f"({serving['run_id']}, {serving['when']}, {serving['machine']})"
    )
    save(fig, "serving", rect=(0, 0.12, 1, 1))


LESSON = Lesson("serving", lambda records, matrix: serving_lesson(records), render_serving_lesson, plot_serving_lesson)
