"""Server-side tokenization and pooling around the ONNX transformer, through BLS."""

import json

import triton_python_backend_utils as pb_utils

from triton_helpers.bls import embed_texts
from triton_helpers.config import parameter
from triton_helpers.errors import output_dtypes
from triton_helpers.text_batches import TextBatch, TextLimits
from triton_helpers.text_embedding import EmbeddingModelInfo, load_tokenizer


class TritonPythonModel:
    """TEXT (BYTES, UTF-8) -> EMBEDDING (FP32), the transformer run by ``onnx_model``."""

    def initialize(self, args):
        """Read the config; load the tokenizer and the model folder's pooling settings."""
        self.config = json.loads(args["model_config"])
        self.onnx_model = parameter(self.config, "onnx_model", "embedding_onnx")
        self.max_rows = parameter(self.config, "onnx_max_batch_size", 64, int)
        self.limits = TextLimits.from_config(self.config)
        self.info = EmbeddingModelInfo.read(parameter(self.config, "model_dir"))
        load_tokenizer(str(self.info.model_dir))
        self.dtype = output_dtypes(pb_utils, self.config)["EMBEDDING"]

    async def execute(self, requests):
        """Validate each request, embed every valid text of the batch together, answer each."""
        batch = TextBatch.gather(pb_utils, requests, "TEXT", self.limits)
        if batch.texts:
            try:
                vectors = await embed_texts(pb_utils, self.onnx_model, batch.texts, max_rows=self.max_rows,
                                            normalize=self.info.normalize, model_dir=str(self.info.model_dir))
            except RuntimeError as exc:
                return batch.fail(pb_utils, str(exc))
            batch.scatter(pb_utils, vectors, "EMBEDDING", self.dtype)
        return batch.responses

    def finalize(self):
        """Nothing to release."""
