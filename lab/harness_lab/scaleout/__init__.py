"""Beyond one machine: Kubernetes objects (``k8s``), replica footprints (``footprint``), multi-replica
runs on Docker swarm (``swarm``, ``run``, ``nodes``). Command line: ``python -m harness scaleout``."""

import time


class ScaleoutError(RuntimeError):
    """The stack cannot be brought up or driven as asked; one line that says what to do."""


def wait_for(predicate, deadline_s: float, what: str, period_s: float = 0.5):
    """``predicate()``'s first true value, tried every ``period_s``; ScaleoutError after ``deadline_s``."""
    deadline = time.monotonic() + deadline_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise ScaleoutError(f"{what}: not within {deadline_s:.0f} s")
        time.sleep(period_s)
