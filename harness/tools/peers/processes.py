"""A served target's process tree: its CPU time, and waiting until it is idle."""

from __future__ import annotations

import contextlib
import time


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its descendants (tritonserver and its stubs)."""
    import psutil

    total = 0.0
    try:
        root = psutil.Process(pid)
        for process in [root] + root.children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                times = process.cpu_times()
                total += times.user + times.system
    except psutil.NoSuchProcess:
        pass
    return total


def wait_idle(pid: int, timeout_s: float, busy_share: float = 0.15) -> None:
    """Wait until the process tree of ``pid`` stops using CPU (requests a closed generator left in
    flight have drained), so they do not run into the next target's window."""
    import psutil

    try:
        root = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        processes = [root] + root.children(recursive=True)
        before = sum(p.cpu_times().user + p.cpu_times().system for p in processes if p.is_running())
        time.sleep(0.25)
        after = sum(p.cpu_times().user + p.cpu_times().system for p in processes if p.is_running())
        if (after - before) / 0.25 < busy_share:
            return
    print(f"warning: server {pid} still busy after {timeout_s:.0f} s", flush=True)
