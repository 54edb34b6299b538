"""infinity-emb 0.0.78 serving the same sentence-transformers model, in its own venv (``make peer-infinity``).

The optimum engine runs the same ONNX file as the served ONNX model (copied into a copy of the
model folder; optimum 1.27 wants an ``.onnx`` inside the folder and a relative ``--model-id``,
so the server starts inside that folder), mean-pooled as the model declares. The torch
engine runs the safetensors weights with torch 2.8.0. Both pinned to the server's cores.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from harness import PROJECT_ROOT
from harness_lab.peers.processes import SERVED_NAME, PeerServer, PeerStartError

VENV = Path(os.environ.get("INFINITY_VENV") or PROJECT_ROOT / ".venv-infinity")
ENGINES = ("optimum", "torch")


def infinity_version() -> str:
    from importlib.metadata import PathDistribution

    for dist_info in VENV.glob("lib/python*/site-packages/infinity_emb-*.dist-info"):
        return PathDistribution(dist_info).version
    return "unknown"


class InfinityServer(PeerServer):
    """``infinity_emb v2`` with ``engine`` on ``cores``; ``POST /embeddings`` takes OpenAI's body
    (``{"model", "input", "encoding_format"}``) and answers its shape."""

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
        super().__init__(cores, threads)
        self.cwd = self.work_dir / "model"
        shutil.copytree(model_dir, self.cwd)
        if engine == "optimum":
            shutil.copy(onnx_file, self.cwd / "model.onnx")
        options = f"--engine {engine} --device cpu --pooling-method mean --batch-size {batch_size}"
        options += f" --host 127.0.0.1 --port {self.port} --log-level warning --no-model-warmup"
        self.command = [str(binary), "v2", "--model-id", ".", "--served-model-name", SERVED_NAME, *options.split()]
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        self.env.update(
            {
                "HF_HUB_OFFLINE": "1",
                "INFINITY_ANONYMOUS_USAGE_STATS": "0",
                "DO_NOT_TRACK": "1",
                "OMP_NUM_THREADS": str(self.threads),
                "PATH": f"{VENV / 'bin'}:{self.env.get('PATH', '')}",
            }
        )

    def describe(self) -> str:
        return f"infinity-emb {infinity_version()} ({self.engine} engine, {self.threads} threads)"
