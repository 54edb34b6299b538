"""The HPA signal on the stack's Prometheus at three loads and what the HPA would decide with it
(Kubernetes' ``AverageValue`` algorithm; behaviour windows not simulated)."""

from __future__ import annotations

import math
import time

from harness_lab.scaleout import stack_load, summarize, wait_for
from harness_lab.scaleout.k8s import QUEUE_METRIC, RenderOptions, apply_manifest
from harness_lab.scaleout.swarm import JOB, Stack

TOLERANCE = 0.1


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


def autoscaling_signal(stack: Stack, concurrency: int, window_s: float = 70.0) -> dict:
    """The metric at idle, with one replica under ``concurrency`` in flight, and the same load over
    ``stack.replicas``; the HPA's decision at each."""
    options = apply_manifest(stack.deployment, RenderOptions())
    target = options.queue_target_us
    levels = []
    plan = [
        ("idle", stack.replicas, 0),
        ("one replica saturated", 1, concurrency),
        ("same load, all replicas", stack.replicas, concurrency),
    ]
    for label, count, load_c in plan:
        stack.scale(count)
        stack.wait_converged(count, deadline_s=900)
        stack.wait_balanced(count)
        wait_scraped(stack, count)
        load = stack_load(stack, load_c).start() if load_c else None
        time.sleep(window_s)
        values = per_task(stack)
        outcomes = load.stop().records if load else []
        levels.append(
            {
                "level": label,
                "replicas": count,
                "concurrency": load_c,
                "metric_us_per_task": {k: round(v, 1) for k, v in values.items()},
                "hpa": hpa_decision(list(values.values()), count, target, options.min_replicas, options.max_replicas),
                **({"client": summarize(outcomes)} if outcomes else {}),
            }
        )
        print(f"scaleout: signal at {label} ({count} replicas, c={load_c}): {levels[-1]['hpa']}", flush=True)
    return {
        "rule": stack.recording_rule(),
        "recorded_as": QUEUE_METRIC,
        "queue_target_us": target,
        "min_replicas": options.min_replicas,
        "max_replicas": options.max_replicas,
        "window_s": window_s,
        "levels": levels,
    }
