"""Results matrix: ``results/records.jsonl`` -> ``docs/results.md`` + JSON + CSV + PNG plots.

    python -m harness.measuring.matrix                 # what `make matrix` runs
    python -m harness.measuring.matrix --records results/records.jsonl --docs docs

Every number comes from a record written by a benchmark run (``make bench``, the benchmark
tests, ``python -m harness.measuring.perf_analyzer``, ``python -m harness.measuring.netem``); nothing is typed in
by hand. For each deployment the table has one block of rows per benchmark scenario x
target x server mode that its manifest declares (``targets``): cells that were never
measured on any machine stay in the table as "not measured". The latest record of each cell
wins. Records of network-bound runs (``make bench-network``) go to
``docs/results-network.md`` instead, so ``make bench matrix`` always gives the same layout.

Correctness comes from the latest pytest outcomes recorded by the small pytest plugin in
``harness.testing.outcomes`` (``pytest -p harness.testing.outcomes``, or wired in by conftest), or from a JUnit XML in
the results folder (``pytest --junitxml=results/junit.xml``).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

from tabulate import tabulate

from harness import PROJECT_ROOT
from harness.measuring.records import OUTCOMES_FILE, read_records, records_path

DOCS = PROJECT_ROOT / "docs"
#: Server modes that can serve each target (local = the pip tritonserver; docker = NGC / npu_ge images).
MODES_FOR_TARGET = {"cpu": ("local", "docker"), "gpu": ("local", "docker"), "npu": ("docker",)}
NOT_MEASURED = "not measured"

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
CSV_FIELDS = [
    "deployment",
    "benchmark",
    "variant",
    "model",
    "target",
    "server_mode",
    "server_version",
    "gate",
    "protocol",
    "generator",
    "network",
    "concurrency",
    "perf_throughput",
    "items_per_second",
    "perf_latency_p50",
    "perf_latency_p95",
    "perf_latency_p99",
    "bytes_sent_per_request",
    "bytes_received_per_request",
    "perf_server_queue",
    "server_compute_ms",
    "server_avg_batch_size",
    "ceiling_items_per_second",
    "errors",
    "requests",
    "duration_s",
    "cpu_model",
    "cpu_cores",
    "os",
    "timestamp",
    "in_matrix",
]


# --- records -------------------------------------------------------------------------------


def generator_family(record: dict) -> str:
    """``perf_analyzer`` or ``harness-asyncio`` (the default load generator)."""
    generator = str(record.get("generator") or "harness-asyncio")
    return "perf_analyzer" if generator.startswith("perf_analyzer") else generator.split(" ", 1)[0]


def network_label(record: dict) -> str | None:
    """``"100mbit"`` / ``"100mbit, +20 ms RTT"`` for a network-bound record, None otherwise."""
    network = record.get("network")
    if not network:
        return None
    label = str(network.get("rate") or "unlimited")
    if network.get("rtt_ms"):
        label += f", +{network['rtt_ms']:g} ms RTT"
    return label


def cell_key(record: dict) -> tuple:
    machine = record.get("machine") or {}
    return (
        record.get("deployment"),
        record.get("benchmark"),
        record.get("target", "cpu"),
        record.get("server_mode", "local"),
        int(record.get("concurrency") or 0),
        generator_family(record),
        network_label(record),
        machine.get("cpu_model"),
        machine.get("cpu_cores"),
    )


def latest_records(records: list[dict]) -> list[dict]:
    """The latest record of each cell (deployment, benchmark, target, mode, concurrency, generator,
    network, machine); in first-seen order."""
    latest: dict[tuple, dict] = {}
    for record in records:
        key = cell_key(record)
        if key not in latest or str(record.get("timestamp", "")) >= str(latest[key].get("timestamp", "")):
            latest[key] = record
    return list(latest.values())


def ceiling(record: dict) -> float | None:
    """The in-process / served ceiling (items/s) a record carries, if any."""
    value = record.get("ceiling_items_per_second")
    if value is None:
        value = (record.get("notes") or {}).get("ceiling_items_per_second")
    return float(value) if value is not None else None


def compute_ms(record: dict) -> float | None:
    parts = [
        record.get(k) for k in ("perf_server_compute_input", "perf_server_compute_infer", "perf_server_compute_output")
    ]
    if all(p is None for p in parts):
        return None
    return round(sum(p or 0.0 for p in parts), 3)


# --- correctness (pytest outcomes) ---------------------------------------------------------


def read_outcomes(folder: Path) -> list[dict]:
    """Check outcomes: the plugin's JSON lines, plus any ``junit*.xml`` in the results folder."""
    rows = []
    path = folder / OUTCOMES_FILE
    if path.exists():
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for xml_path in sorted(folder.glob("junit*.xml")):
        try:
            root = ET.parse(xml_path).getroot()
        except ET.ParseError:
            continue
        stamp = dt.datetime.fromtimestamp(xml_path.stat().st_mtime, dt.UTC).isoformat(timespec="seconds")
        for suite in root.iter("testsuite"):
            stamp = suite.get("timestamp") or stamp
            for case in suite.iter("testcase"):
                name = case.get("name", "")
                if not name.startswith("test_check["):
                    continue
                outcome = "passed"
                if case.find("failure") is not None or case.find("error") is not None:
                    outcome = "failed"
                elif case.find("skipped") is not None:
                    outcome = "skipped"
                rows.append(
                    {
                        "timestamp": stamp,
                        "nodeid": name,
                        "param": name.split("[", 1)[1].rstrip("]"),
                        "outcome": outcome,
                        "target": "cpu",
                        "server_mode": "local",
                    }
                )
    return rows


def correctness_by_deployment(outcomes: list[dict], names: list[str]) -> dict[str, dict]:
    """``{deployment: {(target, mode): {check: latest outcome row}}}``."""
    found: dict[str, dict] = defaultdict(lambda: defaultdict(dict))
    for row in sorted(outcomes, key=lambda r: str(r.get("timestamp", ""))):
        for name in sorted(names, key=len, reverse=True):
            if row["param"].startswith(name + "-"):
                check = row["param"][len(name) + 1 :]
                found[name][(row.get("target", "cpu"), row.get("server_mode", "local"))][check] = row
                break
    return found


def summarize_checks(checks: dict[str, dict]) -> str:
    if not checks:
        return "not run"
    failed = sorted(c for c, r in checks.items() if r["outcome"] == "failed")
    passed = sum(r["outcome"] == "passed" for r in checks.values())
    ran = passed + len(failed)
    if not ran:
        return "skipped"
    if failed:
        return f"FAIL {len(failed)}/{ran}: " + ", ".join(failed)
    return f"pass {passed}/{ran}"


def row_correctness(checks: dict[str, dict], model: str | None, models: set[str] | None = None) -> str:
    """The checks named after the row's model (``<model>_...``, the longest model name that
    prefixes a check owns it) when there are such checks, else all of the deployment's."""
    if model:
        names = set(models or ()) | {model}
        owner = {c: max((m for m in names if c == m or c.startswith(m + "_")), key=len, default=None) for c in checks}
        specific = {c: r for c, r in checks.items() if owner[c] == model}
        if specific:
            return summarize_checks(specific)
    return summarize_checks(checks)


# --- the matrix ----------------------------------------------------------------------------


def _fmt(value, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and value != value:  # NaN
        return "–"
    if isinstance(value, int) or (isinstance(value, float) and digits == 0):
        return f"{int(round(value)):,}"
    return f"{value:,.{digits}f}"


def _run_label(record: dict) -> tuple:
    machine = record.get("machine") or {}
    return (
        machine.get("cpu_model", "unknown CPU"),
        machine.get("cpu_cores"),
        machine.get("os", ""),
        record.get("server_mode"),
        record.get("server_version"),
        record.get("gate"),
    )


def _deployments(root: Path | None):
    from harness.deployments import discover

    return discover(root)


def expected_grid(deployment) -> list[tuple[str, str, str]]:
    """``(benchmark id, target, server mode)`` blocks the manifest declares, in table order."""
    grid = []
    for benchmark in deployment.benchmarks:
        for target in deployment.targets:
            if benchmark.targets and target not in benchmark.targets:
                continue
            for mode in MODES_FOR_TARGET.get(target, ("local", "docker")):
                grid.append((benchmark.id, target, mode))
    return grid


def build(records: list[dict], deployments, outcomes: list[dict]) -> dict:
    """The matrix as data: per deployment, the rows in table order, the runs and correctness."""
    latest = [r for r in latest_records(records) if network_label(r) is None]
    by_deployment: dict[str, list[dict]] = defaultdict(list)
    for record in latest:
        by_deployment[record.get("deployment")].append(record)
    correctness = correctness_by_deployment(outcomes, [d.name for d in deployments])
    result = {}
    for deployment in deployments:
        mine = by_deployment.get(deployment.name, [])
        benchmarks = {b.id: b for b in deployment.benchmarks}
        models = {r.get("model") for r in mine if r.get("model")} | set(deployment.entry_models)
        grid = expected_grid(deployment)
        # a server mode the manifest does not imply (external) gets its block when it has records
        for r in mine:
            key = (r.get("benchmark"), r.get("target"), r.get("server_mode"))
            if key[0] in benchmarks and key not in grid:
                grid.append(key)
        grid.sort(key=lambda k: list(benchmarks).index(k[0]))
        rows, used = [], set()
        for benchmark_id, target, mode in grid:
            benchmark = benchmarks[benchmark_id]
            cell = [
                r
                for r in mine
                if r.get("benchmark") == benchmark_id and r.get("target") == target and r.get("server_mode") == mode
            ]
            checks = correctness.get(deployment.name, {}).get((target, mode), {})
            if not cell:
                rows.append(
                    {
                        "benchmark": benchmark_id,
                        "target": target,
                        "server_mode": mode,
                        "concurrency": ", ".join(map(str, benchmark.concurrency)),
                        "measured": False,
                        "correctness": summarize_checks(checks),
                    }
                )
                continue
            for generator in sorted({generator_family(r) for r in cell} | {"harness-asyncio"}):
                at = [r for r in cell if generator_family(r) == generator]
                if not at and generator != "harness-asyncio":
                    continue
                for level in benchmark.concurrency:
                    found = sorted(
                        (r for r in at if int(r.get("concurrency") or 0) == level),
                        key=lambda r: str(r.get("timestamp", "")),
                    )
                    if found:
                        record = found[-1]
                        used.add(id(record))
                        rows.append(
                            {
                                **record,
                                "measured": True,
                                "correctness": row_correctness(checks, record.get("model"), models),
                            }
                        )
                    else:
                        rows.append(
                            {
                                "benchmark": benchmark_id,
                                "target": target,
                                "server_mode": mode,
                                "concurrency": level,
                                "measured": False,
                                "correctness": summarize_checks(checks),
                            }
                        )
        extra = [r for r in mine if id(r) not in used]
        runs = sorted({_run_label(r) for r in rows if r["measured"]}, key=str)
        dates = sorted(str(r.get("timestamp", ""))[:10] for r in rows if r["measured"])
        variants: dict[str, dict] = {}
        for r in sorted(mine, key=lambda r: str(r.get("timestamp", ""))):
            variants[r.get("benchmark")] = {
                "variant": r.get("variant"),
                "model": r.get("model"),
                "backends": r.get("backend_implementation") or {},
            }
        result[deployment.name] = {
            "summary": deployment.summary,
            "targets": deployment.targets,
            "rows": rows,
            "extra": extra,
            "history": [r for r in records if r.get("deployment") == deployment.name and network_label(r) is None],
            "runs": runs,
            "dates": (dates[0], dates[-1]) if dates else None,
            "variants": {b: variants[b] for b in benchmarks if b in variants},
            "correctness": {
                f"{t}/{m}": {c: r["outcome"] for c, r in checks.items()}
                for (t, m), checks in correctness.get(deployment.name, {}).items()
            },
            "correctness_time": {
                f"{t}/{m}": max(str(r.get("timestamp", "")) for r in checks.values())
                for (t, m), checks in correctness.get(deployment.name, {}).items()
                if checks
            },
        }
    return result


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
        limit = ceiling(r)
        served = (
            f"{r['items_per_second'] / limit:.0%} of {limit:,.0f}"
            if limit and limit >= 10
            else (f"{r['items_per_second'] / limit:.0%} of {limit:.1f}" if limit else "–")
        )
        queue, compute = r.get("perf_server_queue"), compute_ms(r)
        table.append(
            [
                r["benchmark"],
                where,
                r.get("concurrency"),
                _fmt(r.get("perf_throughput")),
                _fmt(r.get("items_per_second")),
                _fmt(r.get("perf_latency_p50")),
                _fmt(r.get("perf_latency_p99")),
                _fmt(r.get("bytes_sent_per_request"), 0),
                _fmt(r.get("bytes_received_per_request"), 0),
                _fmt(queue, 2),
                _fmt(compute, 2),
                served,
                r["correctness"] + (f" ({r['errors']} errors under load)" if r.get("errors") else ""),
                generator_family(r),
                runs.get(_run_label(r), "?"),
            ]
        )
    return tabulate(table, headers=COLUMNS, tablefmt="github", disable_numparse=True)


def container_cost(rows: list[dict], history: list[dict] | None = None) -> list[dict]:
    """docker / local items/s for each docker row of the table: against the local record of the same
    variant, target, c and generator taken closest in time (from ``history``, all records of the
    deployment; default the table's own rows), so that a pair comes from one run where there is one."""
    measured = [r for r in rows if r["measured"]]
    candidates = [r for r in (history if history is not None else measured) if r.get("server_mode") == "local"]
    pairs = []
    for docker in measured:
        if docker["server_mode"] != "docker":
            continue
        key = (docker["benchmark"], docker["target"], int(docker["concurrency"]), generator_family(docker))
        same = [
            r
            for r in candidates
            if (r.get("benchmark"), r.get("target"), int(r.get("concurrency") or 0), generator_family(r)) == key
            and r.get("items_per_second")
        ]
        if not same:
            continue
        local = min(same, key=lambda r: abs(_hours(r) - _hours(docker)))
        pairs.append(
            {
                "benchmark": key[0],
                "target": key[1],
                "concurrency": key[2],
                "generator": key[3],
                "local": local["items_per_second"],
                "docker": docker["items_per_second"],
                "ratio": docker["items_per_second"] / local["items_per_second"],
                "hours_apart": abs(_hours(docker) - _hours(local)),
            }
        )
    return pairs


def _hours(record: dict) -> float:
    stamp = str(record.get("timestamp", ""))
    try:
        return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() / 3600
    except ValueError:
        return float("nan")


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
        "time; `h apart` how far apart the two were taken: 0.0-0.1 means one run, the modes alternating per "
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
        "Generated by `make matrix` (`python -m harness.measuring.matrix`) from the benchmark records in "
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
        "`generator` the load generator that produced the numbers; `run` the machine and server below "
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
        plots = [p for p in ("throughput", "latency", "bytes") if data.get("plots", {}).get(p)]
        if plots:
            lines.append("")
            lines += [f"![{name} {p}](plots/{name}-{p}.png)" for p in plots]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def render_network(records: list[dict]) -> str | None:
    network = [r for r in latest_records(records) if network_label(r)]
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
            _fmt(r.get("perf_latency_p50")),
            _fmt(r.get("perf_latency_p99")),
            _fmt(r.get("bytes_sent_per_request"), 0),
            _fmt(r.get("bytes_received_per_request"), 0),
            _fmt(r.get("perf_server_queue"), 2),
            _fmt(compute_ms(r), 2),
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
            "Generated by `make matrix` from the records of `make bench-network` (`python -m harness.measuring.netem`): "
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


# --- plots ---------------------------------------------------------------------------------


def plot(name: str, rows: list[dict], folder: Path) -> dict[str, Path]:
    """Throughput vs concurrency, latency vs throughput, bytes per request; PNG paths by kind."""
    measured = [r for r in rows if r["measured"]]
    if not measured:
        return {}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    series: dict[str, list[dict]] = defaultdict(list)
    for r in measured:
        series[f"{r['benchmark']} [{r['server_mode']}/{r['target']}, {generator_family(r)}]"].append(r)
    for points in series.values():
        points.sort(key=lambda r: int(r["concurrency"]))
    written = {}
    metadata = {"Software": None}

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, points in series.items():
        ax.plot([p["concurrency"] for p in points], [p["perf_throughput"] for p in points], marker="o", label=label)
    ax.set(xlabel="concurrency (requests in flight)", ylabel="infer/s", title=f"{name}: throughput vs concurrency")
    ax.set_xscale("log", base=2)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    written["throughput"] = folder / f"{name}-throughput.png"
    fig.tight_layout()
    fig.savefig(written["throughput"], dpi=100, metadata=metadata)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, points in series.items():
        (line,) = ax.plot(
            [p["perf_throughput"] for p in points],
            [p["perf_latency_p50"] for p in points],
            marker="o",
            label=f"{label} p50",
        )
        ax.plot(
            [p["perf_throughput"] for p in points],
            [p["perf_latency_p99"] for p in points],
            marker="x",
            linestyle="--",
            color=line.get_color(),
            label=f"{label} p99",
        )
    ax.set(xlabel="infer/s", ylabel="latency (ms)", title=f"{name}: latency vs throughput")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    written["latency"] = folder / f"{name}-latency.png"
    fig.tight_layout()
    fig.savefig(written["latency"], dpi=100, metadata=metadata)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4.5))
    labels = list(series)
    sent = [series[k][-1].get("bytes_sent_per_request") or 0 for k in labels]
    received = [series[k][-1].get("bytes_received_per_request") or 0 for k in labels]
    positions = range(len(labels))
    ax.barh([p - 0.2 for p in positions], sent, height=0.4, label="sent")
    ax.barh([p + 0.2 for p in positions], received, height=0.4, label="received")
    ax.set_yticks(list(positions), [k.split(" [")[0] for k in labels], fontsize=7)
    ax.set_xscale("log")
    ax.set(xlabel="bytes per request (log)", title=f"{name}: bytes on the wire per request")
    ax.legend()
    written["bytes"] = folder / f"{name}-bytes.png"
    fig.tight_layout()
    fig.savefig(written["bytes"], dpi=100, metadata=metadata)
    plt.close(fig)
    return written


# --- outputs -------------------------------------------------------------------------------


def _json_row(r: dict, in_matrix: bool) -> dict:
    machine = r.get("machine") or {}
    return {
        **{k: v for k, v in r.items() if k != "measured"},
        "generator_family": generator_family(r),
        "network": r.get("network"),
        "server_compute_ms": compute_ms(r),
        "ceiling_items_per_second": ceiling(r),
        "cpu_model": machine.get("cpu_model"),
        "cpu_cores": machine.get("cpu_cores"),
        "os": machine.get("os"),
        "in_matrix": in_matrix,
        "measured": r.get("measured", True),
    }


def generate(
    records_file: Path | None = None,
    docs: Path = DOCS,
    deployments_root: Path | None = None,
    outcomes_folder: Path | None = None,
    perf_analyzer_note: str | None = None,
) -> dict[str, Path]:
    """Write results.md, results.json, results.csv and plots; returns the paths written."""
    records_file = Path(records_file or records_path())
    records = read_records(records_file)
    deployments = _deployments(deployments_root)
    outcomes = read_outcomes(Path(outcomes_folder or records_file.parent))
    if perf_analyzer_note is None:
        from harness.measuring.perf_analyzer import availability

        ok, reason = availability()
        perf_analyzer_note = (
            "perf_analyzer: available on this machine (`python -m harness.measuring.perf_analyzer bench`)."
            if ok
            else f"perf_analyzer: not usable on this machine ({reason})."
        )
    matrix = build(records, deployments, outcomes)
    plots_dir = docs / "plots"
    if plots_dir.exists():
        for old in plots_dir.glob("*.png"):
            old.unlink()
    for name, data in matrix.items():
        data["plots"] = plot(name, data["rows"], plots_dir)
    try:
        source = str(records_file.resolve().relative_to(PROJECT_ROOT))
    except ValueError:
        source = str(records_file)
    docs.mkdir(parents=True, exist_ok=True)
    written = {"markdown": docs / "results.md", "json": docs / "results.json", "csv": docs / "results.csv"}
    # ratio section: side-by-side runs (make bench-peers), ratios taken round by round
    from harness.measuring.peers import ratios as side_by_side

    ratio_lines = side_by_side.render(records)
    written["markdown"].write_text(
        render_markdown(matrix, perf_analyzer_note, source) + ("\n".join(ratio_lines) + "\n" if ratio_lines else "")
    )
    payload = {
        "source": source,
        "perf_analyzer": perf_analyzer_note,
        "side_by_side": {
            "records": side_by_side.latest_run(records),
            "ratios": side_by_side.ratios(side_by_side.latest_run(records)),
        },
        "not_measured": NOT_MEASURED,
        "deployments": {
            name: {
                "summary": data["summary"],
                "targets": data["targets"],
                "correctness": data["correctness"],
                "rows": [_json_row(r, True) for r in data["rows"]],
                "other_records": [_json_row(r, False) for r in data["extra"]],
                "container_cost": container_cost(data["rows"], data["history"]),
                "plots": {k: str(p.relative_to(docs)) for k, p in data["plots"].items()},
            }
            for name, data in matrix.items()
        },
        "network": [_json_row(r, False) for r in latest_records(records) if network_label(r)],
    }
    written["json"].write_text(json.dumps(payload, indent=1, default=str) + "\n")
    with written["csv"].open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        for name, data in matrix.items():
            for r in data["rows"]:
                row = _json_row(r, True)
                row["network"] = network_label(r) or ""
                writer.writerow(row)
            for r in data["extra"]:
                writer.writerow({**_json_row(r, False), "network": ""})
    network = render_network(records)
    if network:
        written["network"] = docs / "results-network.md"
        written["network"].write_text(network)
    for name, data in matrix.items():
        for kind, path in data["plots"].items():
            written[f"plot {name} {kind}"] = path
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.measuring.matrix", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=Path, default=None, help="records file (default results/records.jsonl)")
    parser.add_argument("--docs", type=Path, default=DOCS, help="where results.md/json/csv and plots/ go")
    parser.add_argument("--deployments", type=Path, default=None, help="deployments folder (default ./deployments)")
    args = parser.parse_args(argv)
    records_file = args.records or records_path()
    if not Path(records_file).exists():
        print(
            f"no records at {records_file}: every row will say '{NOT_MEASURED}' (run `make bench` first)",
            file=sys.stderr,
        )
    written = generate(records_file, args.docs, args.deployments)
    for kind, path in written.items():
        print(f"{kind:28} {os.path.relpath(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
