"""Honest readiness: the gate watches the Python-backend stubs of every READY model.

When a stub dies while Triton still calls its model READY, the model is marked ``broken`` (the
gate's readiness and the model's ready endpoint answer not-ready), an event is recorded, and the
model is unloaded + loaded again. ``StubWatch`` is a part of ``triton_gate.server.Gate``:
it uses the gate's tritonserver child and its upstream calls (``ready_models``, ``repository``).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time

import aiohttp
import psutil
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from triton_gate import log


def expected_stubs(config: ModelConfig) -> int:
    """Stub processes a READY model has from its (auto-completed) config: one per instance for a
    Python model or a Python-based backend (``runtime: "model.py"``), none for any other backend."""
    if config.backend != "python" and not config.runtime.endswith(".py"):
        return 0
    total = 0
    for group in config.instance_group:
        gpus = len(group.gpus) if group.kind == ModelInstanceGroup.KIND_GPU else 0
        total += (group.count or 1) * (gpus or 1)
    return total


def child_pids(pid: int) -> list[int]:
    """The direct children of ``pid``, from its threads' ``/proc`` children lists: a few small reads
    where ``psutil.Process.children`` reads the status of every process on the machine (~20 ms on a
    busy host, twice a second)."""
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(child) for child in f.read().split()]
        except OSError:
            continue  # a thread that just ended
    return found


class StubWatch:
    """Stub processes per model, the watch loop, and the reload of a model whose stub died."""

    def stubs(self) -> dict[str, set[int]]:
        """Stub pids per model: tritonserver's children that run ``triton_python_backend_stub``."""
        found: dict[str, set[int]] = {}
        for pid in child_pids(self.triton.pid):
            try:
                cmdline = psutil.Process(pid).cmdline()
            except psutil.Error:
                continue
            if cmdline and cmdline[0].endswith("triton_python_backend_stub") and len(cmdline) > 1:
                match = re.search(r"([^/]+)/\d+/[^/]+$", cmdline[1])
                found.setdefault(match.group(1) if match else cmdline[1], set()).add(pid)
        return found

    async def monitor(self) -> None:
        known: dict[str, set[int]] = {}
        while True:
            await asyncio.sleep(self.cfg.monitor_interval_s)
            if self.triton.poll() is not None:
                if not self.draining:
                    log(f"tritonserver exited with code {self.triton.returncode}; the gate exits too")
                    os.kill(os.getpid(), signal.SIGTERM)
                return
            try:
                known = await self.watch_stubs(known)
            except aiohttp.ClientConnectionError:
                continue  # tritonserver not listening yet (start-up) or stopping: its exit is seen above
            except Exception as exc:  # noqa: BLE001 - the watch must outlive one bad round
                log(f"stub watch: {type(exc).__name__}: {exc}")

    async def watch_stubs(self, known: dict[str, set[int]]) -> dict[str, set[int]]:
        """One round. Stubs are tracked only for models Triton calls READY, read *before* the
        stubs are listed (so the short-lived stub the Python backend starts to auto-complete a
        config, gone before the model is READY, is never tracked). A tracked stub that is gone
        while its model is still READY has died: Triton never replaces a stub by itself in
        explicit mode, and loads/unloads pass through the gate (``changing``). Returns this
        round's tracked stubs."""
        now = time.monotonic()
        ready = await self.ready_models()
        current = await asyncio.get_running_loop().run_in_executor(None, self.stubs)
        tracked = {m: p for m, p in current.items() if m in ready}
        for model in ready:
            if model in self.reloading or model in self.broken or self.changing.get(model, 0) > now:
                continue
            alive = current.get(model, set())
            dead = sorted(known.get(model, set()) - alive)
            missing = 0
            if not dead:  # stubs that died before they were ever tracked (all of them, too): count them
                config = await self.model_config(model)
                missing = expected_stubs(config) - len(alive) if config else 0
            if dead or missing > 0:
                dead = dead or [f"{missing} of {len(alive) + missing} instances"]
                self.broken[model] = now
                self.event("stub_died", model=model, pids=dead)
                log(f"stub process(es) {dead} of model '{model}' died; readiness is false")
                if self.cfg.auto_reload:
                    asyncio.create_task(self.reload(model))
        if {m: len(p) for m, p in tracked.items()} != {m: len(p) for m, p in known.items()}:
            log("stubs of READY models: " + ", ".join(f"{m} x{len(p)}" for m, p in sorted(tracked.items())))
        return tracked

    async def settle(self, model: str, old: set[int], timeout_s: float = 60.0) -> None:
        """Keep ``model`` out of the stub watch until the stubs it had before a load/unload have
        exited (the old version's instances finish a little after the call returns)."""
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not old & (await loop.run_in_executor(None, self.stubs)).get(model, set()):
                break
            await asyncio.sleep(0.2)
        self.changing[model] = time.monotonic() + 2 * self.cfg.monitor_interval_s

    async def reload(self, model: str) -> None:
        self.reloading[model] = True
        began = time.monotonic()
        loop = asyncio.get_running_loop()
        old = (await loop.run_in_executor(None, self.stubs)).get(model, set())
        try:
            before = await self.ready_models(strict=True)
            await self.repository(f"models/{model}/unload")
            deadline = time.monotonic() + 60
            while await self.upstream_ready(f"/v2/models/{model}/ready") and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            await self.repository(f"models/{model}/load")
            after = await self.ready_models(strict=True)
            for other in sorted(before - after):  # e.g. an ensemble unloaded with its step
                await self.repository(f"models/{other}/load")
            self.forget_configs()
            self.broken.pop(model, None)
            self.event(
                "reloaded",
                model=model,
                reload_s=round(time.monotonic() - began, 2),
                also_reloaded=sorted(before - after),
            )
            log(f"model '{model}' reloaded in {time.monotonic() - began:.2f} s; ready again")
            # The old version's surviving stubs exit a little after the load returns; the model
            # stays out of the stub watch until they are gone (else their exit looks like a death).
            await self.settle(model, old)
        except Exception as exc:  # noqa: BLE001 - stays not-ready; next death retries
            log(f"reload of '{model}' failed: {exc}")
            self.event("reload_failed", model=model, error=str(exc))
        finally:
            self.reloading.pop(model, None)

    def event(self, kind: str, **fields) -> None:
        """One line of the events file (stub deaths, reloads) that the launcher reads."""
        record = {"event": kind, "time": time.time(), **fields}
        path = self.cfg.events_path
        if path:
            with open(path, "a") as f:
                f.write(json.dumps(record) + "\n")
