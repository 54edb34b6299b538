"""The matrix as markdown (``docs/results.md``): the results table of each deployment with its
footnotes and container cost."""

from __future__ import annotations

from harness.measuring.matrix.cells import ceiling, dates, freshness_note, generator_family, pinning_label, run_label
from harness.measuring.matrix.container_cost import MAX_HOURS_APART, container_cost
from harness.measuring.matrix.fmt import captioned, number, size, table
from harness.measuring.matrix.plots import PLOT_KINDS
from harness.measuring.matrix.processing_ratio import render_paired_ratios, render_processing_ratios
from harness.measuring.matrix.rows import NOT_MEASURED

#: The compact table of each deployment and server mode; every other column is in results.json / .csv.
COLUMNS = "variant | server / target | c | items/s | p50 ms | p99 ms | bytes/req sent / recv | of ceiling | correctness"
#: Footnote of a served rate above its in-process ceiling.
ABOVE_CEILING = (
    "> ceiling: served faster than the in-process ceiling measured in the few seconds after the window. That "
    "ceiling is one caller in the generator's process on the same shared cores, a lower bound rather than a "
    "limit when the neighbours' load moved between the two; the quotient is in results.json "
    "(`served_over_ceiling`)."
)


def _served(record: dict) -> str:
    """Items/s as a share of the record's ceiling, never above 100 % without the footnote's mark."""
    limit = ceiling(record)
    if not limit:
        return "–"
    share = record["items_per_second"] / limit
    return f"{share:.0%}" if share <= 1.0 else "> ceiling"


def _bytes(record: dict) -> str:
    sent, received = record.get("bytes_sent_per_request"), record.get("bytes_received_per_request")
    return " / ".join(size(v) if v is not None else "–" for v in (sent, received))


def _variant(record: dict) -> str:
    """The benchmark id, and the generator where it is not the default one."""
    family = generator_family(record)
    return record["benchmark"] + ("" if family == "harness-asyncio" else f" [{family}]")


def render_table(data: dict, mode: str | None = None) -> str:
    """The compact table of a deployment's rows (of one server mode when given)."""
    rows = []
    for r in data["rows"]:
        if mode is not None and r["server_mode"] != mode:
            continue
        where = f"{r['server_mode']} / {r['target']}"
        if not r["measured"]:
            rows.append([r["benchmark"], where, r["concurrency"], NOT_MEASURED, "", "", "", "", r["correctness"]])
            continue
        rows.append(
            [
                _variant(r),
                where,
                r.get("concurrency"),
                number(r.get("items_per_second")),
                number(r.get("perf_latency_p50")),
                number(r.get("perf_latency_p99")),
                _bytes(r),
                _served(r),
                r["correctness"] + (f" ({r['errors']} errors under load)" if r.get("errors") else ""),
            ]
        )
    return table(rows, COLUMNS)


def _caption(data: dict, mode: str) -> str:
    """Which run(s) a mode's table comes from: machine, server, gate, pinning, dates."""
    measured = [r for r in data["rows"] if r["measured"] and r["server_mode"] == mode]
    if not measured:
        return f"`{mode}`: no run recorded yet (`make bench DEPLOYMENT={data['name']} MODE={mode}`)"
    runs = sorted({run_label(r) for r in measured}, key=str)
    parts = []
    for cpu, cores, os_name, _, version, gate in runs:
        behind = {True: ", behind the front gate", False: ", no front gate"}.get(gate, "")
        parts.append(f"{cpu}, {cores} cores, {os_name}; tritonserver {version or 'unknown version'}{behind}")
    pinned = sorted({pinning_label(r) for r in measured} - {""})
    return (
        f"`{mode}` server mode, measured {dates(measured)}: "
        + "; ".join(parts)
        + (f"; pinned: {', '.join(pinned)}" if pinned else "")
    )


def render_container_cost(rows: list[dict], history: list[dict] | None = None) -> list[str]:
    """A short table: what the container costs, as docker / local items/s of the same variant and c."""
    pairs = container_cost(rows, history)
    if not pairs:
        return []
    rows = [
        [
            p["benchmark"],
            p["target"],
            p["concurrency"],
            number(p["local"]),
            number(p["docker"]),
            f"{p['ratio']:.2f}",
            f"{p['hours_apart']:.1f}",
        ]
        for p in pairs
    ]
    return captioned(
        "Container cost (docker / local items/s of the same variant, target and c; a ratio near 1 means the "
        "container costs nothing measurable; the local record is the one of the same cell taken closest in "
        f"time, within {MAX_HOURS_APART} h (records farther apart are not paired); `h apart` how far apart the two were taken: 0.0-0.1 means one run, the modes alternating per "
        "deployment):",
        rows,
        "variant | target | c | local items/s | docker items/s | docker / local | h apart",
    )


def _preamble(source: str, headlines: list[str], generators: set[str], intro: list[str]) -> list[str]:
    """The page's title, the headline screen and the introduction to the tables."""
    return [
        "# Results",
        "",
        f"Generated by `make matrix` from `{source}`; `make bench matrix` measures and regenerates everything. "
        f'Nothing is typed in: what no run measured says "{NOT_MEASURED}" and the command that measures it.',
        "",
        *headlines,
        "## Tables",
        "",
        "Per deployment one table per server mode (`local`: the pip tritonserver; `docker`: the same tritonserver "
        "in the image `make image` builds, or the NGC / Ascend image), the latest record of each cell. `c` "
        "requests in flight; `p50`/`p99` client-side latency; `bytes/req` request / response body; `of ceiling` "
        "items/s as a share of the in-process ceiling where the scenario defines one; `correctness` the latest "
        "pytest outcome of the checks naming the row's model on that server. The other columns (infer/s, "
        "Triton's queue and compute time, generator, pinning, load) are in [results.json](results.json) and "
        "[results.csv](results.csv). How to read these numbers: [tuning.md](tuning.md).",
        "",
        "Load generators: harness-asyncio (tritonclient asyncio, `python -m harness bench`)"
        + "".join(f"; a variant marked `[{name}]` was measured by {name}" for name in sorted(generators))
        + ".",
        "",
        *(line for paragraph in intro for line in (paragraph, "")),
    ]


def _tables(data: dict, deployments) -> list[str]:
    """A deployment's table per server mode, with the ceiling footnote and the freshness note."""
    lines = []
    above = False
    for mode in dict.fromkeys(r["server_mode"] for r in data["rows"]):
        lines += [_caption(data, mode), "", render_table(data, mode), ""]
        above = above or any(
            r["measured"] and r["server_mode"] == mode and _served(r) == "> ceiling" for r in data["rows"]
        )
    if above:
        lines += [ABOVE_CEILING, ""]
    if deployments is not None:
        note = freshness_note([r for r in data["rows"] if r["measured"]], deployments)
        if note:
            lines += [note, ""]
    return lines


def _notes(name: str, data: dict) -> list[str]:
    """A deployment's bullets: what each variant runs, the correctness per server, the other records."""
    lines = [
        f"- `{benchmark}`: {info['variant'] or info['model']}; backend "
        + "; ".join(f"`{m}` {b}" for m, b in info["backends"].items())
        for benchmark, info in data["variants"].items()
    ]
    for where, checks in sorted(data["correctness"].items()):
        passed = sum(o == "passed" for o in checks.values())
        lines.append(
            f"- correctness on {where}: {passed}/{len(checks)} checks passed "
            f"(pytest, {data['correctness_time'].get(where, '')[:16].replace('T', ' ')} UTC)"
        )
    if not data["correctness"]:
        lines.append(
            f"- correctness: no pytest outcome recorded (`.venv/bin/pytest harness/ -k {name} "
            "-p harness.testing.outcomes`)"
        )
    if data["extra"]:
        lines.append(
            f"- {len(data['extra'])} other records (other concurrencies or generators) are in "
            "results.json / results.csv only"
        )
    return lines


def render_markdown(
    matrix: dict,
    source: str,
    headlines: list[str] | None = None,
    deployments=None,
    intro: list[str] = (),
) -> str:
    """``intro``: paragraphs after the tables' introduction (from installed sections)."""
    generators = {generator_family(r) for data in matrix.values() for r in data["rows"] if r["measured"]}
    lines = _preamble(source, headlines or [], generators - {"harness-asyncio"}, list(intro))
    for name, data in matrix.items():
        data = {**data, "name": name}
        lines += [f"## {name}", "", data["summary"], "", *_tables(data, deployments), *_notes(name, data)]
        lines += render_container_cost(data["rows"], data.get("history"))
        lines += render_paired_ratios(data.get("processing_pairs", []))
        lines += render_processing_ratios(data["rows"], data.get("model_only", {}))
        plots = [p for p in PLOT_KINDS if data.get("plots", {}).get(p)]
        if plots:
            lines.append("")
            lines += [f"![{name} {p}](plots/{name}-{p}.png)" for p in plots]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
