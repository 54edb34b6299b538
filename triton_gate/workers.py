"""The gate's worker processes: ``workers`` processes serve the same public sockets.

The primary owns tritonserver, the stub watch, the reloads and the shutdown; the others are forked
from it before any event loop runs. What every worker must see alike (models whose stub died or
that are being reloaded, client (un)loads in flight, stale configs) lives in ``SharedDict``.
Not gunicorn's prefork: its arbiter restarts a dead worker (here one stops the whole gate), its
aiohttp worker serves an ``Application`` on one socket kind, and owns neither tritonserver nor gRPC.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterator, MutableMapping
from multiprocessing.process import BaseProcess

from triton_gate.isolation import sigterm_when_parent_dies

#: Gate workers when none is asked for: one per 10 cores, at least one, so that the gate can take
#: no more than a tenth of the machine (docs/tuning.md, "The front gate's cost and its workers").
CORES_PER_WORKER = 10


def default_workers(cores: int | None = None) -> int:
    """``$TRITON_GATE_WORKERS`` when set, else one worker per ``CORES_PER_WORKER`` cores (at least one)."""
    if os.environ.get("TRITON_GATE_WORKERS"):
        return int(os.environ["TRITON_GATE_WORKERS"])
    return max(1, (cores or len(os.sched_getaffinity(0))) // CORES_PER_WORKER)


class SharedDict(MutableMapping):
    """A dict of JSON values in shared memory, made before the workers fork: a write (from any
    worker) takes a lock and bumps a version; a read takes the lock only when the version moved."""

    def __init__(self, size_bytes: int = 1 << 16):
        context = multiprocessing.get_context("fork")
        self._lock = context.Lock()
        self._version = context.RawValue("Q", 0)
        self._blob = context.RawArray("c", size_bytes)
        self._seen, self._local = 0, {}

    def _read(self) -> dict:
        if self._version.value != self._seen:
            with self._lock:
                self._seen = self._version.value
                self._local = json.loads(self._blob.value or b"{}")
        return self._local

    def _write(self, change: Callable[[dict], None]) -> None:
        with self._lock:
            data = json.loads(self._blob.value or b"{}")
            change(data)
            raw = json.dumps(data).encode()
            if len(raw) >= len(self._blob):
                raise RuntimeError(f"gate shared state over {len(self._blob)} bytes")
            self._blob.value = raw
            self._version.value += 1

    def __getitem__(self, key: str):
        return self._read()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._read()))

    def __len__(self) -> int:
        return len(self._read())

    def __setitem__(self, key: str, value) -> None:
        self._write(lambda data: data.__setitem__(key, value))

    def __delitem__(self, key: str) -> None:
        """Gone afterwards, also when another worker removed it first."""
        self._write(lambda data: data.pop(key, None))


def shared_state(workers: int, count: int) -> list[MutableMapping]:
    """``count`` mappings every worker reads alike: plain dicts for one worker, ``SharedDict`` for more."""
    return [SharedDict() if workers > 1 else {} for _ in range(count)]


def fork_workers(count: int, serve: Callable[[int], int]) -> list[BaseProcess]:
    """Fork workers 1 .. count-1, each exiting with the code of ``serve(index)``; the kernel sends
    each SIGTERM when the primary dies."""
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=run_worker, args=(serve, index, os.getpid())) for index in range(1, count)]
    for worker in workers:
        worker.start()
    return workers


def run_worker(serve: Callable[[int], int], index: int, primary: int) -> None:
    sigterm_when_parent_dies()
    if os.getppid() != primary:  # the primary died before the line above
        sys.exit(1)
    sys.exit(serve(index))


def stop_workers(workers: list[BaseProcess], timeout_s: float) -> None:
    """SIGTERM every worker still running, wait up to ``timeout_s`` for them to drain, kill the rest."""
    for worker in workers:
        worker.terminate()
    deadline = time.monotonic() + timeout_s
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
        if worker.is_alive():
            worker.kill()
            worker.join()
