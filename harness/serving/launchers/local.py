"""The default launcher: the tritonserver binary shipped in the ``nvidia-pytriton`` wheel, no Docker.

The harness assembles a backend directory (the Python backend with the stub of the running
interpreter, plus the harness's own backends), binds 127.0.0.1 on free ports and serves through
the front gate (``triton_gate``), which starts tritonserver behind it; ``gate=False``
starts tritonserver directly on the public ports (to measure the gate's cost).
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import uuid
import warnings
from importlib.metadata import version
from pathlib import Path

import psutil

from harness import PROJECT_ROOT
from harness.repository import RepositoryError
from harness.serving.launchers.base import ServerOptions, ServerStartError, StartedTritonServer
from harness.serving.packenv import check_repository, local_python
from triton_gate import sigterm_when_parent_dies
from triton_gate.config import GateConfig
from triton_gate.policy import GatePolicy
from triton_gate.serve import close_sockets, free_ports, gate_config, listen_flags, public_sockets, restricted_apis

#: Python-based backends copied into the local server's backend dir (they run in its stubs).
HARNESS_BACKENDS = PROJECT_ROOT / "backends"


def pytriton_root() -> Path:
    """Folder of the tritonserver distribution inside the nvidia-pytriton wheel."""
    import pytriton

    return Path(pytriton.__file__).resolve().parent / "tritonserver"


def stub_for(python_version: str) -> Path:
    """The python-backend stub built for ``python_version`` (e.g. '3.11')."""
    stub = pytriton_root() / "python_backend_stubs" / python_version / "triton_python_backend_stub"
    if not stub.exists():
        available = sorted(p.name for p in (pytriton_root() / "python_backend_stubs").iterdir())
        raise FileNotFoundError(f"no Triton python stub for Python {python_version}; the wheel has {available}")
    return stub


def assemble_backend_dir(dest: Path, python_version: str | None = None) -> Path:
    """Lay out ``dest/python`` (backend + matching stub) and each harness backend's
    ``dest/<name>/model.py`` (``onnxruntime``, ``openvino``: backends/) beside the
    ``batched_runs.py`` they share."""
    python_version = python_version or local_python()
    source = pytriton_root() / "backends" / "python"
    python_dir = dest / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    # Copies, not links: Triton refuses backend files that resolve outside the backend dir.
    for item in source.iterdir():
        if item.name != "triton_python_backend_stub" and not item.is_dir():
            shutil.copy2(item, python_dir / item.name)
    shutil.copy2(stub_for(python_version), python_dir / "triton_python_backend_stub")
    for backend in HARNESS_BACKENDS.iterdir():
        if (backend / "model.py").exists():
            (dest / backend.name).mkdir(exist_ok=True)
            for source in (backend / "model.py", HARNESS_BACKENDS / "batched_runs.py"):
                shutil.copy2(source, dest / backend.name / source.name)
    return dest


class LocalTritonServer(StartedTritonServer):
    """tritonserver from the pip wheel, as a child process that dies with its parent."""

    mode = "local"
    #: The restricted APIs need ``admin_headers`` with the gate or without it (``listen_flags``).
    restricted = True

    def __init__(
        self,
        options: ServerOptions,
        work_dir: str | Path | None = None,
        exit_timeout_s: int = 5,
        ports: tuple[int, int, int] | None = None,
        host: str = "127.0.0.1",
        stub_python: str | None = None,
        gate: bool = True,
        gate_options: dict | None = None,
    ):
        chosen = free_ports(6)  # public and private ports distinct from each other
        super().__init__(options, host, ports or chosen[:3], exit_timeout_s)
        if host not in ("127.0.0.1", "localhost", "::1"):
            message = (
                f"tritonserver will listen on {host}: its inference API is open to the network with no "
                "TLS and no authentication; put TLS and authentication in front of it"
            )
            warnings.warn(message, stacklevel=2)
            print(f"WARNING: {message}", file=sys.stderr, flush=True)
        self.stub_python = stub_python
        self.gate = gate
        self.gate_options = dict(gate_options or {})
        #: Where tritonserver itself listens when behind the gate (private loopback ports).
        self.private_ports = chosen[3:] if gate else None
        #: Token of tritonserver's own restricted APIs behind the gate; never given to clients.
        self.internal_token = uuid.uuid4().hex
        self._own_work_dir = work_dir is None
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix="triton-harness-"))
        self.shm_prefix = f"harness_{os.getpid()}_{uuid.uuid4().hex[:8]}_"
        self.log_path = self.work_dir / "tritonserver.log"
        #: The repository served.
        self.repository = Path(options.model_repository)
        self.process: subprocess.Popen | None = None
        self._log_file = None
        self._final_logs = ""
        self._final_events: list[dict] = []

    def restricted_apis(self) -> list[str]:
        """APIs refused without ``admin_headers``: model-repository too unless a control mode was asked for."""
        return restricted_apis(self.options.model_control_mode)

    def local_triton_command(self) -> list[str]:
        """tritonserver's own command line on this machine, before the gate (if any) moves it onto private ports."""
        return self.triton_command(
            str(pytriton_root() / "bin" / "tritonserver"),
            str(self.repository.resolve()),
            f"--backend-directory={self.work_dir / 'backends'}",
            "--allow-gpu-metrics=false",
            f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}",
        )

    def command(self) -> list[str]:
        """The full command line: tritonserver's (``local_triton_command``), then either the public
        ports or, behind the gate, what ``gated_command`` makes of it (the rewrite the container's gate uses too)."""
        if self.gate:
            return self.gate_config({}).command
        ports = (self.http_port, self.grpc_port, self.metrics_port)
        return self.local_triton_command() + listen_flags(
            self.host, ports, self.restricted_apis(), self.admin_token, self.options.allow_grpc
        )

    def gate_config(self, fds: dict[str, int]) -> GateConfig:
        """What the gate process needs (written to a 0600 file the gate deletes once read)."""
        opts = self.options
        return gate_config(
            self.local_triton_command(),
            work_dir=self.work_dir,
            admin_token=self.admin_token,
            grpc=opts.allow_grpc,
            private_ports=self.private_ports,
            internal_token=self.internal_token,
            log_path=str(self.log_path),
            events_path=str(self.work_dir / "gate-events.jsonl"),
            fds=fds,
            policy=opts.gate_policy or GatePolicy(),
            api_keys=list(opts.api_keys),
            **self.gate_options,
        )

    def gate_events(self) -> list[dict]:
        """What the gate recorded (stub deaths, reloads), oldest first."""
        path = self.work_dir / "gate-events.jsonl"
        if not path.exists():
            return list(self._final_events)
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def environment(self) -> dict[str, str]:
        """Library path for the binary and the stub; the venv first on PATH for the stub."""
        from pytriton.utils.distribution import get_libs_path

        env = dict(os.environ)
        libs = [
            str(get_libs_path()),
            str(pytriton_root() / "external_libs"),
            str(pytriton_root() / "lib"),
            sysconfig.get_config_var("LIBDIR") or "",
        ]
        env["LD_LIBRARY_PATH"] = ":".join(
            [p for p in libs if p and Path(p).exists()] + [env.get("LD_LIBRARY_PATH", "")]
        )
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
        env.update(self.options.env)
        return env

    def start(self) -> None:
        """Check configs and packed envs against the stub's Python, assemble backends, start.

        Python models run with the project's venv: a packed env (``options.python_env``) is
        served in docker mode, in the image whose stub it was packed for."""
        if self.options.python_env:
            raise ServerStartError(
                f"packed env {self.options.python_env}: the local server runs Python models with the "
                "project's venv; serve a packed env in docker mode (--mode docker)"
            )
        try:
            problems = check_repository(
                self.repository, self.stub_python or local_python(), model_config_name=self.options.model_config_name
            )
        except RepositoryError as exc:
            raise ServerStartError(str(exc)) from None
        if problems:
            raise ServerStartError(
                "packed Python environment problem(s), the server was not started:\n  " + "\n  ".join(problems)
            )
        assemble_backend_dir(self.work_dir / "backends", self.stub_python)
        self._log_file = open(self.log_path, "ab")  # O_APPEND: the gate and tritonserver both write it
        if self.gate:
            self._start_gate()
            return
        self.process = self._spawn(self.command())

    def _spawn(self, argv: list[str], pass_fds: list[int] | None = None) -> subprocess.Popen:
        """A child in its own session, logging to the server log, that dies with this process."""
        return subprocess.Popen(
            argv,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.environment(),
            cwd=self.work_dir,
            preexec_fn=sigterm_when_parent_dies,
            start_new_session=True,
            pass_fds=pass_fds or (),
        )

    def _start_gate(self) -> None:
        """The gate with its sockets bound here (``public_sockets``), handed over as file descriptors."""
        ports = (self.http_port, self.grpc_port, self.metrics_port)
        try:
            socks = public_sockets(self.host, ports, self.options.allow_grpc)
        except OSError as exc:
            raise ServerStartError(
                f"{exc.strerror} (another server there? pick free ports with --http-port/--grpc-port/--metrics-port)"
            ) from None
        try:
            fds = {name: sock.fileno() for name, sock in socks.items()}
            config_path = self.work_dir / "gate.json"
            fd = os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(self.gate_config(fds).model_dump_json())
            self.process = self._spawn(
                [sys.executable, "-m", "triton_gate", str(config_path)],
                pass_fds=list(fds.values()),
            )
        finally:
            close_sockets(socks)

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def logs(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return self._final_logs

    def backend_implementation(self, backend: str) -> str:
        if (HARNESS_BACKENDS / backend / "model.py").exists():
            return f"{backend} via harness Python backend ({backend} {version(backend)})"
        return backend

    def stub_envs(self) -> dict[str, list[str]]:
        """Which unpacked env (``/tmp/python_env_*/<n>``) each Python-backend stub runs in, by its
        model path, read from ``/proc`` (not guessed): env folders whose shared libraries (numpy's,
        cv2's ...) it loaded (``maps``) or whose ``bin`` the backend put on its PATH (``environ``).
        An empty list: the stub took its packages from elsewhere (the harness's own venv)."""
        found: dict[str, set[str]] = {}
        for child in psutil.Process(self.process.pid).children(recursive=True) if self.is_running() else []:
            try:
                cmdline = child.cmdline()
                if not cmdline or not cmdline[0].endswith("triton_python_backend_stub"):
                    continue
                seen = Path(f"/proc/{child.pid}/maps").read_text()
                seen += "\n" + Path(f"/proc/{child.pid}/environ").read_bytes().decode(errors="replace").replace(
                    "\0", "\n"
                )
            except (psutil.Error, OSError):
                continue
            model = cmdline[1] if len(cmdline) > 1 else str(child.pid)
            found.setdefault(model, set()).update(re.findall(r"(/tmp/python_env_[^/\s:]+/\d+)/", seen))
        return {model: sorted(envs) for model, envs in found.items()}

    def stop(self) -> None:
        """SIGTERM, wait, SIGKILL the group; then remove our shm regions and unpacked envs."""
        own_envs = {str(Path(env).parent) for envs in self.stub_envs().values() for env in envs}
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=self.exit_timeout_s + (25 if self.gate else 10))
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        for region in glob.glob(f"/dev/shm/{self.shm_prefix}*"):
            Path(region).unlink(missing_ok=True)
        for env_dir in own_envs:
            shutil.rmtree(env_dir, ignore_errors=True)
        if self._own_work_dir and self.work_dir.exists():
            self._final_logs, self._final_events = self.logs(), self.gate_events()
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def shm_regions(self) -> list[str]:
        """This server's shared-memory regions in /dev/shm (its stubs'; none left after a clean stop)."""
        return glob.glob(f"/dev/shm/{self.shm_prefix}*")
