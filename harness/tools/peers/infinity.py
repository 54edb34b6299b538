"""infinity-emb 0.0.78 serving the same sentence-transformers model, in its own venv (``make peer-infinity``).

The optimum engine runs the same ONNX file as the served ONNX model (copied into a copy of the
model folder; optimum 1.27 wants an ``.onnx`` inside the folder and a relative ``--model-id``,
so the server starts inside that folder), mean-pooled as the model declares. The torch
engine runs the safetensors weights with torch 2.8.0. Both pinned to the server's cores.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from harness import PROJECT_ROOT

VENV = Path(os.environ.get("INFINITY_VENV") or PROJECT_ROOT / ".venv-infinity")
#: The name requests ask infinity for (any: it serves one model).
SERVED_NAME = "embedding-model"
ENGINES = ("optimum", "torch")


class PeerStartError(RuntimeError):
    """The peer server did not become ready."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def infinity_version() -> str:
    from importlib.metadata import PathDistribution

    for dist_info in VENV.glob("lib/python*/site-packages/infinity_emb-*.dist-info"):
        return PathDistribution(dist_info).version
    return "unknown"


class InfinityServer:
    """``infinity_emb v2`` with ``engine`` on ``cores``, on a free loopback port."""

    def __init__(
        self,
        engine: str,
        model_dir: Path,
        onnx_file: Path,
        cores: set[int] | None = None,
        threads: int | None = None,
        batch_size: int = 64,
    ):
        if engine not in ENGINES:
            raise ValueError(f"engine {engine!r}: one of {ENGINES}")
        binary = VENV / "bin" / "infinity_emb"
        if not binary.exists():
            raise PeerStartError(f"{binary} is missing: run `make peer-infinity`")
        self.engine = engine
        self.cores = set(cores) if cores else None
        self.threads = threads or (len(self.cores) if self.cores else os.cpu_count())
        self.port = _free_port()
        self.work_dir = Path(tempfile.mkdtemp(prefix=f"infinity-{engine}-"))
        self.model_copy = self.work_dir / "model"
        shutil.copytree(model_dir, self.model_copy)
        if engine == "optimum":
            shutil.copy(onnx_file, self.model_copy / "model.onnx")
        self.command = [
            str(binary),
            "v2",
            "--model-id",
            ".",
            "--served-model-name",
            SERVED_NAME,
            "--engine",
            engine,
            "--device",
            "cpu",
            "--pooling-method",
            "mean",
            "--batch-size",
            str(batch_size),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--log-level",
            "warning",
            "--no-model-warmup",
        ]
        if self.cores:
            self.command = ["taskset", "-c", ",".join(map(str, sorted(self.cores)))] + self.command
        self.process: subprocess.Popen | None = None
        self.log_path = self.work_dir / "infinity.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/embeddings"

    def describe(self) -> str:
        return f"infinity-emb {infinity_version()} ({self.engine} engine, {self.threads} threads)"

    def body(self, texts: list[str]) -> bytes:
        return json.dumps({"model": SERVED_NAME, "input": texts}, ensure_ascii=False, separators=(",", ":")).encode()

    def start(self, timeout_s: float = 180.0) -> None:
        """Start the server; poll ``/health`` until it answers or ``timeout_s`` passes."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(
            {
                "HF_HUB_OFFLINE": "1",
                "INFINITY_ANONYMOUS_USAGE_STATS": "0",
                "DO_NOT_TRACK": "1",
                "OMP_NUM_THREADS": str(self.threads),
                "PATH": f"{VENV / 'bin'}:{env.get('PATH', '')}",
            }
        )
        self.process = subprocess.Popen(
            self.command,
            cwd=self.model_copy,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self.log_path.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise PeerStartError(
                    f"infinity ({self.engine}) exited {self.process.returncode}:\n{self.logs()[-3000:]}"
                )
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        self.stop()
        raise PeerStartError(f"infinity ({self.engine}) not ready after {timeout_s:.0f} s:\n{self.logs()[-3000:]}")

    def embed(self, texts: list[str]) -> list[list[float]]:
        request = urllib.request.Request(self.url, data=self.body(texts), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as reply:
            return [item["embedding"] for item in json.loads(reply.read())["data"]]

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

    def __enter__(self) -> InfinityServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
