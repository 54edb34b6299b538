"""Document -> chunks -> sentence-transformers -> one vector per file, in one Python model."""

import json
import os

import triton_python_backend_utils as pb_utils
from embedding_cpu_processing.bls import encode_in_buckets
from embedding_cpu_processing.document_requests import all_chunks, build_responses, limits_from_config, parse_requests
from embedding_cpu_processing.text_embedding import EmbeddingModelInfo

from triton_helpers.config import parameter


class TritonPythonModel:
    """RAW_FILE (BYTES) -> FINAL_EMBEDDING (FP32), CHUNK_COUNT, CHUNK_EMBEDDINGS (aggregation none)."""

    def initialize(self, args):
        """Load sentence-transformers (one torch thread per instance) and the limits."""
        import torch
        from sentence_transformers import SentenceTransformer

        self.config = json.loads(args["model_config"])
        torch.set_num_threads(parameter(self.config, "torch_threads", 1, int))
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.info = EmbeddingModelInfo.read(parameter(self.config, "model_dir"))
        self.model = SentenceTransformer(str(self.info.model_dir), device="cpu")
        self.limits = limits_from_config(self.config)
        self.max_tokens = parameter(self.config, "max_batch_tokens", 0, int) or None
        self.dtypes = {
            name: pb_utils.triton_string_to_numpy(pb_utils.get_output_config_by_name(self.config, name)["data_type"])
            for name in ("FINAL_EMBEDDING", "CHUNK_COUNT", "CHUNK_EMBEDDINGS")
        }

    def execute(self, requests):
        """Parse and chunk every file of the batch, encode all chunks at once, aggregate per file."""
        jobs = parse_requests(
            pb_utils,
            requests,
            limits=self.limits,
            tokenizer_file=str(self.info.model_dir / "tokenizer.json"),
            default_chunk_tokens=self.info.max_seq_length - 2,
            max_chunk_tokens=self.info.max_seq_length - 2,
        )
        chunks = all_chunks(jobs)
        vectors = None
        if chunks:
            model_dir = str(self.info.model_dir)
            vectors = encode_in_buckets(
                self.model, chunks, max_rows=32, max_tokens=self.max_tokens, model_dir=model_dir
            )
        return build_responses(pb_utils, jobs, vectors, self.dtypes)

    def finalize(self):
        """Drop the model."""
        self.model = None
