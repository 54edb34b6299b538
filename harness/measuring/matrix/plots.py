"""The matrix's figures: the headline screen's (``docs/plots/headline-<kind>.png``) and, for the
latest server mode each deployment was measured in, ``docs/plots/<deployment>-<kind>.png`` of
``PLOT_KINDS``; variants are ordered by model family (an entry model next to its ``model_only``)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from harness.measuring.matrix.cells import dates, generator_family, stamp
from harness.measuring.matrix.fmt import rate, ratio
from harness.measuring.matrix.headlines import cost_kinds, costs_heading, machine

#: The figures of each deployment, ``docs/plots/<deployment>-<kind>.png``.
PLOT_KINDS = ("throughput", "latency", "bytes")
#: Bars spanning more than this factor get a logarithmic axis.
LOG_SPAN = 50.0


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _saver(folder: Path, prefix: str, written: dict[str, Path]):
    """``save(fig, kind, rect)``: lay the figure out, write ``<folder>/<prefix><kind>.png``, close it."""
    plt = _pyplot()
    folder.mkdir(parents=True, exist_ok=True)

    def save(fig, kind: str, rect=(0, 0, 1, 1)) -> None:
        fig.tight_layout(rect=rect)
        written[kind] = folder / f"{prefix}{kind}.png"
        fig.savefig(written[kind], dpi=100, metadata={"Software": None})
        plt.close(fig)

    return save


def family_of(rows: list[dict], model_only: dict[str, str]) -> dict[str, str]:
    """Benchmark id -> model family: its model, or the model of the ``model_only`` benchmark it names."""
    model = {r["benchmark"]: r.get("model") or r["benchmark"] for r in rows if r["measured"]}
    return {bench: model.get(model_only.get(bench, bench), own) for bench, own in model.items()}


def figure_run(rows: list[dict]) -> tuple[str | None, list[dict]]:
    """The server mode of the latest measured row and that mode's measured rows of the default generator."""
    measured = [r for r in rows if r["measured"] and generator_family(r) == "harness-asyncio"]
    if not measured:
        return None, []
    mode = max(measured, key=stamp)["server_mode"]
    return mode, [r for r in measured if r["server_mode"] == mode]


def variants_in_order(rows: list[dict], model_only: dict[str, str] | None = None) -> list[str]:
    families = family_of(rows, model_only or {})
    first = {}
    for r in rows:
        first.setdefault(r["benchmark"], len(first))
    return sorted({r["benchmark"] for r in rows}, key=lambda b: (families.get(b, b), first[b]))


def bars(ax, groups: list[str], series: dict[str, list[float]], marks: dict | None = None, label_marks=False) -> None:
    """Grouped bars, a series per colour, with a value label on each (NaN: no bar); a bar's mark (a
    ceiling, a p99) is a tick in the bar's own colour over that bar, joined to it by a dotted stem
    (with its value when ``label_marks``); a mark beyond the axis is an arrow at the top of the axis
    over its bar, labelled with its value. Bars spanning more than ``LOG_SPAN`` get a log axis."""
    width = 0.8 / max(len(series), 1)
    values = [v for vs in series.values() for v in vs if v and v == v]
    top = max(values, default=1.0)
    drawn = []  # (x, bar height, mark, colour)
    for i, (label, heights) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        bars = ax.bar(xs, [v if v == v else 0 for v in heights], width * 0.92, label=label)
        ax.bar_label(bars, [rate(v) if v == v and v else "" for v in heights], fontsize=6, padding=1)
        colour = bars.patches[0].get_facecolor() if bars.patches else "black"
        for x, height, mark in zip(xs, heights, (marks or {}).get(label, [])):
            if mark and mark == mark:  # NaN: no bar, no mark
                drawn.append((x, height if height == height else 0.0, mark, colour))
    ax.set_xticks(range(len(groups)), groups)
    shown = [m for _, _, m, _ in drawn if m <= 2 * top]  # farther than twice the tallest bar: off scale
    if values and max(values) / min(values) > LOG_SPAN:
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

        ax.set_yscale("log")
        ax.set_ylim(bottom=min(values) / 2)
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: rate(v)))
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylim(top=max([top, *shown]) * (2.0 if ax.get_yscale() == "log" else 1.15))
    ceiling = ax.get_ylim()[1]
    for x, height, mark, colour in drawn:
        if mark <= ceiling:
            ax.vlines(x, height, mark, colors=[colour], linestyles="dotted", linewidth=1)
            ax.hlines(mark, x - width * 0.46, x + width * 0.46, colors=[colour], linewidth=2.2)
            ax.hlines(mark, x - width * 0.46, x + width * 0.46, colors="black", linewidth=0.6)
            if label_marks and mark - height > 0.08 * ceiling:  # at the bar's top the bar's own label says it
                ax.annotate(rate(mark), (x, mark), xytext=(0, 2), textcoords="offset points", ha="center", fontsize=6)
        else:
            ax.annotate(
                f"{rate(mark)}\n(off scale)",
                (x, ceiling),
                xytext=(0, -14),
                textcoords="offset points",
                ha="center",
                va="top",
                fontsize=6,
                arrowprops={"arrowstyle": "->", "color": colour},
            )
    ax.grid(axis="y", alpha=0.3, which="both")


def mark_legend(where, ax, label: str, **options) -> None:
    """The legend of ``ax``'s bars on ``where`` (the axes or the figure), the marks as ``label``."""
    from matplotlib.lines import Line2D

    handles, labels = ax.get_legend_handles_labels()
    where.legend([*handles, Line2D([], [], color="black", linewidth=1.6)], [*labels, label], **options)


def by_concurrency(run: list[dict], variants: list[str], key: str) -> dict[str, list[float]]:
    """``key`` of each variant (a group) at each concurrency (a series), NaN where not measured."""
    at = {(r["benchmark"], int(r["concurrency"])): r for r in run}
    levels = sorted({c for _, c in at})
    nan = float("nan")
    return {f"c={c}": [(at[(b, c)].get(key) or 0.0) if (b, c) in at else nan for b in variants] for c in levels}


def _bar_figure(plt, save, kind: str, title: str, variants: list[str], series: dict, unit: str, **options) -> None:
    """A deployment's figure ``kind``: ``series`` as bars per variant, slanted names under them;
    ``marks`` (p99 ticks) and ``width`` in ``options``."""
    fig, ax = plt.subplots(figsize=(options.get("width", 8.0), 5.5))
    bars(ax, variants, series, options.get("marks"))
    ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    for label in ax.get_xticklabels():
        label.set_horizontalalignment("right")
    ax.set_ylabel(unit + (" (log)" if ax.get_yscale() == "log" else ""))
    if options.get("marks"):
        mark_legend(ax, ax, "p99", fontsize=7)
    else:
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    save(fig, kind)


def plot(name: str, rows: list[dict], folder: Path, model_only: dict[str, str] | None = None) -> dict[str, Path]:
    """The throughput, latency and bytes figures of one run of a deployment; {} when nothing was measured."""
    mode, run = figure_run(rows)
    if not run:
        return {}
    written: dict[str, Path] = {}
    figure = partial(_bar_figure, _pyplot(), _saver(folder, f"{name}-", written))
    variants = variants_in_order(run, model_only)
    width = 3 + 0.25 * len(run) + 0.3 * len(variants)
    where = f"{mode} server, {dates(run)}, {machine(run[0])}"
    ips, p50, p99 = (
        by_concurrency(run, variants, k) for k in ("items_per_second", "perf_latency_p50", "perf_latency_p99")
    )
    title = f"{name}: which variant serves most items/s, bars at each concurrency\n({where})"
    figure("throughput", title, variants, ips, "items/s", width=width)
    title = f"{name}: latency per variant at each concurrency\n({where})"
    figure("latency", title, variants, p50, "client-side latency ms: bar p50, tick p99", marks=p99, width=width)
    last = [max((r for r in run if r["benchmark"] == b), key=stamp) for b in variants]
    keys = {"sent": "bytes_sent_per_request", "received": "bytes_received_per_request"}
    sizes = {label: [r.get(key) or 0 for r in last] for label, key in keys.items()}
    title = f"{name}: bytes on the wire per request of each variant\n({where})"
    figure(
        "bytes", title, variants, sizes, "bytes per request (request / response body)", width=3 + 0.6 * len(variants)
    )
    return written


# -- the headline screen's figures -------------------------------------------------------
def plot_headlines(headlines: dict, folder: Path, sections) -> dict[str, Path]:
    """``headline-<lesson>.png`` of each measured lesson of the distributions and ``headline-costs.png``."""
    plt = _pyplot()
    written: dict[str, Path] = {}
    save = _saver(folder, "headline-", written)
    kinds = cost_kinds(sections)
    for lesson in (lesson for s in sections for lesson in s.lessons):
        if headlines[lesson.name]["measured"]:
            lesson.plot(headlines[lesson.name], plt, save)

    rows = [r for kind in headlines["costs"]["rows"].values() for r in kind]
    if rows:
        from matplotlib.patches import Patch

        fig, ax = plt.subplots(figsize=(9, 1.8 + 0.55 * len(rows)))
        ys = list(range(len(rows)))
        medians = [r["median"] for r in rows]
        low = [r["median"] - min(r["spread"]) for r in rows]
        high = [max(r["spread"]) - r["median"] for r in rows]
        colors = {k.kind: k.colour for k in kinds}
        bars = ax.barh(ys, medians, xerr=[low, high], color=[colors[r["kind"]] for r in rows], capsize=3)
        ax.bar_label(bars, [ratio(m) for m in medians], fontsize=7, label_type="center", color="white")
        ax.axvline(1.0, color="black", linewidth=1)
        ax.set_yticks(ys, [r["label"].replace(": ", "\n", 1) for r in rows], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("ratio of items/s, with / without (median; whiskers: range over rounds or cells)")
        fig.suptitle(f"What {costs_heading(kinds)} cost (1.0 = nothing)")
        shown = [k for k in kinds if any(r["kind"] == k.kind for r in rows)]
        ax.legend([Patch(color=k.colour) for k in shown], [k.legend for k in shown], fontsize=7, loc="lower right")
        ax.grid(axis="x", alpha=0.3)
        save(fig, "costs")
    return written
