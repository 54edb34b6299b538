"""The front gate process: owns tritonserver, validates every request, reports honest readiness.

Started by ``LocalTritonServer`` as ``python -m harness.serving.gate <config.json>`` with the public
HTTP, gRPC and metrics sockets already bound (their file descriptors are inherited). Then:

1. **Isolation** (as root): the gate moves into a private network namespace and a private
   mount namespace before it starts anything. tritonserver, started by the gate, listens on
   the loopback of that namespace, which no other process on the host can reach; a fresh
   tmpfs on ``/dev/shm`` (mode 0700) holds the Python stubs' IPC regions, invisible to other
   users and gone when the server stops. The sockets bound by the launcher stay in the host
   namespace, so clients reach only the gate. Without root the gate says so on its log and
   falls back to tritonserver on private loopback ports.
2. **Validation** (``harness.serving.gate.validate``) of every HTTP inference request before Triton
   parses it, a body limit per model, internal models (config parameter
   ``gate_internal: "true"``) refused to clients, and the restricted APIs (shared memory,
   trace, logging, model repository) behind the admin header. The admin token reaches the
   gate in a 0600 file it deletes once read; tritonserver's own restricted-API token is a
   different random value, useless outside the namespace.
3. **gRPC** through a byte-level proxy (grpc.aio generic handlers) with the same admin
   check, internal-model check, shape/data consistency and a message-size limit.
4. **Honest readiness**: the stubs of every model are watched; when one dies while Triton
   still calls the model READY, the gate's ``/v2/health/ready`` and the model's ready
   endpoint answer not-ready, and the gate unloads + loads the model (tritonserver runs in
   explicit model-control mode for that; a user's ``none`` becomes explicit with every model
   loaded at start and the load/unload API refused).
5. **SIGTERM drains**: readiness turns false, new inference is refused with 503, in-flight
   requests finish (up to the exit timeout), then tritonserver is stopped and the gate exits.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
from yarl import URL

from harness.serving.gate.validate import DEFAULT_MAX_BODY, GateError, body_limit, config_parameter, validate_infer

CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000
MS_REC, MS_PRIVATE = 0x4000, 1 << 18
PR_SET_PDEATHSIG = 1
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "host",
}
#: Request headers not forwarded: aiohttp has already inflated a gzip/deflate request body (the
#: limits above count inflated bytes), so the body goes on as plain bytes.
REQUEST_ONLY_DROP = HOP_BY_HOP | {"content-encoding"}
INFER_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?/infer$")
GENERATE_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?/generate(?:_stream)?$")
#: Body limit of requests other than inference (metadata, statistics, ...; admin: repository loads).
OTHER_BODY_LIMIT, ADMIN_BODY_LIMIT = 1 << 20, 256 << 20
READY_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/[^/]+)?/ready$")
LOAD_PATH = re.compile(r"^/v2/repository/models/([^/]+)/(load|unload)$")


def expected_stubs(config: dict) -> int:
    """Instances of a model from its (auto-completed) config: one stub each for Python-based backends."""
    total = 0
    for group in config.get("instance_group") or []:
        count = int(group.get("count", 1) or 1)
        gpus = group.get("gpus") or []
        total += count * (len(gpus) if group.get("kind") == "KIND_GPU" and gpus else 1)
    return total


def log(message: str) -> None:
    print(f"gate: {message}", file=sys.stderr, flush=True)


def restricted_api(path: str) -> str | None:
    """Which Triton restricted-API group an HTTP path belongs to (None: open)."""
    if path.startswith(("/v2/systemsharedmemory", "/v2/cudasharedmemory")):
        return "shared-memory"
    if path.startswith("/v2/trace") or re.match(r"^/v2/models/[^/]+(/versions/[^/]+)?/trace", path):
        return "trace"
    if path.startswith("/v2/logging"):
        return "logging"
    if path.startswith("/v2/repository"):
        return "model-repository"
    return None


def check_json_depth(body: bytes) -> None:
    """Refuse a JSON body nested deeper than the standard parser allows (Triton's recursive
    parser overflows its stack far above that); other bodies pass unchanged."""
    if body.lstrip()[:1] not in (b"{", b"["):
        return
    try:
        json.loads(body)
    except RecursionError:
        raise GateError(400, "request JSON is nested too deeply") from None
    except ValueError:
        pass  # Triton answers malformed JSON itself


# -- isolation --------------------------------------------------------------------------------
def isolate() -> str:
    """Private network + mount namespace with a private /dev/shm; returns what was done."""
    if os.geteuid() != 0:
        return (
            "not isolated (needs root): tritonserver listens on private loopback ports other local "
            "users can reach, and its /dev/shm regions are in the host's /dev/shm"
        )
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    if libc.unshare(CLONE_NEWNET | CLONE_NEWNS) != 0:
        return f"not isolated: unshare failed (errno {ctypes.get_errno()})"
    loopback_up()
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return f"network isolated, but mount propagation could not be made private (errno {ctypes.get_errno()})"
    if libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", 0, b"mode=0700") != 0:
        return f"network isolated, but no private /dev/shm (errno {ctypes.get_errno()})"
    return "isolated: private network namespace (tritonserver unreachable from the host) and private /dev/shm"


def loopback_up() -> None:
    """``ip link set lo up`` without iproute2 (SIOCGIFFLAGS / SIOCSIFFLAGS)."""
    import fcntl
    import struct

    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, siocgifflags, request)[:18])[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sH", b"lo", flags | iff_up))


def _die_with_parent() -> None:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.geteuid() == 0:
        os.setpriority(os.PRIO_PROCESS, 0, 0)  # tritonserver at normal priority (the gate runs above it)


#: The gate's nice value when it may raise its priority (root): it uses little CPU, but on a
#: saturated machine every request waits for it twice; above the model it adds less latency.
GATE_NICE = -5


# -- the gate ---------------------------------------------------------------------------------
class Gate:
    def __init__(self, config: dict):
        self.cfg = config
        self.admin_header = config["admin_header"]
        self.admin_token = config["admin_token"]
        self.internal_token = config["internal_token"]
        self.user_mode = config["user_model_control_mode"]
        self.upstream_http = f"http://127.0.0.1:{config['private_ports'][0]}"
        self.upstream_grpc = f"127.0.0.1:{config['private_ports'][1]}"
        self.upstream_metrics = f"http://127.0.0.1:{config['private_ports'][2]}"
        self.default_max_body = int(config.get("max_body_bytes") or DEFAULT_MAX_BODY)
        self.monitor_interval = float(config.get("monitor_interval_s", 0.5))
        self.auto_reload = bool(config.get("auto_reload", True))
        self.triton: subprocess.Popen | None = None
        self.session = None
        self.configs: dict[str, dict] = {}
        self.broken: dict[str, float] = {}  # model -> when its stub was seen dead
        self.reloading: set[str] = set()
        self.changing: dict[str, float] = {}  # model -> until when a client (un)load is in flight
        self.draining = False
        self.in_flight = 0
        self.events: list[dict] = []

    # -- upstream ---------------------------------------------------------------------------
    def start_triton(self) -> None:
        """tritonserver as the gate's child; its log to ``log_path`` (None: the gate's own stdout)."""
        log_file = open(self.cfg["log_path"], "ab", buffering=0) if self.cfg.get("log_path") else None
        self.triton = subprocess.Popen(
            self.cfg["command"],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.cfg["work_dir"],
            preexec_fn=_die_with_parent,
        )
        log(f"tritonserver pid {self.triton.pid}")

    def internal_headers(self) -> dict:
        return {self.admin_header: self.internal_token}

    async def model_config(self, model: str) -> dict | None:
        config = self.configs.get(model)
        if config is None:
            async with self.session.get(f"{self.upstream_http}/v2/models/{model}/config") as resp:
                if resp.status != 200:
                    return None
                config = json.loads(await resp.read())
            self.configs[model] = config
        return config

    async def upstream_ready(self, path: str = "/v2/health/ready") -> bool:
        try:
            async with self.session.get(self.upstream_http + path) as resp:
                await resp.read()
                return resp.status == 200
        except Exception:  # noqa: BLE001 - not listening yet / gone
            return False

    # -- HTTP -------------------------------------------------------------------------------
    def is_admin(self, headers) -> bool:
        return headers.get(self.admin_header) == self.admin_token

    async def handle(self, request):
        from aiohttp import web

        # Match what Triton matches: the raw path (Triton decodes a model name itself, the same
        # way for the config lookup below as for the request).
        path = request.raw_path.split("?", 1)[0]
        try:
            api = restricted_api(path)
            admin = self.is_admin(request.headers)
            if api == "model-repository" and self.user_mode == "none" and LOAD_PATH.match(path):
                raise GateError(403, "model load/unload is disabled on this server (model-control-mode none)")
            if api == "model-repository" and self.user_mode == "none" and not admin:
                raise GateError(403, f"This API is restricted, expecting header '{self.admin_header}'")
            if api in self.cfg["restricted_apis"] and not admin:
                raise GateError(403, f"This API is restricted, expecting header '{self.admin_header}'")
            if path == "/v2/health/ready":
                return await self.readiness_response()
            ready = READY_PATH.match(path)
            if ready and ready.group(1) in self.broken:
                return web.Response(status=400)
            infer = INFER_PATH.match(path)
            generate = GENERATE_PATH.match(path)
            body = None
            if infer:
                if self.draining:
                    raise GateError(503, "server is shutting down")
                body = await self.checked_infer_body(request, infer.group(1), admin)
            else:
                if generate:
                    if self.draining:
                        raise GateError(503, "server is shutting down")
                    await self.check_model_access(generate.group(1), admin)
                limit = ADMIN_BODY_LIMIT if admin else OTHER_BODY_LIMIT
                body = await self.read_limited(request, limit, "this endpoint") if request.can_read_body else None
                if body:
                    check_json_depth(body)
            load = LOAD_PATH.match(path)
            if load:
                model = load.group(1)
                self.changing[model] = float("inf")
                old = (await asyncio.get_running_loop().run_in_executor(None, self.stubs)).get(model, set())
            try:
                return await self.forward(request, body, admin)
            finally:
                if load:
                    self.configs.pop(model, None)
                    asyncio.create_task(self.settle(model, old))
        except GateError as exc:
            return web.json_response({"error": exc.message}, status=exc.status)

    async def check_model_access(self, model: str, admin: bool) -> dict:
        config = await self.model_config(model)
        if config is None:
            raise GateError(404, f"Request for unknown model: '{model}' is not found")
        if config_parameter(config, "gate_internal") == "true" and not admin:
            raise GateError(403, f"model '{model}' is internal to its deployment; clients call the entry models")
        if model in self.broken:
            raise GateError(503, f"model '{model}' is being reloaded after its stub process died")
        return config

    @staticmethod
    async def read_limited(request, limit: int, what: str) -> bytes:
        if request.content_length is not None and request.content_length > limit:
            raise GateError(
                413, f"request body of {request.content_length} bytes is over the {limit}-byte limit of {what}"
            )
        chunks, size = [], 0
        async for chunk in request.content.iter_chunked(1 << 20):
            size += len(chunk)
            if size > limit:
                raise GateError(413, f"request body over the {limit}-byte limit of {what}")
            chunks.append(chunk)
        return b"".join(chunks)

    async def checked_infer_body(self, request, model: str, admin: bool) -> bytes:
        config = await self.check_model_access(model, admin)
        limit = body_limit(config, self.default_max_body)
        body = await self.read_limited(request, limit, f"model '{model}' (gate_max_body_bytes)")
        raw_length = request.headers.get("Inference-Header-Content-Length")
        try:
            header_length = int(raw_length) if raw_length is not None else None
        except ValueError:
            raise GateError(400, "Inference-Header-Content-Length is not an integer") from None
        validate_infer(model, config, body, header_length)
        return body

    async def forward(self, request, body: bytes | None, admin: bool):
        from aiohttp import web

        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() not in REQUEST_ONLY_DROP and k.lower() != self.admin_header
        }
        if admin:
            headers.update(self.internal_headers())
        self.in_flight += 1
        try:
            url = URL(self.upstream_http + request.raw_path, encoded=True)
            async with self.session.request(request.method, url, data=body, headers=headers) as resp:
                payload = await resp.read()
                out_headers = {k: v for k, v in resp.headers.items() if k.lower() not in HOP_BY_HOP}
                return web.Response(status=resp.status, body=payload, headers=out_headers)
        except Exception as exc:  # noqa: BLE001 - upstream gone (stopping, crashed)
            return web.json_response({"error": f"tritonserver unavailable: {type(exc).__name__}"}, status=503)
        finally:
            self.in_flight -= 1

    async def readiness_response(self):
        from aiohttp import web

        reasons = []
        if self.draining:
            reasons.append("shutting down")
        if self.broken:
            reasons.append(f"stub process died: {sorted(self.broken)} (reloading)")
        if not reasons and not await self.upstream_ready():
            reasons.append("tritonserver not ready")
        if reasons:
            return web.json_response({"error": "; ".join(reasons)}, status=503)
        return web.Response(status=200)

    async def handle_metrics(self, request):
        from aiohttp import web

        async with self.session.get(self.upstream_metrics + request.path_qs) as resp:
            return web.Response(
                status=resp.status, body=await resp.read(), content_type=resp.content_type or "text/plain"
            )

    # -- stubs and readiness -----------------------------------------------------------------
    def stubs(self) -> dict[str, set[int]]:
        found: dict[str, set[int]] = {}
        try:
            children = psutil.Process(self.triton.pid).children(recursive=True)
        except psutil.Error:
            return found
        for child in children:
            try:
                cmdline = child.cmdline()
            except psutil.Error:
                continue
            if cmdline and cmdline[0].endswith("triton_python_backend_stub") and len(cmdline) > 1:
                match = re.search(r"([^/]+)/\d+/[^/]+$", cmdline[1])
                found.setdefault(match.group(1) if match else cmdline[1], set()).add(child.pid)
        return found

    async def monitor(self) -> None:
        known: dict[str, set[int]] = {}
        while True:
            await asyncio.sleep(self.monitor_interval)
            if self.triton.poll() is not None:
                if not self.draining:
                    log(f"tritonserver exited with code {self.triton.returncode}; the gate exits too")
                    os.kill(os.getpid(), signal.SIGTERM)
                return
            try:
                known = await self.watch_stubs(known)
            except Exception as exc:  # noqa: BLE001 - the watch must outlive one bad round
                log(f"stub watch: {type(exc).__name__}: {exc}")

    async def ready_models(self) -> set[str]:
        async with self.session.post(
            f"{self.upstream_http}/v2/repository/index", json={}, headers=self.internal_headers()
        ) as resp:
            if resp.status != 200:
                return set()
            return {m["name"] for m in json.loads(await resp.read()) if m.get("state") == "READY"}

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
            if alive and not dead:  # a stub that died before it was ever tracked: count them
                config = await self.model_config(model)
                missing = expected_stubs(config) - len(alive) if config else 0
            if dead or missing > 0:
                dead = dead or [f"{missing} of {len(alive) + missing} instances"]
                self.broken[model] = now
                self.event("stub_died", model=model, pids=dead)
                log(f"stub process(es) {dead} of model '{model}' died; readiness is false")
                if self.auto_reload:
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
        self.changing[model] = time.monotonic() + 2 * self.monitor_interval

    async def reload(self, model: str) -> None:
        self.reloading.add(model)
        began = time.monotonic()
        loop = asyncio.get_running_loop()
        old = (await loop.run_in_executor(None, self.stubs)).get(model, set())
        try:
            async with self.session.post(
                f"{self.upstream_http}/v2/repository/index", json={}, headers=self.internal_headers()
            ) as resp:
                before = {m["name"] for m in json.loads(await resp.read()) if m.get("state") == "READY"}
            await self._repository_call(model, "unload")
            deadline = time.monotonic() + 60
            while await self.upstream_ready(f"/v2/models/{model}/ready") and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            await self._repository_call(model, "load")
            async with self.session.post(
                f"{self.upstream_http}/v2/repository/index", json={}, headers=self.internal_headers()
            ) as resp:
                after = {m["name"] for m in json.loads(await resp.read()) if m.get("state") == "READY"}
            for other in sorted(before - after):  # e.g. an ensemble unloaded with its step
                await self._repository_call(other, "load")
            self.configs.clear()
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
            self.reloading.discard(model)

    async def _repository_call(self, model: str, action: str) -> None:
        async with self.session.post(
            f"{self.upstream_http}/v2/repository/models/{model}/{action}", json={}, headers=self.internal_headers()
        ) as resp:
            text = await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"{action} {model}: HTTP {resp.status} {text[:200]!r}")

    def event(self, kind: str, **fields) -> None:
        record = {"event": kind, "time": time.time(), **fields}
        self.events.append(record)
        path = self.cfg.get("events_path")
        if path:
            with open(path, "a") as f:
                f.write(json.dumps(record) + "\n")

    # -- run ----------------------------------------------------------------------------------
    async def run(
        self, http_sock: socket.socket, grpc_sock: socket.socket | None, metrics_sock: socket.socket | None
    ) -> int:
        import aiohttp
        from aiohttp import web

        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=None),
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
        )
        app = web.Application(client_max_size=0)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=float(self.cfg.get("exit_timeout_s", 5))
        )
        await runner.setup()
        await web.SockSite(runner, http_sock).start()
        metrics_runner = None
        if metrics_sock is not None:
            metrics_app = web.Application()
            metrics_app.router.add_route("GET", "/{tail:.*}", self.handle_metrics)
            metrics_runner = web.AppRunner(metrics_app, access_log=None, handle_signals=False)
            await metrics_runner.setup()
            await web.SockSite(metrics_runner, metrics_sock).start()
        grpc_server = pump = None
        if grpc_sock is not None:
            from harness.serving.gate.grpc_proxy import start_grpc

            grpc_server, pump = await start_grpc(self, grpc_sock)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        monitor = asyncio.create_task(self.monitor())
        await stop.wait()
        # Drain: not ready, refuse new inference, let in-flight requests finish, then stop Triton.
        self.draining = True
        log(f"draining {self.in_flight} in-flight request(s)")
        deadline = time.monotonic() + float(self.cfg.get("exit_timeout_s", 5))
        while self.in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if grpc_server is not None:
            await grpc_server.stop(grace=max(0.0, deadline - time.monotonic()))
        if pump is not None:
            pump.close()
        await runner.cleanup()
        if metrics_runner is not None:
            await metrics_runner.cleanup()
        monitor.cancel()
        await self.session.close()
        code = 0
        if self.triton.poll() is None:
            self.triton.send_signal(signal.SIGTERM)
            try:
                await loop.run_in_executor(None, self.triton.wait, float(self.cfg.get("exit_timeout_s", 5)) + 10)
            except subprocess.TimeoutExpired:
                self.triton.kill()
        else:
            code = 1
        log(f"stopped (tritonserver exit code {self.triton.returncode})")
        return code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    config_path = Path(argv[0])
    config = json.loads(config_path.read_text())
    config_path.unlink()  # holds the admin token: gone once read
    fds = config["fds"]
    socks = {name: socket.socket(fileno=fd) if fd is not None else None for name, fd in fds.items()}
    if config.get("isolate", True):
        outcome = isolate()
    else:
        outcome = "not isolated (isolate=False)"
    log(outcome)
    if os.geteuid() == 0 and config.get("raise_priority", True):
        os.setpriority(os.PRIO_PROCESS, 0, GATE_NICE)
    gate = Gate(config)
    gate.start_triton()
    try:
        import uvloop  # a faster event loop where installed (pyproject.toml)

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    return runner(gate.run(socks["http"], socks.get("grpc"), socks.get("metrics")))


if __name__ == "__main__":
    raise SystemExit(main())
