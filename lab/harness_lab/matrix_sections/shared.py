"""What the lab's sections share: the latest run of a comparison, round-by-round quotients, the
load phrase of a run, and grouped bars with each bar's ceiling marked over it (the network and
serving figures)."""

from __future__ import annotations

from collections import defaultdict

from harness.measuring.matrix.cells import stamp
from harness.measuring.matrix.fmt import rate

#: Headline bars spanning more than this factor get a logarithmic axis.
LOG_SPAN = 50.0


def latest_run(records: list[dict], comparison: str, keep=lambda run: True) -> list[dict]:
    """The records of the latest run (one ``run_id``) whose records say ``comparison`` and that ``keep(run)``."""
    runs: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        if record.get("comparison") == comparison:
            runs[record.get("run_id")].append(record)
    kept = [run for run in runs.values() if keep(run)]
    return max(kept, key=lambda run: max(stamp(r) for r in run)) if kept else []


def round_quotients(top: list[float], bottom: list[float]) -> list[float]:
    """``top / bottom`` round by round (a round whose ``bottom`` is 0 left out)."""
    return [a / b for a, b in zip(top, bottom) if b]


def load(records: list[dict]) -> str:
    loads = [r["load_average_1m"] for r in records if r.get("load_average_1m") is not None]
    return f"load {min(loads):.1f}-{max(loads):.1f}" if loads else "load not recorded"


def bars(ax, groups: list[str], series: dict[str, list[float]], marks: dict | None = None, label_marks=False) -> None:
    """Grouped bars with a value label on each; a bar's mark (its ceiling) is a tick in the bar's own
    colour over that bar, joined to it by a dotted stem (with its value when ``label_marks``); a mark
    beyond the axis is an arrow at the top of the axis over its bar, labelled with its value."""
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
            if mark:
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


def ceiling_handle(label: str):
    from matplotlib.lines import Line2D

    return Line2D([], [], color="black", linewidth=1.6), label
