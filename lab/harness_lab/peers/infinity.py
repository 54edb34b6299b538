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
import tempfile
import urllib.request
from pathlib import Path

from harness import PROJECT_ROOT
from harness.serving.gate.serve import free_port
from harness_lab.peers.processes import PeerServer, PeerStartError
from harness_lab.peers.workloads import openai_body

VENV = Path(os.environ.get("INFINITY_VENV") or PROJECT_ROOT / ".venv-infinity")
#: The name requests ask infinity for (any: it serves one model).
SERVED_NAME = "embedding-model"
ENGINES = ("optimum", "torch")


def infinity_version() -> str:
    from importlib.metadata import PathDistribution

    for dist_info in VENV.glob("lib/python*/site-packages/infinity_emb-*.dist-info"):
        return PathDistribution(dist_info).version
    return "unknown"


class InfinityServer(PeerServer):
    """``infinity_emb v2`` with ``engine`` on ``cores``, on a free loopback port; ``POST /embeddings``
    takes OpenAI's body (``{"model", "input", "encoding_format"}``) and answers its shape."""

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
        self.name = f"infinity-{engine}"  # the target's name
        self.cores = set(cores) if cores else None
        self.threads = threads or (len(self.cores) if self.cores else os.cpu_count())
        port = free_port()
        work_dir = Path(tempfile.mkdtemp(prefix=f"infinity-{engine}-"))
        self.model_copy = work_dir / "model"
        shutil.copytree(model_dir, self.model_copy)
        if engine == "optimum":
            shutil.copy(onnx_file, self.model_copy / "model.onnx")
        command = [
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
            str(port),
            "--log-level",
            "warning",
            "--no-model-warmup",
        ]
        if self.cores:
            command = ["taskset", "-c", ",".join(map(str, sorted(self.cores)))] + command
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
        super().__init__(command, self.model_copy, env, work_dir, port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/embeddings"

    def describe(self) -> str:
        return f"infinity-emb {infinity_version()} ({self.engine} engine, {self.threads} threads)"

    def body(self, texts: list[str], encoding_format: str | None = None) -> bytes:
        return openai_body(texts, SERVED_NAME, encoding_format)

    def embed(self, texts: list[str]) -> list[list[float]]:
        request = urllib.request.Request(self.url, data=self.body(texts), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as reply:
            return [item["embedding"] for item in json.loads(reply.read())["data"]]
