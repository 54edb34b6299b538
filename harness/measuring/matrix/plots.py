"""The matrix's figures (``docs/plots/``): throughput vs concurrency, latency vs throughput and
bytes per request of each deployment's measured rows.

One panel per model family: a benchmark belongs to the family of the model it serves, and an
entry model that names a ``model_only`` benchmark (JPEG or text in) joins that benchmark's
family, so a pre-processing ensemble is drawn next to its model-only path. Concurrency is a
category axis of the values measured: a series that skipped one has a gap there, not a line
through it. A latency axis is logarithmic where its values span more than a factor of 10."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from harness.measuring.matrix.cells import generator_family

#: The figures of each deployment, ``docs/plots/<deployment>-<kind>.png``.
PLOT_KINDS = ("throughput", "latency", "bytes")
#: Latency spans more than this factor in a panel: logarithmic axis.
LOG_SPAN = 10.0
MARKERS = {"local": "o", "docker": "s", "external": "D"}


def family_of(rows: list[dict], model_only: dict[str, str]) -> dict[str, str]:
    """Benchmark id -> model family: its model, or the model of the ``model_only`` benchmark it names."""
    model = {r["benchmark"]: r.get("model") or r["benchmark"] for r in rows if r["measured"]}
    return {bench: model.get(model_only.get(bench, bench), own) for bench, own in model.items()}


def series_label(row: dict) -> str:
    return f"{row['benchmark']} [{row['server_mode']}, {generator_family(row)}]"


def panels(rows: list[dict], model_only: dict[str, str] | None = None) -> dict[str, dict[str, list[dict]]]:
    """Family -> series label -> that series' rows by concurrency (one row per concurrency)."""
    families = family_of(rows, model_only or {})
    result: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r["measured"]:
            result[families[r["benchmark"]]][series_label(r)].append(r)
    for series in result.values():
        for points in series.values():
            points.sort(key=lambda r: int(r["concurrency"]))
    return {family: dict(series) for family, series in sorted(result.items())}


def on_concurrency_axis(points: list[dict], concurrencies: list[int], key: str) -> list[float]:
    """``key`` of each point at its position among ``concurrencies``; NaN (a gap) where not measured."""
    by_c = {int(p["concurrency"]): p[key] for p in points}
    return [by_c.get(c, math.nan) for c in concurrencies]


def latency_scale(series: dict[str, list[dict]]) -> str:
    values = [p[k] for points in series.values() for p in points for k in ("perf_latency_p50", "perf_latency_p99")]
    values = [v for v in values if v and v > 0]
    return "log" if values and max(values) / min(values) > LOG_SPAN else "linear"


def plot(name: str, rows: list[dict], folder: Path, model_only: dict[str, str] | None = None) -> dict[str, Path]:
    """Throughput vs concurrency and latency vs throughput (a panel per family), bytes per request."""
    by_family = panels(rows, model_only)
    if not by_family:
        return {}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    columns = min(2, len(by_family))
    grid_rows = math.ceil(len(by_family) / columns)

    def figure():
        fig, axes = plt.subplots(grid_rows, columns, figsize=(7 * columns, 4.2 * grid_rows), squeeze=False)
        for ax in axes.flat[len(by_family) :]:
            ax.set_visible(False)
        return fig, axes.flat

    def save(fig, kind: str, title: str) -> None:
        fig.suptitle(f"{name}: {title}")
        fig.tight_layout()
        written[kind] = folder / f"{name}-{kind}.png"
        fig.savefig(written[kind], dpi=100, metadata={"Software": None})
        plt.close(fig)

    fig, axes = figure()
    for ax, (family, series) in zip(axes, by_family.items()):
        concurrencies = sorted({int(p["concurrency"]) for points in series.values() for p in points})
        for label, points in series.items():
            ax.plot(
                range(len(concurrencies)),
                on_concurrency_axis(points, concurrencies, "perf_throughput"),
                marker=MARKERS.get(points[0]["server_mode"], "o"),
                linestyle="--" if generator_family(points[0]) == "perf_analyzer" else "-",
                label=label,
            )
        ax.set_xticks(range(len(concurrencies)), [str(c) for c in concurrencies])
        ax.set(xlabel="concurrency (requests in flight; measured values only)", ylabel="infer/s", title=family)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    save(fig, "throughput", "throughput vs concurrency, one panel per model family")

    fig, axes = figure()
    for ax, (family, series) in zip(axes, by_family.items()):
        for label, points in series.items():
            throughput = [p["perf_throughput"] for p in points]
            (line,) = ax.plot(throughput, [p["perf_latency_p50"] for p in points], marker="o", label=f"{label} p50")
            ax.plot(
                throughput,
                [p["perf_latency_p99"] for p in points],
                marker="x",
                linestyle=":",
                color=line.get_color(),
                label=f"{label} p99",
            )
        scale = latency_scale(series)
        ax.set_yscale(scale)
        ax.set(xlabel="infer/s", ylabel=f"latency ms ({scale})", title=family)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=6)
    save(fig, "latency", "latency (p50 solid, p99 dotted) vs throughput, points at the measured concurrencies")

    last = {r["benchmark"]: r for r in rows if r["measured"]}
    families = family_of(rows, model_only or {})
    labels = sorted(last, key=lambda b: (families[b], b))
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.45 * len(labels)))
    positions = range(len(labels))
    ax.barh(
        [p - 0.2 for p in positions], [last[b].get("bytes_sent_per_request") or 0 for b in labels], 0.4, label="sent"
    )
    ax.barh(
        [p + 0.2 for p in positions],
        [last[b].get("bytes_received_per_request") or 0 for b in labels],
        0.4,
        label="received",
    )
    ax.set_yticks(list(positions), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set(xlabel="bytes per request (log)")
    ax.legend()
    save(fig, "bytes", "bytes on the wire per request")
    return written
