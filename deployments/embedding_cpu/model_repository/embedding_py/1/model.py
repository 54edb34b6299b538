"""Sentence embeddings with sentence-transformers inside Triton's Python backend."""

import json
import os

import triton_python_backend_utils as pb_utils
from embedding_cpu_processing.text_batches import TextBatch, TextLimits

from triton_helpers.config import parameter


class TritonPythonModel:
    """TEXT (BYTES, UTF-8) -> EMBEDDING (FP32), all requests of a batch in one encode()."""

    def initialize(self, args):
        """Read the output dtype and limits; load the model on CPU with the configured torch thread count."""
        import torch
        from embedding_cpu_processing.text_embedding import default_model_dir, load_tokenizer
        from sentence_transformers import SentenceTransformer

        self.config = json.loads(args["model_config"])
        torch.set_num_threads(parameter(self.config, "torch_threads", 1, int))
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        model_dir = parameter(self.config, "model_dir") or str(default_model_dir())
        self.model = SentenceTransformer(model_dir, device="cpu")
        self.model_dir = model_dir
        load_tokenizer(model_dir, self.model.max_seq_length)
        self.limits = TextLimits.from_config(self.config)
        self.max_tokens = parameter(self.config, "max_batch_tokens", 0, int) or None
        self.dtype = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(self.config, "EMBEDDING")["data_type"]
        )

    def execute(self, requests):
        """Validate each request, encode the valid texts together, answer each."""
        batch = TextBatch.gather(pb_utils, requests, "TEXT", self.limits)
        if batch.texts:
            from embedding_cpu_processing.bls import encode_in_buckets
            from embedding_cpu_processing.text_embedding import cut_texts

            # Long texts are cut where the truncated tokenization stays the same (not tokenized whole).
            texts = cut_texts(batch.texts, self.model_dir, self.model.max_seq_length)
            vectors = encode_in_buckets(
                self.model, texts, max_rows=len(texts), max_tokens=self.max_tokens, model_dir=self.model_dir
            )
            batch.scatter(pb_utils, vectors, "EMBEDDING", self.dtype)
        return batch.responses

    def finalize(self):
        """Drop the model."""
        self.model = None
