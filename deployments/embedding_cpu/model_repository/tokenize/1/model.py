"""Fast-tokenizer step of the text-in ensemble."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils
from embedding_cpu_processing.text_batches import TextBatch, TextLimits
from embedding_cpu_processing.text_embedding import EmbeddingModelInfo, tokenize

from triton_helpers.config import parameter


class TritonPythonModel:
    """TEXT -> input_ids, attention_mask (padded to the longest text of the batch)."""

    def initialize(self, args):
        """Read the output dtypes, the limits and the model folder the tokenizer comes from."""
        self.config = json.loads(args["model_config"])
        self.limits = TextLimits.from_config(self.config)
        self.model_dir = str(EmbeddingModelInfo.read(parameter(self.config, "model_dir")).model_dir)
        self.dtypes = {
            name: pb_utils.triton_string_to_numpy(pb_utils.get_output_config_by_name(self.config, name)["data_type"])
            for name in ("input_ids", "attention_mask")
        }

    def execute(self, requests):
        """Tokenize every valid text of the batch together; one response per request."""
        batch = TextBatch.gather(pb_utils, requests, "TEXT", self.limits)
        if batch.texts:
            tokens = tokenize(batch.texts, self.model_dir)
            offset = 0
            for index, count in batch.owners:
                rows = slice(offset, offset + count)
                batch.responses[index] = pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor(name, np.ascontiguousarray(tokens[name][rows], dtype=self.dtypes[name]))
                        for name in ("input_ids", "attention_mask")
                    ]
                )
                offset += count
        return batch.responses

    def finalize(self):
        """Nothing to release."""
