"""Pooling step of the text-in ensemble: the model folder's pooling (mean, CLS or last token) and normalisation."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils
from embedding_cpu_processing.text_embedding import EmbeddingModelInfo

from triton_helpers.config import parameter
from triton_helpers.errors import error_response


class TritonPythonModel:
    """last_hidden_state + attention_mask -> EMBEDDING."""

    def initialize(self, args):
        """Read the output dtype and how the model folder pools and normalises."""
        self.config = json.loads(args["model_config"])
        self.info = EmbeddingModelInfo.read(parameter(self.config, "model_dir"))
        self.dtype = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(self.config, "EMBEDDING")["data_type"]
        )

    def execute(self, requests):
        """Pool each request's token vectors; a request that fails gets its own error."""
        responses = []
        for request in requests:
            try:
                hidden = pb_utils.get_input_tensor_by_name(request, "last_hidden_state").as_numpy()
                mask = pb_utils.get_input_tensor_by_name(request, "attention_mask").as_numpy()
                vectors = np.ascontiguousarray(self.info.pool(hidden, mask), dtype=self.dtype)
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("EMBEDDING", vectors)]))
            except Exception as exc:  # noqa: BLE001 - InputError -> INVALID_ARG; a bug fails this request only
                responses.append(error_response(pb_utils, exc))
        return responses

    def finalize(self):
        """Nothing to release."""
