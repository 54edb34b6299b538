"""The matrix's ``correctness`` column: check outcomes (the pytest plugin's JSON lines) and the
summary of a deployment's checks for one row."""

from __future__ import annotations

from collections import defaultdict

from harness.measuring.matrix.cells import stamp


def correctness_by_deployment(outcomes: list[dict], names: list[str]) -> dict[str, dict]:
    """``{deployment: {(target, mode, config variant): {check: latest outcome row}}}``; the config
    variant is ``""`` for the deployment's own configs, else the benchmark id that
    ``--config-variant`` named, so a variant's rows show the checks run on that variant."""
    found: dict[str, dict] = defaultdict(lambda: defaultdict(dict))
    for row in sorted(outcomes, key=stamp):
        for name in sorted(names, key=len, reverse=True):
            if row["param"].startswith(name + "-"):
                check = row["param"][len(name) + 1 :]
                where = (row.get("target", "cpu"), row.get("server_mode", "local"), row.get("config_variant") or "")
                found[name][where][check] = row
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
