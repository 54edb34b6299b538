"""A served target's process tree (its CPU time, waiting until it is idle) and a peer server's process."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

from harness.measuring.pair_bench import cpu_seconds
from harness.measuring.pinning import cores_label
from harness_lab.peers.workloads import openai_body
from triton_gate.serve import free_port


def tree_cpu_parts(pid: int, root: str = "gate") -> dict[str, float]:
    """User + system CPU seconds of ``pid`` (named ``root``: our front gate, or a peer server) and its
    descendants by part (``tritonserver``, ``stub:<model>``, a peer's programs); empty when gone."""
    try:
        parts = cpu_seconds(pid)
    except psutil.NoSuchProcess:
        return {}
    parts.pop("generator")
    if "gate" in parts:  # cpu_seconds names the tree's root "gate"
        parts[root] = parts.pop("gate")
    return parts


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its descendants (0 when gone)."""
    return sum(tree_cpu_parts(pid).values())


def wait_idle(pid: int, timeout_s: float, busy_share: float = 0.15) -> None:
    """Wait until the process tree of ``pid`` stops using CPU (requests a closed generator left in
    flight have drained), so they do not run into the next target's window."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = tree_cpu_s(pid)
        time.sleep(0.25)
        if (tree_cpu_s(pid) - before) / 0.25 < busy_share:
            return
    print(f"warning: server {pid} still busy after {timeout_s:.0f} s", flush=True)


#: The name requests ask a peer for (any: it serves one model).
SERVED_NAME = "embedding-model"


class PeerStartError(RuntimeError):
    """The peer server did not become ready."""


class PeerServer:
    """A peer embedding server on a free loopback port, pinned to ``cores`` (``threads`` threads), in its
    own session (killed as a group), logging to its ``work_dir``, ready when ``GET /health`` answers 200;
    ``POST url`` takes OpenAI's embeddings body. Subclasses set ``command``, ``cwd`` and ``env``."""

    name = "peer"
    route = "/embeddings"

    def __init__(self, cores: set[int] | None, threads: int | None):
        self.cores = set(cores) if cores else None
        self.threads = threads or (len(self.cores) if self.cores else os.cpu_count())
        self.port = free_port()
        self.work_dir = Path(tempfile.mkdtemp(prefix=f"{self.name}-"))
        self.log_path = self.work_dir / f"{self.name}.log"
        self.process: subprocess.Popen | None = None
        self.command: list[str] = []
        self.cwd: Path = self.work_dir
        self.env: dict[str, str] = dict(os.environ)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.route}"

    def body(self, texts: list[str], encoding_format: str | None = None) -> bytes:
        return openai_body(texts, SERVED_NAME, encoding_format)

    def start(self, timeout_s: float = 180.0) -> None:
        """Start the server; poll its health route until it answers or ``timeout_s`` passes."""
        pin = ["taskset", "-c", cores_label(self.cores)] if self.cores else []
        self.process = subprocess.Popen(
            pin + self.command,
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self.log_path.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise PeerStartError(f"{self.name} exited {self.process.returncode}:\n{self.logs()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        self.stop()
        raise PeerStartError(f"{self.name} not ready after {timeout_s:.0f} s:\n{self.logs()[-3000:]}")

    def logs(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
