"""The HPA signal on the stack's Prometheus at three loads and what the HPA would decide with it
(Kubernetes' ``AverageValue`` algorithm; behaviour windows not simulated)."""

from __future__ import annotations

import math
import time

import yaml

from harness import PROJECT_ROOT
from harness_lab.scaleout import stack_load, summarize, wait_for
from harness_lab.scaleout.swarm import JOB, STACKS, Stack

TOLERANCE = 0.1
#: The HPA's metric as the stack's Prometheus records it (deploy/swarm/rules.yml).
QUEUE_METRIC = "nv_inference_queue_duration_us_per_request"


def committed_hpa(deployment: str) -> dict:
    """The replica bounds and queue target of deploy/k8s/<deployment>/hpa.yaml."""
    spec = yaml.safe_load((PROJECT_ROOT / "deploy" / "k8s" / deployment / "hpa.yaml").read_text())["spec"]
    target = int(spec["metrics"][0]["pods"]["target"]["averageValue"])
    return {"queue_target_us": target, "min_replicas": spec["minReplicas"], "max_replicas": spec["maxReplicas"]}


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


def per_task(stack: Stack) -> dict[str, float]:
    """The recorded HPA metric, one value per task (``instance``)."""
    return {r["metric"].get("instance", "?"): float(r["value"][1]) for r in query(stack, QUEUE_METRIC)}


def hpa_decision(values: list[float], current: int, target: float, minimum: int, maximum: int) -> dict:
    if not values:
        return {"average_us": None, "desired": current, "action": "no data"}
    average = sum(values) / len(values)
    ratio = average / target
    desired = current if abs(ratio - 1) <= TOLERANCE else math.ceil(current * ratio)
    desired = max(minimum, min(maximum, desired))
    action = "scale out" if desired > current else "scale in" if desired < current else "hold"
    return {"average_us": round(average, 1), "ratio_to_target": round(ratio, 3), "desired": desired, "action": action}


def wait_scraped(stack: Stack, count: int, deadline_s: float = 120) -> None:
    def scraped() -> bool:
        try:
            return len(query(stack, f'up{{job="{JOB}"}} == 1')) == count
        except Exception:  # noqa: BLE001 - Prometheus still starting
            return False

    wait_for(scraped, deadline_s, f"Prometheus scraping {count} tasks", period_s=1)


def signal_level(stack: Stack, label: str, count: int, concurrency: int, hpa: dict, window_s: float) -> dict:
    """``count`` replicas, ``concurrency`` in flight for ``window_s``: the metric per task and the HPA's decision."""
    stack.scale(count)
    stack.wait_converged(count, deadline_s=900)
    stack.wait_balanced(count)
    wait_scraped(stack, count)
    load = stack_load(stack, concurrency).start() if concurrency else None
    time.sleep(window_s)
    values = per_task(stack)
    outcomes = load.stop().records if load else []
    decision = hpa_decision(
        list(values.values()), count, hpa["queue_target_us"], hpa["min_replicas"], hpa["max_replicas"]
    )
    print(f"scaleout: signal at {label} ({count} replicas, c={concurrency}): {decision}", flush=True)
    return {
        "level": label,
        "replicas": count,
        "concurrency": concurrency,
        "metric_us_per_task": {k: round(v, 1) for k, v in values.items()},
        "hpa": decision,
        **({"client": summarize(outcomes)} if outcomes else {}),
    }


def autoscaling_signal(stack: Stack, concurrency: int, window_s: float = 70.0) -> dict:
    """The metric at idle, with one replica under ``concurrency`` in flight, and the same load over
    ``stack.replicas``; the HPA's decision at each (bounds and target: the committed HPA)."""
    hpa = committed_hpa(stack.deployment.name)
    plan = [
        ("idle", stack.replicas, 0),
        ("one replica saturated", 1, concurrency),
        ("same load, all replicas", stack.replicas, concurrency),
    ]
    levels = [signal_level(stack, label, count, load_c, hpa, window_s) for label, count, load_c in plan]
    return {"rule": recording_rule(), "recorded_as": QUEUE_METRIC, **hpa, "window_s": window_s, "levels": levels}
