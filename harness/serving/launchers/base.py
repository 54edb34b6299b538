"""One interface for every way of getting a tritonserver: start, wait ready, URLs, logs, stop."""

from __future__ import annotations

import abc
import re
import signal
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import tritonclient.http as httpclient

from triton_gate.config import ADMIN_HEADER
from triton_gate.policy import GatePolicy

#: Log lines that mean the server will never become ready (or is already broken).
FAILURE_PATTERNS = [
    re.compile(p)
    for p in (
        r"error while loading shared libraries",
        r"failed to load '[^']+'",
        r"failed to load model",
        r"Failed to (?:start|initialize|create) (?:the )?stub",
        r"Stub process '[^']*' is not healthy",
        r"Unable to start the stub",
        r"error: creating server",
        r"Poll failed for model directory",
        r"Error parsing text-format",
        r"^E\d{4} ",
        r"Unrecognized option",
    )
]

#: Error-looking lines that are harmless on CPU-only machines (docs/troubleshooting.md).
HARMLESS_PATTERNS = [
    re.compile(p, re.IGNORECASE)
    for p in (r"cuda", r"nvml", r"dcgm", r"unable to create stream", r"gpu metrics", r"pinned memory")
]


def port_in_use(host: str, port: int) -> bool:
    """True when ``host:port`` cannot be bound (as tritonserver or docker-proxy would bind it, SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


#: What each of a server's (HTTP, gRPC, metrics) ports is, and the flag that picks another.
PORT_FLAGS = (("HTTP", "--http-port"), ("gRPC", "--grpc-port"), ("metrics", "--metrics-port"))


def ports_in_use(host: str, ports: tuple[int | None, int | None, int | None]) -> list[str]:
    """A message per port of (HTTP, gRPC, metrics) that cannot be bound on ``host`` (None: not served)."""
    return [
        f"port {port} ({name}) on {host} is in use: stop what listens there or choose another port with {flag}"
        for (name, flag), port in zip(PORT_FLAGS, ports)
        if port is not None and port_in_use(host, port)
    ]


class ServerStartError(RuntimeError):
    """The server did not become ready; the message carries the server's own log lines."""


@dataclass
class ServerOptions:
    """What a launcher needs to serve one model repository for one target."""

    model_repository: str
    target: str = "cpu"
    model_config_name: str | None = None
    backend_config: list[str] = field(default_factory=list)
    extra_args: list[str] = field(default_factory=list)
    required_models: list[str] = field(default_factory=list)
    model_control_mode: str = "none"
    allow_grpc: bool = True
    env: dict[str, str] = field(default_factory=dict)
    startup_timeout_s: float = 180.0
    image: str | None = None
    device_ids: list[int] | None = None
    mounts: dict[str, str] = field(default_factory=dict)
    #: Packed env tarball for the Python-backend models, docker mode only: served from a repository
    #: copy whose Python configs name it (``docker_envs.attach_packed_env``).
    python_env: str | None = None
    #: Python of the image's backend stub as the deployment's manifest states it (docker mode; an
    #: image label saying otherwise wins).
    stub_python: str | None = None
    #: What the front gate enforces per model (``triton_gate.policy``); None: every model public.
    gate_policy: GatePolicy | None = None
    #: API keys of the gate's bearer-token auth (``triton_gate.auth``); empty: off.
    api_keys: list[str] = field(default_factory=list)


def find_failure(log_text: str) -> list[str]:
    """Return the log lines that show a fatal start-up problem (empty when none)."""
    hits = []
    for line in log_text.splitlines():
        if any(p.search(line) for p in FAILURE_PATTERNS) and not any(p.search(line) for p in HARMLESS_PATTERNS):
            hits.append(line.strip())
    return hits


class TritonServer(abc.ABC):
    """A tritonserver reachable over HTTP (and gRPC unless the image lacks it)."""

    mode: str = "abstract"

    def __init__(self, options: ServerOptions):
        self.options = options

    @property
    @abc.abstractmethod
    def http_url(self) -> str:
        """``host:port`` of the HTTP/REST endpoint."""

    @property
    def grpc_url(self) -> str | None:
        """``host:port`` of the gRPC endpoint, or None when the server has no gRPC."""
        return None

    @property
    def metrics_url(self) -> str | None:
        """``host:port`` of the Prometheus metrics endpoint, when known."""
        return None

    @abc.abstractmethod
    def start(self) -> None:
        """Start the server (returns before it is ready)."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop the server and clean up what it left behind."""

    def logs(self) -> str:
        """The server's log so far ('' when it cannot be read)."""
        return ""

    def is_running(self) -> bool:
        """False once the server process is known to have exited."""
        return True

    def backend_implementation(self, backend: str) -> str:
        """Which implementation serves ``backend`` on this server, for the results matrix."""
        return backend

    def describe(self) -> dict:
        """Mode, version and endpoints, for records and for the user."""
        version = None
        try:
            version = httpclient.InferenceServerClient(self.http_url).get_server_metadata()["version"]
        except Exception:  # noqa: BLE001 - describe() must work on a broken server too
            pass
        return {
            "server_mode": self.mode,
            "server_version": version,
            "http_url": self.http_url,
            "grpc_url": self.grpc_url,
            "metrics_url": self.metrics_url,
        }

    def wait_ready(self, timeout_s: float | None = None, models: Iterable[str] | None = None) -> float:
        """Poll readiness against a deadline, reading the log as it goes; returns seconds waited.

        Fails fast (within a poll interval) when the process exits or the log shows a model
        that failed to load or a stub that cannot start, instead of waiting for the deadline.
        """
        timeout_s = timeout_s if timeout_s is not None else self.options.startup_timeout_s
        models = list(models if models is not None else self.options.required_models)
        started = time.monotonic()
        deadline = started + timeout_s
        client = httpclient.InferenceServerClient(self.http_url, connection_timeout=2, network_timeout=2)
        try:
            while True:
                if not self.is_running():
                    raise ServerStartError(
                        self._failure_message("tritonserver exited during start-up", find_failure(self.logs()))
                    )
                failures = find_failure(self.logs())
                if failures:
                    raise ServerStartError(self._failure_message("tritonserver reported a start-up failure", failures))
                if self._ready(client, models, self.auth_headers()):
                    return time.monotonic() - started
                if time.monotonic() > deadline:
                    raise ServerStartError(self._failure_message(f"tritonserver not ready after {timeout_s:.0f} s"))
                time.sleep(0.25)
        finally:
            client.close()

    def auth_headers(self) -> dict[str, str]:
        """The bearer token of the gate's first API key (none when auth is off)."""
        keys = self.options.api_keys
        return {"Authorization": f"Bearer {keys[0]}"} if keys else {}

    @staticmethod
    def _ready(client: httpclient.InferenceServerClient, models: list[str], headers: dict | None = None) -> bool:
        try:
            if not client.is_server_ready(headers=headers):
                return False
            return all(client.is_model_ready(m, headers=headers) for m in models)
        except Exception:  # noqa: BLE001 - not listening yet
            return False

    def _failure_message(self, headline: str, lines: list[str] | None = None) -> str:
        tail = "\n".join(self.logs().splitlines()[-40:])
        parts = [f"{headline} ({self.mode} server, repository {self.options.model_repository})"]
        if lines:
            parts.append("Relevant log lines:\n  " + "\n  ".join(lines[:20]))
        parts.append("Log tail:\n" + tail)
        return "\n".join(parts)

    def __enter__(self) -> TritonServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def interrupt_on_sigterm() -> None:
    """Turn the first SIGTERM or Ctrl-C into one KeyboardInterrupt, so that servers are stopped the
    same way on both, and ignore the ones after it: ``make`` passes a SIGTERM on to its children, so
    a process group gets it more than once, and a second one must not cut the stop short."""

    def interrupt(signum, frame):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)


def serve_in_foreground(server: TritonServer, on_ready: Callable[[TritonServer, float], None]) -> int:
    """Start ``server`` and hold it until Ctrl-C or SIGTERM (exit status 0) or until it exits by itself
    (1, its log tail on stderr).

    ``on_ready(server, seconds_to_ready)`` tells the user what is served. A start failure prints the
    launcher's one-line error and returns 1. The server is stopped whatever happens, and the call
    returns only when its ports can be bound again.
    """
    interrupt_on_sigterm()
    began = time.monotonic()
    try:
        server.start()
        server.wait_ready()
        on_ready(server, time.monotonic() - began)
        print("Ctrl-C to stop.", flush=True)
        while server.is_running():
            time.sleep(0.5)
        print("tritonserver exited:\n" + "\n".join(server.logs().splitlines()[-30:]), file=sys.stderr)
        return 1
    except ServerStartError as exc:
        print(exc, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopping tritonserver")
        return 0
    finally:
        stop_undisturbed(server)


def stop_undisturbed(server: TritonServer, ports_free_within_s: float = 30.0) -> None:
    """Stop ``server`` with further Ctrl-C / SIGTERM ignored (interrupt_on_sigterm), then wait
    until its ports are free."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    server.stop()
    if not isinstance(server, StartedTritonServer):
        return
    ports = (server.http_port, server.grpc_port, server.metrics_port)
    deadline = time.monotonic() + ports_free_within_s
    while (busy := ports_in_use(server.host, ports)) and time.monotonic() < deadline:
        time.sleep(0.1)
    if busy:
        print("; ".join(busy), file=sys.stderr)


class StartedTritonServer(TritonServer):
    """A server the harness starts itself (local process or container): it owns host and ports, the
    tritonserver command line (``triton_command``) and the admin token of its restricted APIs."""

    #: Whether clients need ``admin_headers`` for the restricted APIs (set by each launcher).
    restricted: bool = False

    def __init__(
        self,
        options: ServerOptions,
        host: str,
        ports: tuple[int, int, int],
        exit_timeout_s: int = 5,
    ):
        super().__init__(options)
        self.host = host
        self.http_port, self.grpc_port, self.metrics_port = ports
        self.exit_timeout_s = exit_timeout_s
        #: Token of the restricted APIs; reaches the server in a file or a private flag, never a client.
        self.admin_token = uuid.uuid4().hex

    @property
    def http_url(self) -> str:
        return f"{self.host}:{self.http_port}"

    @property
    def grpc_url(self) -> str | None:
        return f"{self.host}:{self.grpc_port}" if self.options.allow_grpc else None

    @property
    def metrics_url(self) -> str:
        return f"{self.host}:{self.metrics_port}"

    @property
    def admin_headers(self) -> dict[str, str]:
        """Headers a client needs for the restricted APIs and internal models (none when unrestricted)."""
        return {ADMIN_HEADER: self.admin_token} if self.restricted else {}

    def triton_command(self, binary: str, repository: str, *where: str) -> list[str]:
        """tritonserver's command line: ``binary`` serving ``repository`` with the flags ``where`` it
        runs needs, then the flags that follow from the options (the same for every launcher)."""
        opts = self.options
        args = [
            binary,
            f"--model-repository={repository}",
            *where,
            f"--exit-timeout-secs={self.exit_timeout_s}",
            f"--model-control-mode={opts.model_control_mode}",
            f"--allow-grpc={'true' if opts.allow_grpc else 'false'}",
        ]
        if opts.model_config_name:
            args.append(f"--model-config-name={opts.model_config_name}")
        args += [f"--backend-config={value}" for value in opts.backend_config]
        if opts.model_control_mode == "explicit":
            args += [f"--load-model={m}" for m in opts.required_models]
        return args + list(opts.extra_args)


def _strip_scheme(url: str) -> str:
    return url.split("://", 1)[-1].rstrip("/")


class ExternalTritonServer(TritonServer):
    """A tritonserver someone else started at ``http_url`` (and optionally ``grpc_url``): the
    harness only connects to it; start and stop do nothing."""

    mode = "external"

    def __init__(
        self, options: ServerOptions, http_url: str, grpc_url: str | None = None, metrics_url: str | None = None
    ):
        super().__init__(options)
        self._urls = [_strip_scheme(url) if url else None for url in (http_url, grpc_url, metrics_url)]

    @property
    def http_url(self) -> str:
        return self._urls[0]

    @property
    def grpc_url(self) -> str | None:
        return self._urls[1]

    @property
    def metrics_url(self) -> str | None:
        return self._urls[2]

    def start(self) -> None:
        """Nothing to start: the server is already there."""

    def stop(self) -> None:
        """Nothing to stop: the server is not ours."""
