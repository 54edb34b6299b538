"""The autoscaling signal on the stack's Prometheus: the recording rule (deploy/swarm/rules.yml) and
instant queries of it. What the HPA would decide with it was measured once (lab/docs/scaling.md,
"The signal, evaluated by a real Prometheus")."""

from __future__ import annotations

import yaml

from harness_lab.scaleout import wait_for
from harness_lab.scaleout.swarm import JOB, STACKS, Stack

#: The HPA's metric as the stack's Prometheus records it (deploy/swarm/rules.yml).
QUEUE_METRIC = "nv_inference_queue_duration_us_per_request"


def recording_rule() -> str:
    """The PromQL the stack's Prometheus records as QUEUE_METRIC (deploy/swarm/rules.yml)."""
    rules = yaml.safe_load((STACKS / "rules.yml").read_text())["groups"][0]["rules"]
    return next(rule["expr"] for rule in rules if rule["record"] == QUEUE_METRIC)


def query(stack: Stack, promql: str, at: float | None = None) -> list[dict]:
    """An instant query on the stack's Prometheus (host-mode published port), now or ``at`` (Unix time)."""
    import requests

    params = {"query": promql, **({"time": f"{at:.3f}"} if at else {})}
    answer = requests.get(f"{stack.prometheus_url}/api/v1/query", params=params, timeout=10).json()
    if answer.get("status") != "success":
        raise RuntimeError(f"Prometheus refused {promql!r}: {answer}")
    return answer["data"]["result"]


def wait_scraped(stack: Stack, count: int, deadline_s: float = 120) -> None:
    def scraped() -> bool:
        try:
            return len(query(stack, f'up{{job="{JOB}"}} == 1')) == count
        except Exception:  # noqa: BLE001 - Prometheus still starting
            return False

    wait_for(scraped, deadline_s, f"Prometheus scraping {count} tasks", period_s=1)
