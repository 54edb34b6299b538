"""Pooling step of the text-in ensemble."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

from triton_helpers.config import parameter
from triton_helpers.errors import output_dtypes
from triton_helpers.text_embedding import EmbeddingModelInfo, pool


class TritonPythonModel:
    """last_hidden_state + attention_mask -> EMBEDDING."""

    def initialize(self, args):
        """Read whether the model folder normalises."""
        self.config = json.loads(args["model_config"])
        self.normalize = EmbeddingModelInfo.read(parameter(self.config, "model_dir")).normalize
        self.dtype = output_dtypes(pb_utils, self.config)["EMBEDDING"]

    def execute(self, requests):
        """Pool each request's token vectors."""
        responses = []
        for request in requests:
            hidden = pb_utils.get_input_tensor_by_name(request, "last_hidden_state").as_numpy()
            mask = pb_utils.get_input_tensor_by_name(request, "attention_mask").as_numpy()
            vectors = np.ascontiguousarray(pool(hidden, mask, self.normalize), dtype=self.dtype)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("EMBEDDING", vectors)]))
        return responses

    def finalize(self):
        """Nothing to release."""
