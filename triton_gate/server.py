"""The front gate process: owns tritonserver, validates every request, reports honest readiness.

Started by ``LocalTritonServer`` as ``python -m triton_gate <config.json>`` with the public
sockets already bound (inherited file descriptors), or by ``serve``; its parts are listed in
README.md. SIGTERM drains in-flight requests, then stops tritonserver (lab/docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import aiohttp
import uvloop
from aiohttp import web
from google.protobuf import json_format
from tritonclient.grpc.model_config_pb2 import ModelConfig
from yarl import URL

from triton_gate import HTTP_LOGGER, log
from triton_gate.body import Admission
from triton_gate.config import GateConfig
from triton_gate.http_front import HttpFront
from triton_gate.isolation import die_with_parent, isolate, raise_priority
from triton_gate.openai_api import OpenAIFront
from triton_gate.stub_watch import StubWatch
from triton_gate.validate import GateError
from triton_gate.workers import fork_workers, shared_state, stop_workers


class Gate(HttpFront, OpenAIFront, StubWatch):
    """The gate's state, its tritonserver child and the calls to it; HTTP handlers, the OpenAI
    routes and the stub watch come from ``HttpFront``, ``OpenAIFront`` and ``StubWatch``, gRPC
    from ``grpc_proxy``."""

    def __init__(self, config: GateConfig, workers: int = 1):
        self.cfg = config
        self.policy = config.policy
        http_port, grpc_port, metrics_port = config.private_ports
        self.upstream_http = f"http://127.0.0.1:{http_port}"
        self.upstream_grpc = f"127.0.0.1:{grpc_port}"
        self.upstream_metrics = f"http://127.0.0.1:{metrics_port}"
        self.triton: subprocess.Popen | None = None
        self.session = None
        self.configs: dict[str, dict] = {}
        #: Worker processes serving the public sockets (``workers``): 0 is the primary.
        self.workers = workers
        self.worker, self.worker_processes = 0, []
        # Alike in every worker: model -> when its stub was seen dead; model -> True while the gate
        # reloads it; model -> until when a client (un)load is in flight; the configs' epoch.
        self.broken, self.reloading, self.changing, self.config_epoch = shared_state(self.workers, 4)
        self.seen_config_epoch = None
        self.draining = False
        self.in_flight = 0

    # -- upstream ---------------------------------------------------------------------------
    def start_triton(self) -> None:
        """tritonserver as the gate's child; its log to ``log_path`` (None: the gate's own stdout)."""
        log_file = open(self.cfg.log_path, "ab", buffering=0) if self.cfg.log_path else None
        self.triton = subprocess.Popen(
            self.cfg.command,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.cfg.work_dir,
            preexec_fn=die_with_parent,
        )
        log(f"tritonserver pid {self.triton.pid}")

    def internal_headers(self) -> dict:
        return {self.cfg.admin_header: self.cfg.internal_token}

    def forget_configs(self) -> None:
        """Cached model configs are stale (a model was loaded or reloaded), in every worker."""
        self.configs.clear()
        self.config_epoch["epoch"] = time.time_ns()

    async def model_config(self, model: str) -> ModelConfig | None:
        epoch = self.config_epoch.get("epoch")
        if epoch != self.seen_config_epoch:
            self.configs.clear()
            self.seen_config_epoch = epoch
        config = self.configs.get(model)
        if config is None:
            url = URL(f"{self.upstream_http}/v2/models/{quote(model, safe='')}/config", encoded=True)
            async with self.session.get(url) as resp:
                if resp.status != 200:
                    return None
                # typed once, as tritonserver's JSON of it (fields this tritonclient lacks left out)
                config = json_format.Parse(await resp.read(), ModelConfig(), ignore_unknown_fields=True)
            self.configs[model] = config
        return config

    async def upstream_ready(self, path: str = "/v2/health/ready") -> bool:
        try:
            async with self.session.get(self.upstream_http + path) as resp:
                await resp.read()
                return resp.status == 200
        except Exception:  # noqa: BLE001 - not listening yet / gone
            return False

    async def repository(self, path: str) -> bytes:
        """POST to tritonserver's ``/v2/repository/<path>`` with its internal token; RuntimeError unless 200."""
        url = f"{self.upstream_http}/v2/repository/{path}"
        async with self.session.post(url, json={}, headers=self.internal_headers()) as resp:
            text = await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"{path}: HTTP {resp.status} {text[:200]!r}")
            return text

    async def ready_models(self, strict: bool = False) -> set[str]:
        """Models tritonserver calls READY (an index error: empty, or RuntimeError when ``strict``)."""
        try:
            index = json.loads(await self.repository("index"))
        except RuntimeError:
            if strict:
                raise
            return set()
        return {m["name"] for m in index if m.get("state") == "READY"}

    # -- access (HTTP and gRPC) ---------------------------------------------------------------
    async def check_inference(self, model: str, admin: bool, missing_status: int = 404) -> ModelConfig:
        """The model's config for an inference call, or GateError: draining, unknown (``missing_status``),
        internal to a non-admin, or being reloaded."""
        if self.draining:
            raise GateError(503, "server is shutting down")
        config = await self.model_config(model)
        if config is None:
            raise GateError(missing_status, f"Request for unknown model: '{model}' is not found")
        if self.policy.is_internal(model) and not admin:
            raise GateError(403, f"model '{model}' is internal to its deployment; clients call the entry models")
        if model in self.broken:
            raise GateError(503, f"model '{model}' is being reloaded after its stub process died")
        return config

    async def not_ready(self) -> list[str]:
        """Why the gate is not ready (draining, a dead stub, tritonserver); empty when it is."""
        reasons = ["shutting down"] if self.draining else []
        if self.broken:
            reasons.append(f"stub process died: {sorted(self.broken)} (reloading)")
        if not reasons and not await self.upstream_ready():
            reasons.append("tritonserver not ready")
        return reasons

    def check_load(self, load: bool) -> None:
        """Refuse model load/unload in mode ``none``, even to an admin. (The restricted API groups
        tritonserver refuses itself: only an admin's call carries its internal token.)"""
        if load and self.cfg.user_model_control_mode == "none":
            raise GateError(403, "model load/unload is disabled on this server (model-control-mode none)")

    # -- run ----------------------------------------------------------------------------------
    async def run(self, socks: dict[str, socket.socket]) -> int:
        """Serve ``socks`` (``http``, optional ``grpc`` and ``metrics``) until SIGTERM; the primary
        (worker 0) also watches tritonserver and stops it."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        runners, grpc_proxy = await self.start_servers(socks)
        monitor = asyncio.create_task(self.monitor()) if self.worker == 0 else None
        await stop.wait()
        await self.drain(runners, grpc_proxy)
        if monitor is None:
            return 0
        monitor.cancel()
        return await self.stop_triton()

    async def start_servers(self, socks: dict[str, socket.socket]) -> tuple[list, tuple | None]:
        """The upstream session and the servers of this worker's sockets: (aiohttp runners,
        (gRPC server, its byte pump) or None)."""
        # A proxy keeps no cookies (and skips the jar's per-request filtering), and adds no
        # Accept-Encoding of its own: Triton gzips an inference response whenever one is sent.
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=None),
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=("Accept-Encoding",),
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
        )
        self.admission = Admission(
            self.policy.max_bytes_in_flight, self.cfg.max_bytes_in_flight, self.cfg.admission_wait_s
        )
        # aiohttp's low-level server: every path goes to ``handle``, no application or router per request.
        # aiohttp inflates bodies in bounded steps (``body``); a refused body is never read on (no lingering).
        handler = web.Server(self.handle, access_log=None, lingering_time=0, logger=HTTP_LOGGER)
        runners = {"http": web.ServerRunner(handler, handle_signals=False, shutdown_timeout=self.cfg.exit_timeout_s)}
        if "metrics" in socks:
            metrics = web.Server(self.handle_metrics, access_log=None, logger=HTTP_LOGGER)
            runners["metrics"] = web.ServerRunner(metrics, handle_signals=False)
        for name, runner in runners.items():
            await runner.setup()
            await web.SockSite(runner, socks[name]).start()
        if "grpc" not in socks:
            return list(runners.values()), None
        from triton_gate.grpc_proxy import start_grpc

        return list(runners.values()), await start_grpc(self, socks["grpc"])

    async def drain(self, runners: list, grpc_proxy: tuple | None) -> None:
        """Not ready, new inference refused; in-flight requests finish (up to the exit timeout), then
        the servers and the session close."""
        self.draining = True
        if self.worker == 0:
            loop = asyncio.get_running_loop()
            self.stopped_workers = loop.run_in_executor(
                None, stop_workers, self.worker_processes, self.cfg.exit_timeout_s + 5
            )
        log(f"worker {self.worker}: draining {self.in_flight} in-flight request(s)")
        deadline = time.monotonic() + self.cfg.exit_timeout_s
        while self.in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if grpc_proxy is not None:
            grpc_server, pump = grpc_proxy
            await grpc_server.stop(grace=max(0.0, deadline - time.monotonic()))
            pump.close()
        for runner in runners:
            await runner.cleanup()
        await self.session.close()

    async def stop_triton(self) -> int:
        """After the workers have stopped, SIGTERM to tritonserver (killed past its exit timeout);
        1 when it had already exited by itself."""
        await self.stopped_workers
        code = 0 if self.triton.poll() is None else 1
        if code == 0:
            self.triton.send_signal(signal.SIGTERM)
            try:
                await asyncio.get_running_loop().run_in_executor(None, self.triton.wait, self.cfg.exit_timeout_s + 10)
            except subprocess.TimeoutExpired:
                self.triton.kill()
        log(f"stopped (tritonserver exit code {self.triton.returncode})")
        return code


def run_gate(config: GateConfig, socks: list[dict[str, socket.socket]]) -> int:
    """Start tritonserver behind a gate of ``config`` and serve the bound ``socks`` until SIGTERM:
    one worker process per entry (``workers``), each serving its own sockets."""
    raise_priority()
    gate = Gate(config, workers=len(socks))
    gate.start_triton()

    def serve(worker: int) -> int:
        gate.worker = worker
        for other in socks[:worker] + socks[worker + 1 :]:  # a worker that dies takes its sockets along
            for sock in other.values():
                sock.close()
        return uvloop.run(gate.run(socks[worker]))

    gate.worker_processes = fork_workers(gate.workers, serve)
    if gate.workers > 1:
        log(f"{gate.workers} workers: pids {[os.getpid(), *(worker.pid for worker in gate.worker_processes)]}")
    return serve(0)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the local launcher: ``python -m triton_gate <config.json>``."""
    argv = sys.argv[1:] if argv is None else argv
    config_path = Path(argv[0])
    config = GateConfig.model_validate_json(config_path.read_bytes())
    config_path.unlink()  # holds the admin token: gone once read
    socks = [{name: socket.socket(fileno=fd) for name, fd in fds.items()} for fds in config.fds]
    log(isolate() if config.isolate else "not isolated (isolate=False)")
    return run_gate(config, socks)
