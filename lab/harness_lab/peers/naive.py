"""The naive peer: ``naive_app`` (FastAPI + uvicorn + sentence-transformers) in this venv, one
uvicorn worker pinned to the server's cores, torch on ``threads`` threads (the ``peers`` extra)."""

from __future__ import annotations

import os
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

from harness import PROJECT_ROOT
from harness.serving.gate.serve import free_port
from harness_lab.peers.processes import PeerServer
from harness_lab.peers.workloads import openai_body

#: The name requests ask the naive server for (any: it serves one model).
SERVED_NAME = "embedding-model"


class NaiveServer(PeerServer):
    """``uvicorn harness_lab.peers.naive_app:app`` on a free loopback port; ``POST /v1/embeddings``."""

    name = "naive-fastapi"

    def __init__(self, model_dir: Path, cores: set[int] | None = None, threads: int | None = None):
        self.cores = set(cores) if cores else None
        self.threads = threads or (len(self.cores) if self.cores else os.cpu_count())
        port = free_port()
        command = [
            sys.executable,
            "-m",
            "uvicorn",
            "harness_lab.peers.naive_app:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--log-level",
            "warning",
            "--no-access-log",
        ]
        if self.cores:
            command = ["taskset", "-c", ",".join(map(str, sorted(self.cores)))] + command
        env = dict(os.environ)
        env.update(
            {
                "NAIVE_MODEL_DIR": str(model_dir),
                "NAIVE_SERVED_NAME": SERVED_NAME,
                "HF_HUB_OFFLINE": "1",
                "OMP_NUM_THREADS": str(self.threads),
            }
        )
        super().__init__(command, PROJECT_ROOT, env, Path(tempfile.mkdtemp(prefix="naive-fastapi-")), port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/embeddings"

    def describe(self) -> str:
        return (
            f"FastAPI {version('fastapi')} + uvicorn {version('uvicorn')} (1 worker) + sentence-transformers "
            f"{version('sentence-transformers')} (torch {version('torch')}, {self.threads} threads), "
            "each request encoded on its own"
        )

    def body(self, texts: list[str], encoding_format: str | None = None) -> bytes:
        return openai_body(texts, SERVED_NAME, encoding_format)
