"""Machine-readable benchmark records (JSON lines) that the results matrix aggregates."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
from functools import lru_cache
from pathlib import Path

import psutil

from harness import PROJECT_ROOT

#: Check outcomes (harness.testing.outcomes) beside the records, for the matrix's correctness column.
OUTCOMES_FILE = "test_outcomes.jsonl"


def results_dir() -> Path:
    """Where records go: $HARNESS_RESULTS_DIR or ./results."""
    return Path(os.environ.get("HARNESS_RESULTS_DIR") or PROJECT_ROOT / "results")


def records_path() -> Path:
    return results_dir() / "records.jsonl"


@lru_cache(maxsize=1)
def machine() -> dict:
    """CPU model, core count, memory and OS of this machine."""
    cpu_model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    os_name = platform.platform()
    try:
        os_name = platform.freedesktop_os_release().get("PRETTY_NAME", os_name)
    except OSError:
        pass
    return {
        "cpu_model": cpu_model,
        "cpu_cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "os": os_name,
        "python": platform.python_version(),
    }


#: Version of the record layout; bumped when a field changes meaning or name.
SCHEMA = 2


def scenario_fields(
    ctx, benchmark, workload, *, protocol: str, generator: str, server: dict, backends: dict[str, str]
) -> dict:
    """What every benchmark record says about its scenario, whichever generator measured it."""
    return {
        "schema": SCHEMA,
        "deployment": ctx.deployment.name,
        "benchmark": benchmark.id,
        "model": workload.model,
        "variant": workload.variant or benchmark.id,
        "target": ctx.target,
        "protocol": protocol,
        "generator": generator,
        "server_mode": server["server_mode"],
        "server_version": server["server_version"],
        # True: served through the harness's front gate (triton_gate); None: not known (external).
        "gate": getattr(ctx.server, "gate", None),
        "backend_implementation": backends,
        "items_per_request": workload.items_per_request,
        "config_overrides": benchmark.overrides,
        "notes": workload.notes,
    }


#: Keys every record must have; generators add their own measured fields beside them.
REQUIRED = ("deployment", "benchmark", "model", "variant", "target", "generator", "concurrency", "items_per_second")


class RecordError(ValueError):
    pass


@lru_cache(maxsize=32)
def model_repository_commit(deployment: str | None) -> str | None:
    """The git commit of the deployment's model repository (``harness.provenance.repository_commit``):
    which code a record measured, so the matrix can say when a section is older than the code."""
    from harness.deployments import ManifestError, get_deployment
    from harness.provenance import repository_commit

    try:
        return repository_commit(get_deployment(deployment).model_repository) if deployment else None
    except (ManifestError, KeyError, OSError):
        return None


def append_record(record: dict, path: Path | None = None) -> Path:
    """Append one record (schema version, timestamp, machine added) to the records file."""
    missing = [key for key in REQUIRED if record.get(key) is None]
    if missing:
        raise RecordError(
            f"a benchmark record of {record.get('deployment', '?')}/{record.get('benchmark', '?')} lacks "
            f"{', '.join(missing)} (harness.measuring.records.REQUIRED)"
        )
    path = path or records_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    full = {
        "schema": SCHEMA,
        "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "model_repository_commit": model_repository_commit(record.get("deployment")),
        **record,
    }
    with path.open("a") as handle:
        handle.write(json.dumps(full, default=str) + "\n")
    return path


def read_records(path: Path | None = None) -> list[dict]:
    """All records in the file (empty when there is none)."""
    path = path or records_path()
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
