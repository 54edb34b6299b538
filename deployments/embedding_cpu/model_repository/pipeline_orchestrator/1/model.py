"""Document -> chunks -> BLS to the ONNX transformer -> one vector per file."""

import json

import triton_python_backend_utils as pb_utils
from embedding_cpu_processing.bls import embed_texts
from embedding_cpu_processing.document_requests import all_chunks, build_responses, limits_from_config, parse_requests
from embedding_cpu_processing.text_embedding import EmbeddingModelInfo, load_tokenizer

from triton_helpers.config import parameter


class TritonPythonModel:
    """RAW_FILE (BYTES) -> FINAL_EMBEDDING (FP32), CHUNK_COUNT, CHUNK_EMBEDDINGS (aggregation none)."""

    def initialize(self, args):
        """Read limits and the ONNX model to call; load the tokenizer."""
        self.config = json.loads(args["model_config"])
        self.onnx_model = parameter(self.config, "onnx_model", "embedding_onnx")
        self.max_rows = parameter(self.config, "onnx_max_batch_size", 64, int)
        self.max_tokens = parameter(self.config, "max_batch_tokens", 0, int) or None
        self.info = EmbeddingModelInfo.read(parameter(self.config, "model_dir"))
        load_tokenizer(str(self.info.model_dir))
        self.limits = limits_from_config(self.config)
        self.dtypes = {
            name: pb_utils.triton_string_to_numpy(pb_utils.get_output_config_by_name(self.config, name)["data_type"])
            for name in ("FINAL_EMBEDDING", "CHUNK_COUNT", "CHUNK_EMBEDDINGS")
        }

    async def execute(self, requests):
        """Parse and chunk every file of the batch; embed all chunks in few BLS requests; aggregate."""
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
            try:
                vectors = await embed_texts(
                    pb_utils,
                    self.onnx_model,
                    chunks,
                    max_rows=self.max_rows,
                    max_tokens=self.max_tokens,
                    normalize=self.info.normalize,
                    pooling=self.info.pooling,
                    model_dir=str(self.info.model_dir),
                )
            except RuntimeError as exc:
                for job in jobs:
                    if job.error is None:
                        job.error, job.server_error = str(exc), True
        return build_responses(pb_utils, jobs, vectors, self.dtypes)

    def finalize(self):
        """Nothing to release."""
