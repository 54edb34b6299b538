"""The first screen of ``docs/results.md``: each lesson as one sentence with its measured ratio,
one figure and the command that reproduces it, every number read from the records.

Three lessons, each found in the records rather than in a list of names:

- ``network``: the deployment with network-bound records (``make bench-network``): items/s and
  bytes per request of each path it measured, by link rate, at one concurrency; the entry model
  that takes the compressed input is the benchmark whose manifest names a ``model_only`` path.
- ``serving``: the latest side-by-side run (``make bench-peers``): items/s of every target it
  measured (served models and peers alike) at each concurrency and request size, the in-process
  ceiling of each; ratios are medians of per-round quotients, with their range over rounds.
- ``costs``: what server-side processing (pair runs, ``make bench-pairs``), the container (docker
  / local rows of one run) and the front gate (``make gate-cost``'s report) cost, each one ratio
  with its spread.

A lesson without records says "not measured" and the command that measures it.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

from harness.measuring.matrix.cells import dates, freshness_note, generator_family, network_records, stamp
from harness.measuring.matrix.container_cost import container_cost
from harness.measuring.matrix.fmt import rate, ratio, size, spread
from harness.measuring.matrix.rows import NOT_MEASURED
from harness.measuring.matrix.side_by_side import per_round, workloads_of

#: What reproduces each lesson (Makefile targets; test_matrix_headlines checks they exist).
COMMANDS = {
    "network": "make bench-network && make matrix",
    "serving": "make bench-peers && make matrix",
    "processing": "make bench-pairs && make matrix",
    "container": "make bench MODE=local && make bench MODE=docker && make matrix",
    "gate": "make gate-cost && make matrix",
}


def wire(record: dict) -> float:
    return float(record.get("bytes_sent_per_request") or 0) + float(record.get("bytes_received_per_request") or 0)


def _machine(record: dict) -> str:
    machine = record.get("machine") or {}
    return f"{machine.get('cpu_model', 'unknown CPU')}, {machine.get('cpu_cores')} cores"


def _load(records: list[dict]) -> str:
    loads = [r["load_average_1m"] for r in records if r.get("load_average_1m") is not None]
    return f"load {min(loads):.1f}-{max(loads):.1f}" if loads else "load not recorded"


# -- lesson 1: the same input sent three ways through links of three rates ------------------
def _link_bits(record: dict) -> float:
    network = record.get("network") or {}
    return float(network.get("rate_bits_per_s") or float("inf"))


def _link_name(record: dict) -> str:
    network = record.get("network") or {}
    if not network.get("rate"):
        return "loopback"
    return str(network["rate"]) + (f" +{network['rtt_ms']:g} ms" if network.get("rtt_ms") else "")


def _speed_run(record: dict) -> bool:
    """A record of a speed-run model (fast stand-in weights), as its workload's notes say."""
    return bool((record.get("notes") or {}).get("speed_run"))


def network_lesson(records: list[dict], model_only: dict[str, dict[str, str]]) -> dict:
    """Items/s of each path by link, at the lowest concurrency every (path, link) measured."""
    shaped = network_records(records)
    if not shaped:
        return {"measured": False, "command": COMMANDS["network"]}
    deployment = max(shaped, key=stamp).get("deployment")
    mine = [r for r in shaped if r.get("deployment") == deployment and generator_family(r) == "harness-asyncio"]
    if any(_speed_run(r) for r in mine):  # the paths of a speed-run model: the link, not the CPU, bounds them
        mine = [r for r in mine if _speed_run(r)]
    paths = sorted({r["benchmark"] for r in mine})
    links = {_link_name(r): _link_bits(r) for r in mine}
    cells: dict[tuple[str, str], dict[int, dict]] = defaultdict(dict)
    for r in mine:
        cells[(r["benchmark"], _link_name(r))][int(r.get("concurrency") or 0)] = r
    loopback_from_bench = "loopback" not in links
    if loopback_from_bench:  # no unshaped run in a namespace: the local bench rows of the same paths
        plain = [
            r
            for r in records
            if r.get("deployment") == deployment
            and not r.get("network")
            and not r.get("comparison")
            and r.get("benchmark") in paths
            and r.get("server_mode") == "local"
            and generator_family(r) == "harness-asyncio"
        ]
        for r in sorted(plain, key=stamp):
            cells[(r["benchmark"], "loopback")][int(r.get("concurrency") or 0)] = r
        if any((p, "loopback") in cells for p in paths):
            links["loopback"] = float("inf")
    order = sorted(links, key=lambda name: -links[name])
    common = set.intersection(*(set(cells.get((p, link), {})) for p in paths for link in order))
    if not common:
        return {"measured": False, "command": COMMANDS["network"], "why": "no concurrency measured on every link"}
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
        "loopback_from_bench": loopback_from_bench,
        "items_per_second": {p: {link: table[p][link]["items_per_second"] for link in order} for p in paths},
        "bytes_per_request": {p: wire(table[p][order[-1]]) for p in paths},
        "link_ceiling": {
            p: {link: table[p][link].get("link_ceiling_infer_per_s") for link in order if link != "loopback"}
            for p in paths
        },
        "speed_run": sorted({p for p in paths for r in table[p].values() if _speed_run(r)}),
        "when": dates(used),
        "machine": _machine(used[0]),
        "load": _load(used),
        "gate": sorted({str(r.get("gate")) for r in used}),
        "records": used,
        "command": COMMANDS["network"],
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
    run = (
        f"c={lesson['concurrency']}, {lesson['when']}, {lesson['machine']}, {lesson['load']}"
        + (", loopback from `make bench`" if lesson["loopback_from_bench"] else "")
        + (f"; speed-run (seeded weights): {', '.join(lesson['speed_run'])}" if lesson["speed_run"] else "")
    )
    return lines + [
        f"At {slow}, `{entry}` ({size(size_of[entry])}/request) serves {rate(ips[entry][slow])} items/s: "
        f"{compared}. Items/s of the three paths on {others} ({lesson['deployment']}, {run}).",
        "",
        f"![items/s by link rate](plots/headline-network.png) Reproduce: `{lesson['command']}`",
        "",
    ]


# -- lesson 2: which way to serve an embedding model on a CPU ------------------------------
def latest_side_by_side_run(records: list[dict]) -> list[dict]:
    """The records of the latest side-by-side run (``comparison: side-by-side``) that measured a
    served model (not only peers) beside at least one other target, and not only config variants."""
    runs: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        if record.get("comparison") == "side-by-side":
            runs[str(record.get("run_id"))].append(record)
    full = [
        run
        for run in runs.values()
        if len({r.get("model") for r in run}) > 1
        and any(r.get("server_mode") != "peer" for r in run)
        and not all(r.get("label") for r in run)
    ]
    return max(full, key=lambda run: max(stamp(r) for r in run)) if full else []


def serving_lesson(records: list[dict]) -> dict:
    """The latest side-by-side run: per (items per request, concurrency), each target's items/s,
    ceiling and round-by-round ratio of the fastest to each other target."""
    run = latest_side_by_side_run(records)
    if not run:
        return {"measured": False, "command": COMMANDS["serving"]}
    targets = sorted(
        {r["model"] for r in run},
        key=lambda m: -statistics.median(r["items_per_second"] for r in run if r["model"] == m),
    )
    result = []
    for (batch, concurrency), found in sorted(workloads_of(run).items()):
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
                    if m != best["model"] and (q := [a / b for a, b in zip(per_round(best), per_round(r)) if b])
                },
            }
        )
    first = min(run, key=stamp)
    return {
        "measured": True,
        "deployment": first.get("deployment"),
        "run_id": first.get("run_id"),
        "targets": targets,
        # peer servers (server_mode "peer"): the kind of peer their records name (infinity-emb, naive)
        "peers": {r["model"]: r.get("peer") or "" for r in run if r.get("server_mode") == "peer"},
        "workloads": result,
        "when": dates(run),
        "machine": _machine(first),
        "load": _load(run),
        "records": run,
        "command": COMMANDS["serving"],
    }


def peer_suffix(lesson: dict, model: str) -> str:
    """`` (peer)`` / `` (naive peer)`` after a peer server's name, "" after ours."""
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


# -- lesson 3: what processing on the server, the container and the gate cost -------------
def _cost(kind: str, deployment, label: str, values: list[float], over: str, records: list[dict]) -> dict:
    """One ratio of the costs lesson: its median and spread over ``values`` (rounds or cells)."""
    return {
        "kind": kind,
        "deployment": deployment,
        "label": label,
        "median": statistics.median(values),
        "spread": values,
        "over": over,
        "records": records,
    }


def _pair_rows(matrix: dict) -> list[dict]:
    """Per deployment one ratio: its first entry model (manifest order) with a pair run, local
    mode where measured, every round at every concurrency of that run."""
    rows = []
    for name, data in matrix.items():
        pairs = data.get("processing_pairs") or []
        if not pairs:
            continue
        mode = "local" if any(r.get("server_mode") == "local" for r in pairs) else pairs[0].get("server_mode")
        order = list(data.get("model_only") or {})
        entries = [r.get("entry_benchmark") for r in pairs if r.get("server_mode") == mode]
        entry = min(entries, key=lambda e: order.index(e) if e in order else len(order))
        found = [r for r in pairs if r.get("server_mode") == mode and r.get("entry_benchmark") == entry]
        rounds = [float(v) for r in found for v in r.get("rounds_ratio") or []]
        if rounds:
            levels = ",".join(str(c) for c in sorted({int(r["concurrency"]) for r in found}))
            label = f"{name}: {entry} / {found[0].get('model_only_benchmark')} ({mode})"
            rows.append(_cost("processing", name, label, rounds, f"{len(rounds)} rounds at c={levels}", found))
    return rows


def _apart(pairs: list[dict]) -> str:
    low, high = min(p["hours_apart"] for p in pairs), max(p["hours_apart"] for p in pairs)
    return f"{low:.1f} h" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}-{high:.1f} h"


def _container_rows(matrix: dict) -> list[dict]:
    rows = []
    for name, data in matrix.items():
        pairs = container_cost(data["rows"], data.get("history"))
        if pairs:
            values = [p["ratio"] for p in pairs]
            used = [r for r in data["rows"] if r.get("measured") and r.get("server_mode") == "docker"]
            over = f"{len(values)} variant x c cells, {_apart(pairs)} apart"
            rows.append(_cost("container", name, f"{name}: docker / local", values, over, used))
    return rows


def gate_reports(results_dir: Path) -> list[dict]:
    """``make gate-cost``'s reports (``<results>/reliability/gate_cost*.json``)."""
    reports = []
    for path in sorted((results_dir / "reliability").glob("gate_cost*.json")):
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(report, dict) and report.get("rows"):
            reports.append({**report, "file": path.name})
    return reports


def _gate_rows(reports: list[dict]) -> list[dict]:
    rows = []
    for report in reports:
        rounds: dict[int, dict[bool, float]] = defaultdict(dict)
        for r in report["rows"]:
            rounds[int(r["round"])][bool(r["gate"])] = float(r["throughput_rps"])
        values = [r[True] / r[False] for r in rounds.values() if r.get(False) and True in r]
        if values:
            name = report.get("deployment")
            label = f"{name}: {report.get('model')} gate / direct (c={report.get('concurrency')})"
            over = f"{len(values)} rounds, {str(report.get('measured_at', ''))[:10]}"
            rows.append(_cost("gate", name, label, values, over, []))
    return rows


def costs_lesson(matrix: dict, results_dir: Path) -> dict:
    rows = {
        "processing": _pair_rows(matrix),
        "container": _container_rows(matrix),
        "gate": _gate_rows(gate_reports(results_dir)),
    }
    return {"measured": any(rows.values()), "rows": rows, "commands": {k: COMMANDS[k] for k in rows}}


COST_TITLES = {
    "processing": "Server-side processing (entry model / its model-only path, one server, alternating)",
    "container": "The container (docker / local items/s, same variant and c, one run)",
    "gate": "The front gate (items/s with / without it)",
}


def render_costs_lesson(lesson: dict) -> list[str]:
    lines = ["### What processing on the server, the container and the gate cost (1.00 = nothing)", ""]
    for kind, rows in lesson["rows"].items():
        command = lesson["commands"][kind]
        if not rows:
            lines.append(f"- {COST_TITLES[kind]}: {NOT_MEASURED}: `{command}`")
            continue
        lines.append(
            f"- {COST_TITLES[kind]}: "
            + "; ".join(f"{r['label']} {ratio(r['median'])} ({spread(r['spread'])}, {r['over']})" for r in rows)
            + f". `{command}`"
        )
    if lesson["measured"]:
        lines += ["", "![cost ratios](plots/headline-costs.png)"]
    return lines + [""]


# -- the screen ---------------------------------------------------------------------------
def build_headlines(records: list[dict], matrix: dict, model_only: dict, results_dir: Path) -> dict:
    return {
        "network": network_lesson(records, model_only),
        "serving": serving_lesson(records),
        "costs": costs_lesson(matrix, results_dir),
    }


def render_headlines(headlines: dict, deployments=None) -> list[str]:
    lines = ["## Headlines", ""]
    costs = [r for rows in headlines["costs"]["rows"].values() for row in rows for r in row["records"]]
    used = [r for k in ("network", "serving") for r in headlines[k].get("records", [])] + costs
    machines = sorted({_machine(r) for r in used})
    if len(machines) > 1:
        lines += [
            f"Measured on {len(machines)} machines ({'; '.join(machines)}): compare ratios within a lesson only.",
            "",
        ]
    lines += render_network_lesson(headlines["network"])
    lines += _stale(headlines["network"], deployments)
    lines += render_serving_lesson(headlines["serving"])
    lines += _stale(headlines["serving"], deployments)
    lines += render_costs_lesson(headlines["costs"])
    costs = headlines["costs"]
    lines += _stale(
        {
            "measured": costs["measured"],
            "records": [r for k in costs["rows"].values() for row in k for r in row["records"]],
        },
        deployments,
    )
    return lines


def _stale(lesson: dict, deployments) -> list[str]:
    if not lesson.get("measured") or deployments is None:
        return []
    note = freshness_note(lesson["records"], deployments)
    return [note, ""] if note else []


def headlines_json(headlines: dict) -> dict:
    """The headline numbers without the records they came from (those are in results.json)."""

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "records"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(headlines)
