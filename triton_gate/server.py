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
import grpc
import uvloop
from aiohttp import web
from google.protobuf import json_format
from tritonclient.grpc.model_config_pb2 import ModelConfig
from yarl import URL

from triton_gate import HTTP_LOGGER, log, sigterm_when_parent_dies
from triton_gate.body import Admission
from triton_gate.config import GateConfig
from triton_gate.grpc_proxy import start_grpc
from triton_gate.http_front import HttpFront
from triton_gate.openai_api import OpenAIFront
from triton_gate.stub_watch import StubWatch
from triton_gate.validate import GateError

#: The gate's nice value when it may raise its priority (root): it uses little CPU, but on a
#: saturated machine every request waits for it twice; above the model it adds less latency.
GATE_NICE = -5


def die_with_parent() -> None:
    """``preexec_fn`` of tritonserver: SIGTERM when the gate dies, normal priority (the gate runs above it)."""
    sigterm_when_parent_dies()
    if os.geteuid() == 0:
        os.setpriority(os.PRIO_PROCESS, 0, 0)


def raise_priority() -> None:
    """The gate's own process to ``GATE_NICE`` when it runs as root (else left as it is)."""
    if os.geteuid() == 0:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, GATE_NICE)
        except OSError:
            pass


class Gate(HttpFront, OpenAIFront, StubWatch):
    """The gate's state, its tritonserver child and the calls to it; HTTP handlers, the OpenAI
    routes and the stub watch come from ``HttpFront``, ``OpenAIFront`` and ``StubWatch``, gRPC
    from ``grpc_proxy``."""

    def __init__(self, config: GateConfig):
        self.cfg = config
        self.policy = config.policy
        http_port, grpc_port, metrics_port = config.private_ports
        self.upstream_http = f"http://127.0.0.1:{http_port}"
        self.upstream_grpc = f"127.0.0.1:{grpc_port}"
        self.upstream_metrics = f"http://127.0.0.1:{metrics_port}"
        self.triton: subprocess.Popen | None = None
        self.session = None
        self.configs: dict[str, dict] = {}
        #: Model -> when its stub was seen dead (not ready until its reload).
        self.broken: dict[str, float] = {}
        #: Model -> True while the gate reloads it.
        self.reloading: dict[str, bool] = {}
        #: Model -> until when a client (un)load is in flight (out of the stub watch meanwhile).
        self.changing: dict[str, float] = {}
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
        """Cached model configs are stale (a model was loaded or reloaded)."""
        self.configs.clear()

    async def model_config(self, model: str) -> ModelConfig | None:
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
        """Serve ``socks`` (``http``, optional ``grpc`` and ``metrics``) until SIGTERM, watching
        tritonserver meanwhile; then drain and stop it."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        runners, grpc_server = await self.start_servers(socks)
        monitor = asyncio.create_task(self.monitor())
        await stop.wait()
        await self.drain(runners, grpc_server)
        monitor.cancel()
        return await self.stop_triton()

    async def start_servers(self, socks: dict[str, socket.socket]) -> tuple[list, grpc.aio.Server | None]:
        """The upstream session and the servers of the public sockets: (aiohttp runners, gRPC server or None)."""
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
        return list(runners.values()), await start_grpc(self, socks["grpc"])

    async def drain(self, runners: list, grpc_server: grpc.aio.Server | None) -> None:
        """Not ready, new inference refused; in-flight requests finish (up to the exit timeout), then
        the servers and the session close."""
        self.draining = True
        log(f"draining {self.in_flight} in-flight request(s)")
        deadline = time.monotonic() + self.cfg.exit_timeout_s
        while self.in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if grpc_server is not None:
            await grpc_server.stop(grace=max(0.0, deadline - time.monotonic()))
        for runner in runners:
            await runner.cleanup()
        await self.session.close()

    async def stop_triton(self) -> int:
        """SIGTERM to tritonserver (killed past its exit timeout); 1 when it had already exited by itself."""
        code = 0 if self.triton.poll() is None else 1
        if code == 0:
            self.triton.send_signal(signal.SIGTERM)
            try:
                await asyncio.get_running_loop().run_in_executor(None, self.triton.wait, self.cfg.exit_timeout_s + 10)
            except subprocess.TimeoutExpired:
                self.triton.kill()
        log(f"stopped (tritonserver exit code {self.triton.returncode})")
        return code


def run_gate(config: GateConfig, socks: dict[str, socket.socket]) -> int:
    """Start tritonserver behind a gate of ``config`` and serve the bound ``socks`` until SIGTERM."""
    raise_priority()
    gate = Gate(config)
    gate.start_triton()
    return uvloop.run(gate.run(socks))


def main(argv: list[str] | None = None) -> int:
    """Entry point of the local launcher: ``python -m triton_gate <config.json>``."""
    argv = sys.argv[1:] if argv is None else argv
    config_path = Path(argv[0])
    config = GateConfig.model_validate_json(config_path.read_bytes())
    config_path.unlink()  # holds the admin token: gone once read
    return run_gate(config, {name: socket.socket(fileno=fd) for name, fd in config.fds.items()})
