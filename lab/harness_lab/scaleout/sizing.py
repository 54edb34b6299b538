"""Sizing a replica from its measured footprint (``python -m harness scaleout footprint``): memory and
CPU requests, and probe budgets from the measured start-to-ready time."""

from __future__ import annotations

import math

from harness.deployments import Deployment
from harness_lab.scaleout.footprint import COMMAND as FOOTPRINT_COMMAND
from harness_lab.scaleout.footprint import load_footprints

#: What a replica is assumed to need when its deployment was never measured.
UNMEASURED = {"peak_mib": 2048.0, "cpu_cores_under_load": 1.0, "start_to_ready_s": 60.0}


def footprint(deployment: Deployment) -> tuple[dict, str]:
    """Measured footprint of one replica (or the defaults) and where it comes from."""
    measured = load_footprints()["deployments"].get(deployment.name)
    if measured:
        return measured, f"measured {measured.get('measured', '')} by `{FOOTPRINT_COMMAND}`".replace("  ", " ")
    return dict(UNMEASURED), f"not measured: defaults; run `{FOOTPRINT_COMMAND} {deployment.name}`"


def round_up(value: float, step: float) -> float:
    return math.ceil(value / step) * step


def resources(deployment: Deployment, overrides: dict) -> tuple[dict, str]:
    """Requests from the measured peak working set (+25 %) and cores under load; a memory limit of
    1.5x the request; no CPU limit (CFS throttling adds latency to every request). ``overrides``: the
    manifest's ``[scaleout]`` ``memory_mib`` / ``cpu`` when it sets them."""
    measured, source = footprint(deployment)
    memory_mib = overrides.get("memory_mib") or int(round_up(measured["peak_mib"] * 1.25, 64))
    cpu = overrides.get("cpu") or max(0.5, round_up(measured.get("cpu_cores_under_load") or 1.0, 0.25))
    limit_mib = int(round_up(memory_mib * 1.5, 64))
    return {
        "requests": {"cpu": f"{int(cpu * 1000)}m", "memory": f"{memory_mib}Mi"},
        "limits": {"memory": f"{limit_mib}Mi"},
    }, source


def probes(start_to_ready_s: float) -> dict:
    """Startup budget of 3x the measured start, at least 2 and at most 15 minutes; then fast
    readiness (out of the Service within ~10 s) and slower liveness (restart after ~30 s dead)."""
    startup_failures = min(180, max(24, math.ceil(3 * start_to_ready_s / 5)))
    return {
        "startupProbe": {
            "httpGet": {"path": "/v2/health/ready", "port": "http"},
            "periodSeconds": 5,
            "failureThreshold": startup_failures,
        },
        "readinessProbe": {
            "httpGet": {"path": "/v2/health/ready", "port": "http"},
            "periodSeconds": 5,
            "timeoutSeconds": 2,
            "failureThreshold": 2,
        },
        "livenessProbe": {
            "httpGet": {"path": "/v2/health/live", "port": "http"},
            "periodSeconds": 10,
            "timeoutSeconds": 3,
            "failureThreshold": 3,
        },
    }
