"""The matrix's figures: the headline screen's (``docs/plots/headline-<kind>.png``) and, for the
latest server mode each deployment was measured in, ``docs/plots/<deployment>-<kind>.png`` of
``PLOT_KINDS``; variants are ordered by model family (an entry model next to its ``model_only``)."""

from __future__ import annotations

from pathlib import Path

from harness.measuring.matrix.cells import dates, generator_family, stamp
from harness.measuring.matrix.fmt import rate, ratio
from harness.measuring.matrix.headlines import cost_kinds, costs_heading, machine

#: The figures of each deployment, ``docs/plots/<deployment>-<kind>.png``.
PLOT_KINDS = ("throughput", "latency", "bytes")
#: A concurrency sweep with at least this many levels is drawn as a line too.
SWEEP_POINTS = 4


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


def sweeps(rows: list[dict]) -> dict[str, list[dict]]:
    """Variants measured at ``SWEEP_POINTS`` or more concurrencies: their rows by concurrency."""
    by_variant: dict[str, list[dict]] = {}
    for r in rows:
        by_variant.setdefault(r["benchmark"], []).append(r)
    return {
        b: sorted(points, key=lambda r: int(r["concurrency"]))
        for b, points in by_variant.items()
        if len({int(r["concurrency"]) for r in points}) >= SWEEP_POINTS
    }


class Bars:
    """The bar layout of one run's figures: a group per variant, a bar per concurrency it was measured at."""

    def __init__(self, run: list[dict], model_only: dict[str, str] | None):
        self.variants = variants_in_order(run, model_only)
        self.levels = sorted({int(r["concurrency"]) for r in run})
        self.at = {(r["benchmark"], int(r["concurrency"])): r for r in run}
        self.colors = {c: f"C{i}" for i, c in enumerate(self.levels)}
        #: (y, variant, concurrency): a bar per measured level, variants apart by a gap
        self.slots = [
            (index + 0.6 * self.variants.index(b), b, c)
            for index, (b, c) in enumerate((b, c) for b in self.variants for c in self.levels if (b, c) in self.at)
        ]
        self.height = 1.6 + 0.3 * (len(self.at) + len(self.variants))

    def draw(self, ax, key: str, unit: str, mark: str | None = None) -> None:
        """Horizontal bars of ``key`` from zero; ``mark``: a tick at that field (p99) and both values."""
        points = [self.at[(b, c)] for _, b, c in self.slots]
        xs = [p.get(key) or 0.0 for p in points]
        ys = [y for y, _, _ in self.slots]
        bars = ax.barh(ys, xs, 0.85, color=[self.colors[c] for _, _, c in self.slots])
        if not mark:
            ax.bar_label(bars, [rate(x) for x in xs], fontsize=6, padding=2)
        else:  # the p99 tick, and both values beyond whichever is longer
            marked = [(p.get(mark), y) for p, y in zip(points, ys) if p.get(mark)]
            ax.plot([m for m, _ in marked], [y for _, y in marked], "k|", markersize=10)
            for x, p, y in zip(xs, points, ys):
                top = p.get(mark) or 0.0
                label = f"{rate(x)} / {rate(top)}"
                ax.annotate(label, (max(x, top), y), xytext=(4, 0), textcoords="offset points", va="center", fontsize=6)
        centers = {}
        for y, b, _ in self.slots:
            centers.setdefault(b, []).append(y)
        ax.set_yticks([sum(v) / len(v) for v in centers.values()], list(centers), fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(unit)
        ax.margins(x=0.12)
        ax.grid(axis="x", alpha=0.3)
        ax.legend(handles=self._legend(mark), fontsize=7, loc="lower right")

    def _legend(self, mark: str | None) -> list:
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch

        handles = [Patch(color=self.colors[c], label=f"c={c}") for c in self.levels]
        if mark:
            handles.append(Line2D([], [], color="black", marker="|", linestyle="", markersize=10, label="p99"))
        return handles


def _sweep_lines(ax, lines: dict[str, list[dict]]) -> None:
    """items/s against concurrency (log) of each variant swept at ``SWEEP_POINTS`` or more levels."""
    for benchmark, points in lines.items():
        ax.plot([int(p["concurrency"]) for p in points], [p["items_per_second"] for p in points], "o-", label=benchmark)
    ax.set(xscale="log", xlabel="concurrency (requests in flight, log)", ylabel="items/s")
    swept = sorted({int(p["concurrency"]) for points in lines.values() for p in points})
    ax.set_xticks(swept, [str(c) for c in swept])
    ax.minorticks_off()
    ax.set_title(f"concurrency sweeps ({SWEEP_POINTS}+ levels)", fontsize=9)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def _bytes_bars(ax, run: list[dict], variants: list[str]) -> None:
    """Request and response bytes of each variant's latest row (log scale)."""
    last = {b: max((r for r in run if r["benchmark"] == b), key=stamp) for b in variants}
    positions = range(len(variants))
    for offset, key, label in (
        (-0.2, "bytes_sent_per_request", "sent"),
        (0.2, "bytes_received_per_request", "received"),
    ):
        values = [last[b].get(key) or 0 for b in variants]
        bars = ax.barh([p + offset for p in positions], values, 0.4, label=label)
        ax.bar_label(bars, [f"{v:,.0f}" for v in values], fontsize=6, padding=2)
    ax.set_yticks(list(positions), variants, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.margins(x=0.15)
    ax.set(xlabel="bytes per request (request / response body, log)")
    ax.legend(fontsize=7)


def plot(name: str, rows: list[dict], folder: Path, model_only: dict[str, str] | None = None) -> dict[str, Path]:
    """The throughput, latency and bytes figures of one run of a deployment; {} when nothing was measured."""
    mode, run = figure_run(rows)
    if not run:
        return {}
    plt = _pyplot()
    written: dict[str, Path] = {}
    save = _saver(folder, f"{name}-", written)
    layout = Bars(run, model_only)
    where = f"{mode} server, {dates(run)}, {machine(run[0])}"

    lines = sweeps(run)
    fig, axes = plt.subplots(1, 2 if lines else 1, figsize=(13 if lines else 8, layout.height), squeeze=False)
    layout.draw(axes.flat[0], "items_per_second", "items/s")
    axes.flat[0].set_title("items/s per variant, bars at each concurrency", fontsize=9)
    if lines:
        _sweep_lines(axes.flat[1], lines)
    fig.suptitle(f"{name}: which variant serves most items/s\n({where})", fontsize=10)
    save(fig, "throughput")

    fig, ax = plt.subplots(figsize=(8, layout.height))
    unit = "client-side latency ms: bar p50, tick p99 (labels p50 / p99)"
    layout.draw(ax, "perf_latency_p50", unit, mark="perf_latency_p99")
    fig.suptitle(f"{name}: latency per variant at each concurrency\n({where})", fontsize=10)
    save(fig, "latency")

    fig, ax = plt.subplots(figsize=(8, 1.4 + 0.45 * len(layout.variants)))
    _bytes_bars(ax, run, layout.variants)
    fig.suptitle(f"{name}: bytes on the wire per request of each variant\n({where})", fontsize=10)
    save(fig, "bytes")
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
