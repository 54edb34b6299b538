"""Whether a section's records measured the code that is there now: each record carries the git
commit of its deployment's model repository (``model_repository_commit``, written by
``harness.measuring.records.append_record``); a section whose records name another commit, or
none, says so."""

from __future__ import annotations

from harness.provenance import repository_commit


def current_commits(deployments) -> dict[str, str | None]:
    """Deployment name -> the commit of its model repository now (None outside a git checkout)."""
    return {d.name: repository_commit(d.model_repository) for d in deployments}


def freshness_note(records: list[dict], deployments) -> str:
    """ "" when every record measured its deployment's model repository as committed now, else one
    sentence saying which records are older (or do not say) and the commit they would need."""
    now = current_commits(deployments)
    notes = []
    for name in sorted({r.get("deployment") for r in records if r.get("deployment") in now}):
        mine = [r for r in records if r.get("deployment") == name]
        current = now[name]
        if current is None:
            continue
        unknown = sum(1 for r in mine if not r.get("model_repository_commit"))
        other = sorted({r["model_repository_commit"] for r in mine if r.get("model_repository_commit")} - {current})
        if unknown:
            notes.append(
                f"{unknown} of {len(mine)} records of {name} do not say which commit of its model repository they "
                f"measured (taken before records said it; now {current})"
            )
        if other:
            notes.append(
                f"records of {name} measured its model repository at commit {', '.join(other)}, not at {current} as now"
            )
    return ("Freshness: " + "; ".join(notes) + ": re-run the command to measure the current code.") if notes else ""
