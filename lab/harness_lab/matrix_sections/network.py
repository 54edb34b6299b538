"""Network-bound runs (``make bench-network``: ``python -m harness_lab.netem``): their page,
``docs/results-network.md``, and the headline lesson ``network``: items/s and bytes per request of
each path the deployment measured, by link rate, at one concurrency; the entry model that takes the
compressed input is the benchmark whose manifest names a ``model_only`` path."""

from __future__ import annotations

from collections import defaultdict

from harness.measuring.matrix.cells import (
    cell_key,
    compute_ms,
    dates,
    freshness_note,
    generator_family,
    latest_records,
    stamp,
)
from harness.measuring.matrix.fmt import number, rate, ratio, size, table
from harness.measuring.matrix.headlines import machine
from harness.measuring.matrix.plots import bars, mark_legend
from harness.measuring.matrix.rows import NOT_MEASURED
from harness.measuring.matrix.sections import Lesson
from harness_lab.matrix_sections.shared import load

COMMAND = "make bench-network && make matrix"


def network_label(record: dict) -> str | None:
    """``"100mbit"`` / ``"100mbit, +20 ms RTT"`` / ``"loopback"`` (the namespace unshaped) for a
    network-bound record, None otherwise."""
    network = record.get("network")
    if not network:
        return None
    label = str(network.get("rate") or "loopback")
    if network.get("rtt_ms"):
        label += f", +{network['rtt_ms']:g} ms RTT"
    return label


def network_records(records: list[dict]) -> list[dict]:
    """The latest record of each network-bound cell (link rate and delay apart)."""
    shaped = [r for r in records if network_label(r)]
    return latest_records(shaped, key=lambda r: (*cell_key(r), network_label(r)))


def wire(record: dict) -> float:
    return float(record.get("bytes_sent_per_request") or 0) + float(record.get("bytes_received_per_request") or 0)


def _link_bits(record: dict) -> float:
    network = record.get("network") or {}
    return float(network.get("rate_bits_per_s") or float("inf"))


def _speed_run(record: dict) -> bool:
    """A record of a speed-run model (fast stand-in weights), as its workload's notes say."""
    return bool((record.get("notes") or {}).get("speed_run"))


def _cells(mine: list[dict]) -> tuple[dict, dict]:
    """``{(path, link): {concurrency: record}}`` and ``{link: bits/s}`` (loopback: the namespace unshaped)."""
    links = {network_label(r): _link_bits(r) for r in mine}
    cells: dict[tuple[str, str], dict[int, dict]] = defaultdict(dict)
    for r in mine:
        cells[(r["benchmark"], network_label(r))][int(r.get("concurrency") or 0)] = r
    return cells, links


def network_lesson(records: list[dict], model_only: dict[str, dict[str, str]]) -> dict:
    """Items/s of each path by link, at the lowest concurrency every (path, link) measured."""
    shaped = network_records(records)
    if not shaped:
        return {"measured": False, "command": COMMAND}
    deployment = max(shaped, key=stamp).get("deployment")
    mine = [r for r in shaped if r.get("deployment") == deployment and generator_family(r) == "harness-asyncio"]
    if any(_speed_run(r) for r in mine):  # the paths of a speed-run model: the link, not the CPU, bounds them
        mine = [r for r in mine if _speed_run(r)]
    paths = sorted({r["benchmark"] for r in mine})
    cells, links = _cells(mine)
    order = sorted(links, key=lambda name: -links[name])
    common = set.intersection(*(set(cells.get((p, link), {})) for p in paths for link in order))
    if not common:
        return {"measured": False, "command": COMMAND, "why": "no concurrency measured on every link"}
    concurrency = min(common)
    table = {p: {link: cells[(p, link)][concurrency] for link in order} for p in paths}
    entries = [p for p in paths if model_only.get(deployment, {}).get(p)]
    entry = entries[0] if entries else min(paths, key=lambda p: wire(table[p][order[-1]]))
    others = sorted((p for p in paths if p != entry), key=lambda p: wire(table[p][order[-1]]))
    used = [r for p in paths for r in table[p].values()]
    return {
        "measured": True,
        "deployment": deployment,
        "concurrency": concurrency,
        "links": order,
        "entry": entry,
        "paths": [entry, *others],
        "items_per_second": {p: {link: table[p][link]["items_per_second"] for link in order} for p in paths},
        "bytes_per_request": {p: wire(table[p][order[-1]]) for p in paths},
        "link_ceiling": {
            p: {link: table[p][link].get("link_ceiling_infer_per_s") for link in order if link != "loopback"}
            for p in paths
        },
        "speed_run": sorted({p for p in paths for r in table[p].values() if _speed_run(r)}),
        "when": dates(used),
        "machine": machine(used[0]),
        "load": load(used),
        "gate": sorted({str(r.get("gate")) for r in used}),
        "records": used,
        "command": COMMAND,
    }


def render_network_lesson(lesson: dict) -> list[str]:
    lines = ["### Send the compressed input, not a tensor", ""]
    if not lesson["measured"]:
        return lines + [f"{NOT_MEASURED}: `{lesson['command']}`", ""]
    slow = lesson["links"][-1]
    ips, size_of = lesson["items_per_second"], lesson["bytes_per_request"]
    entry = lesson["entry"]
    compared = ", ".join(
        f"{ratio(ips[entry][slow] / ips[p][slow])} `{p}` ({size(size_of[p])}/request, {rate(ips[p][slow])}/s)"
        for p in lesson["paths"][1:]
        if ips[p][slow]
    )
    others = " and ".join(
        f"{link} " + " / ".join(rate(ips[p][link]) for p in lesson["paths"]) for link in lesson["links"][:-1]
    )
    run = f"c={lesson['concurrency']}, {lesson['when']}, {lesson['machine']}, {lesson['load']}" + (
        f"; speed-run (seeded weights): {', '.join(lesson['speed_run'])}" if lesson["speed_run"] else ""
    )
    return lines + [
        f"At {slow}, `{entry}` ({size(size_of[entry])}/request) serves {rate(ips[entry][slow])} items/s: "
        f"{compared}. Items/s of the three paths on {others} ({lesson['deployment']}, {run}).",
        "",
        f"![items/s by link rate](plots/headline-network.png) Reproduce: `{lesson['command']}`",
        "",
    ]


def plot_network_lesson(network: dict, plt, save) -> None:
    fig, ax = plt.subplots(figsize=(8, 5))
    links = network["links"]
    label = {p: f"{p} ({size(network['bytes_per_request'][p])}/req)" for p in network["paths"]}
    series = {label[p]: [network["items_per_second"][p][k] for k in links] for p in network["paths"]}
    ceilings = {label[p]: [network["link_ceiling"][p].get(k) for k in links] for p in network["paths"]}
    bars(ax, links, series, ceilings, label_marks=True)
    ax.set(
        xlabel="link between client and server",
        ylabel="items/s" + (" (log)" if ax.get_yscale() == "log" else ""),
        title=f"{network['deployment']}: items/s of the same input sent three ways, by link rate\n"
        f"c={network['concurrency']}, {network['when']}, {network['machine']}",
    )
    ceiling = "link ceiling of the bar below it: rate / 8 / bytes per request"
    mark_legend(fig, ax, ceiling, fontsize=8, loc="lower center", ncol=2, frameon=False)
    save(fig, "network", rect=(0, 0.14, 1, 1))


def render_network(records: list[dict], deployments=None) -> str | None:
    """``docs/results-network.md``: the latest record of each network-bound cell (None when none)."""
    network = network_records(records)
    if not network:
        return None
    network.sort(
        key=lambda r: (r.get("deployment"), r.get("benchmark"), network_label(r), int(r.get("concurrency", 0)))
    )
    rows = [
        [
            r.get("deployment"),
            r.get("variant") or r.get("benchmark"),
            network_label(r),
            f"{r.get('server_mode')} / {r.get('target')}",
            r.get("concurrency"),
            number(r.get("perf_throughput")),
            number(r.get("link_ceiling_infer_per_s")),
            number(r.get("perf_latency_p50")),
            number(r.get("perf_latency_p99")),
            number(r.get("bytes_sent_per_request"), 0),
            number(r.get("bytes_received_per_request"), 0),
            number(r.get("perf_server_queue"), 2),
            number(compute_ms(r), 2),
            str(r.get("timestamp", ""))[:10],
        ]
        for r in network
    ]
    headers = (
        "deployment | variant | link | server / target | c | infer/s | link ceiling infer/s | p50 ms | p99 ms | "
        "sent B/req | recv B/req | queue ms | compute ms | date"
    )
    machines = sorted({machine(r) for r in network})
    return "\n".join(
        [
            "# Network-bound results",
            "",
            "Generated by `make matrix` from the records of `make bench-network` (`python -m harness bench-network`): "
            "server and load generator run inside a private network namespace whose loopback is shaped by "
            "`tc` (token bucket `tbf` for the rate, `netem` for the delay where the kernel has it). "
            "`link ceiling` = rate / 8 / (bytes sent + bytes received per request): the loopback carries "
            "both directions, so no request pattern can beat it. See [tuning.md](tuning.md) for how to read a "
            "network-bound row.",
            "",
            table(rows, headers),
            "",
            "Machines: " + "; ".join(machines),
            "",
            *([note, ""] if (note := freshness_note(network, deployments) if deployments is not None else "") else []),
        ]
    )


LESSON = Lesson(
    "network",
    lambda records, matrix: network_lesson(records, {name: data["model_only"] for name, data in matrix.items()}),
    render_network_lesson,
    plot_network_lesson,
)
