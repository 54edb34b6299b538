"""Sentence embeddings with sentence-transformers inside Triton's Python backend."""

import json
import os

import triton_python_backend_utils as pb_utils

from triton_helpers.config import parameter
from triton_helpers.errors import output_dtypes
from triton_helpers.text_batches import TextBatch


class TritonPythonModel:
    """TEXT (BYTES, UTF-8) -> EMBEDDING (FP32), all requests of a batch in one encode()."""

    def initialize(self, args):
        """Load the model on CPU with the configured torch thread count."""
        import torch
        from sentence_transformers import SentenceTransformer

        from triton_helpers.text_embedding import default_model_dir

        self.config = json.loads(args["model_config"])
        torch.set_num_threads(parameter(self.config, "torch_threads", 1, int))
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        model_dir = parameter(self.config, "model_dir") or str(default_model_dir())
        self.model = SentenceTransformer(model_dir, device="cpu")
        self.max_text_bytes = parameter(self.config, "max_text_bytes", 1 << 20, int)
        self.dtype = output_dtypes(pb_utils, self.config)["EMBEDDING"]

    def execute(self, requests):
        """Validate each request, encode the valid texts together, answer each."""
        batch = TextBatch.gather(pb_utils, requests, "TEXT", self.max_text_bytes)
        if batch.texts:
            vectors = self.model.encode(batch.texts, batch_size=len(batch.texts), convert_to_numpy=True)
            batch.scatter(pb_utils, vectors, "EMBEDDING", self.dtype)
        return batch.responses

    def finalize(self):
        """Drop the model."""
        self.model = None
