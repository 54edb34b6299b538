"""What the container costs: docker / local items/s of the same variant, target, c, generator and
pinning, each docker row paired with the local record of that cell taken closest in time."""

from __future__ import annotations

from harness.measuring.matrix.cells import closest, load_cell

#: Farther apart than this, two records were taken under different loads of a shared machine: no pair.
#: `make bench` then `make bench MODE=docker` measure the same cell 0.6-1.1 h apart on a quiet machine
#: (the local run also holds the pairs, peers and network runs); each pair says how far apart it is.
MAX_HOURS_APART = 1.5


def _pair_key(record: dict) -> tuple:
    return load_cell(record, "benchmark", "target")


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
        key = _pair_key(docker)
        same = [r for r in candidates if _pair_key(r) == key and r.get("items_per_second")]
        if not same:
            continue
        local, apart = closest(docker, same)
        if apart > MAX_HOURS_APART:
            continue
        pairs.append(
            {
                "benchmark": key[0],
                "target": key[1],
                "concurrency": key[2],
                "generator": key[3],
                "local": local["items_per_second"],
                "docker": docker["items_per_second"],
                "ratio": docker["items_per_second"] / local["items_per_second"],
                "hours_apart": apart,
            }
        )
    return pairs
