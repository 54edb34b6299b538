"""The naive peer: ``naive_app`` (FastAPI + uvicorn + sentence-transformers) in this venv, one
uvicorn worker pinned to the server's cores, torch on ``threads`` threads (the ``peers`` extra)."""

from __future__ import annotations

import sys
from importlib.metadata import version
from pathlib import Path

from harness import PROJECT_ROOT
from harness_lab.peers.processes import SERVED_NAME, PeerServer


class NaiveServer(PeerServer):
    """``uvicorn harness_lab.peers.naive_app:app``; ``POST /v1/embeddings``."""

    name = "naive-fastapi"
    route = "/v1/embeddings"

    def __init__(self, model_dir: Path, cores: set[int] | None = None, threads: int | None = None):
        super().__init__(cores, threads)
        options = f"--host 127.0.0.1 --port {self.port} --workers 1 --log-level warning --no-access-log"
        self.command = [sys.executable, "-m", "uvicorn", "harness_lab.peers.naive_app:app", *options.split()]
        self.cwd = PROJECT_ROOT
        self.env.update(
            {
                "NAIVE_MODEL_DIR": str(model_dir),
                "NAIVE_SERVED_NAME": SERVED_NAME,
                "HF_HUB_OFFLINE": "1",
                "OMP_NUM_THREADS": str(self.threads),
            }
        )

    def describe(self) -> str:
        return (
            f"FastAPI {version('fastapi')} + uvicorn {version('uvicorn')} (1 worker) + sentence-transformers "
            f"{version('sentence-transformers')} (torch {version('torch')}, {self.threads} threads), "
            "each request encoded on its own"
        )
