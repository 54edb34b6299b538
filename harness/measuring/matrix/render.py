"""The matrix as markdown: the results table of each deployment with its footnotes and
container cost (``docs/results.md``), and the network-bound table (``docs/results-network.md``)."""

from __future__ import annotations

from tabulate import tabulate

from harness.measuring.matrix.cells import (
    ceiling,
    compute_ms,
    generator_family,
    network_label,
    network_records,
    pinning_label,
    run_label,
)
from harness.measuring.matrix.container_cost import container_cost
from harness.measuring.matrix.plots import PLOT_KINDS
from harness.measuring.matrix.processing_ratio import render_paired_ratios, render_processing_ratios
from harness.measuring.matrix.rows import NOT_MEASURED

COLUMNS = [
    "variant",
    "server / target",
    "c",
    "infer/s",
    "items/s",
    "p50 ms",
    "p99 ms",
    "sent B/req",
    "recv B/req",
    "queue ms",
    "compute ms",
    "served / ceiling",
    "correctness",
    "generator",
    "run",
]


def _fmt(value, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and value != value:  # NaN
        return "–"
    if isinstance(value, int) or (isinstance(value, float) and digits == 0):
        return f"{int(round(value)):,}"
    return f"{value:,.{digits}f}"


def table_blocks(markdown: str) -> dict[str, list[tuple[str, str]]]:
    """``{deployment: [(variant, "mode / target"), ...]}`` read back from a results.md (layout checks)."""
    blocks: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in markdown.splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            blocks[current] = []
        elif current and line.startswith("|") and not line.startswith("|--"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if cells[:2] != ["variant", "server / target"] and (cells[0], cells[1]) not in blocks[current]:
                blocks[current].append((cells[0], cells[1]))
    return blocks


def _run_letter(index: int) -> str:
    return chr(ord("A") + index) if index < 26 else f"R{index}"


def _served(record: dict) -> str:
    """Items/s as a share of the record's ceiling: ``"50% of 160"``, ``"–"`` without a ceiling."""
    limit = ceiling(record)
    if not limit:
        return "–"
    return f"{record['items_per_second'] / limit:.0%} of {_fmt(limit, 0 if limit >= 10 else 1)}"


def latency_bytes_server_cells(r: dict) -> list[str]:
    """p50 ms, p99 ms, sent B/req, received B/req, queue ms, compute ms of a record, formatted."""
    return [
        _fmt(r.get("perf_latency_p50")),
        _fmt(r.get("perf_latency_p99")),
        _fmt(r.get("bytes_sent_per_request"), 0),
        _fmt(r.get("bytes_received_per_request"), 0),
        _fmt(r.get("perf_server_queue"), 2),
        _fmt(compute_ms(r), 2),
    ]


def render_table(data: dict) -> str:
    runs = {run: _run_letter(i) for i, run in enumerate(data["runs"])}
    table = []
    for r in data["rows"]:
        where = f"{r['server_mode']} / {r['target']}"
        if not r["measured"]:
            table.append(
                [r["benchmark"], where, r["concurrency"], NOT_MEASURED] + [""] * 8 + [r["correctness"], "", ""]
            )
            continue
        table.append(
            [
                r["benchmark"],
                where,
                r.get("concurrency"),
                _fmt(r.get("perf_throughput")),
                _fmt(r.get("items_per_second")),
                *latency_bytes_server_cells(r),
                _served(r),
                r["correctness"] + (f" ({r['errors']} errors under load)" if r.get("errors") else ""),
                generator_family(r) + _pinned(r),
                runs.get(run_label(r), "?"),
            ]
        )
    return tabulate(table, headers=COLUMNS, tablefmt="github", disable_numparse=True)


def _pinned(record: dict) -> str:
    """`` (pinned: server cpus 1, generator cpus 0)`` when the generator and server ran on their own cores."""
    pinning = pinning_label(record)
    return f" (pinned: {pinning})" if pinning else ""


def render_container_cost(rows: list[dict], history: list[dict] | None = None) -> list[str]:
    """A short table: what the container costs, as docker / local items/s of the same variant and c."""
    pairs = container_cost(rows, history)
    if not pairs:
        return []
    table = [
        [
            p["benchmark"],
            p["target"],
            p["concurrency"],
            _fmt(p["local"]),
            _fmt(p["docker"]),
            f"{p['ratio']:.2f}",
            f"{p['hours_apart']:.1f}",
        ]
        for p in pairs
    ]
    return [
        "",
        "Container cost (docker / local items/s of the same variant, target and c; a ratio near 1 means the "
        "container costs nothing measurable; the local record is the one of the same cell taken closest in "
        "time, within 0.5 h (records farther apart are not paired); `h apart` how far apart the two were taken: 0.0-0.1 means one run, the modes alternating per "
        "deployment):",
        "",
        tabulate(
            table,
            headers=["variant", "target", "c", "local items/s", "docker items/s", "docker / local", "h apart"],
            tablefmt="github",
            disable_numparse=True,
        ),
        "",
    ]


def render_markdown(matrix: dict, perf_analyzer_note: str, source: str) -> str:
    lines = [
        "# Results matrix",
        "",
        "Generated by `make matrix` (`python -m harness matrix`) from the benchmark records in "
        f"`{source}`; regenerate everything with `make bench matrix BENCH_DURATION=2`. "
        "Nothing here is typed in by hand: a cell no run has measured says "
        f'"{NOT_MEASURED}". The latest record of each cell wins.',
        "",
        "Columns: `variant` the benchmark scenario of the deployment's manifest (described under the "
        "table, with the backend that serves it); `server / target` the server mode (`local`: the pip "
        "tritonserver; `docker`: the same tritonserver in a container: for cpu the image `make image` builds "
        "here (`images/cpu/`), for gpu / npu the NGC / Ascend images) and the hardware target; "
        "`c` concurrency (requests in flight); `infer/s` requests per second; `items/s` "
        "items (sentences, images) per second; `p50`/`p99` client-side latency; `sent`/`recv B/req` "
        "bytes per request on the wire (request and response bodies); `queue ms` / `compute ms` "
        "Triton's own per-request queue and compute (input + infer + output) time over the window, "
        "from its statistics API; `served / ceiling` items/s as a share of the in-process ceiling "
        "when the scenario defines one; `correctness` the latest pytest outcome of the deployment's "
        "checks (those naming the row's model when there are such) on that server / target; "
        "`generator` the load generator that produced the numbers, and the cores server and generator were pinned to when they were; `run` the machine and server below "
        "the table. How to read these numbers: [tuning.md](tuning.md).",
        "",
        f"Load generators: harness-asyncio (tritonclient asyncio, `python -m harness bench`). {perf_analyzer_note}",
        "",
        "Network-bound runs (`make bench-network`): [results-network.md](results-network.md).",
        "",
    ]
    for name, data in matrix.items():
        lines += [f"## {name}", "", data["summary"], ""]
        lines += [render_table(data), ""]
        if data["runs"]:
            for i, (cpu, cores, os_name, mode, version, gate) in enumerate(data["runs"]):
                behind = {True: ", behind the front gate", False: ", no front gate"}.get(gate, "")
                lines.append(
                    f"- run {_run_letter(i)}: {cpu}, {cores} cores, {os_name}; tritonserver "
                    f"{version or 'unknown version'}, `{mode}` server mode{behind}"
                )
            first, last = data["dates"]
            lines.append(f"- measured {first}" + (f" to {last}" if last != first else ""))
        else:
            lines.append("- no run recorded yet: `make bench DEPLOYMENT=" + name + "`")
        for benchmark, info in data["variants"].items():
            lines.append(
                f"- `{benchmark}`: {info['variant'] or info['model']}; backend "
                + "; ".join(f"`{m}` {b}" for m, b in info["backends"].items())
            )
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
        lines += render_container_cost(data["rows"], data.get("history"))
        lines += render_paired_ratios(data.get("processing_pairs", []))
        lines += render_processing_ratios(data["rows"], data.get("model_only", {}))
        plots = [p for p in PLOT_KINDS if data.get("plots", {}).get(p)]
        if plots:
            lines.append("")
            lines += [f"![{name} {p}](plots/{name}-{p}.png)" for p in plots]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def render_network(records: list[dict]) -> str | None:
    network = network_records(records)
    if not network:
        return None
    network.sort(
        key=lambda r: (r.get("deployment"), r.get("benchmark"), network_label(r), int(r.get("concurrency", 0)))
    )
    table = [
        [
            r.get("deployment"),
            r.get("variant") or r.get("benchmark"),
            network_label(r),
            f"{r.get('server_mode')} / {r.get('target')}",
            r.get("concurrency"),
            _fmt(r.get("perf_throughput")),
            _fmt(r.get("link_ceiling_infer_per_s")),
            *latency_bytes_server_cells(r),
            str(r.get("timestamp", ""))[:10],
        ]
        for r in network
    ]
    headers = [
        "deployment",
        "variant",
        "link",
        "server / target",
        "c",
        "infer/s",
        "link ceiling infer/s",
        "p50 ms",
        "p99 ms",
        "sent B/req",
        "recv B/req",
        "queue ms",
        "compute ms",
        "date",
    ]
    machines = sorted(
        {
            f"{(r.get('machine') or {}).get('cpu_model')}, {(r.get('machine') or {}).get('cpu_cores')} cores"
            for r in network
        }
    )
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
            tabulate(table, headers=headers, tablefmt="github", disable_numparse=True),
            "",
            "Machines: " + "; ".join(machines),
            "",
        ]
    )
