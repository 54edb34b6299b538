"""Sentence embeddings with sentence-transformers inside Triton's Python backend."""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils

from triton_helpers.errors import InputError, decode_utf8, output_dtypes, single_bytes_items


def _parameter(config, key, default):
    value = config.get("parameters", {}).get(key, {}).get("string_value")
    return default if value in (None, "") else value


class TritonPythonModel:
    """TEXT (BYTES, UTF-8) -> EMBEDDING (FP32), all requests of a batch in one encode()."""

    def initialize(self, args):
        """Load the model on CPU with the configured torch thread count."""
        import torch
        from sentence_transformers import SentenceTransformer

        from triton_helpers.text_embedding import default_model_dir

        self.config = json.loads(args["model_config"])
        torch.set_num_threads(int(_parameter(self.config, "torch_threads", 1)))
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        model_dir = _parameter(self.config, "model_dir", None) or str(default_model_dir())
        self.model = SentenceTransformer(model_dir, device="cpu")
        self.max_text_bytes = int(_parameter(self.config, "max_text_bytes", 1 << 20))
        self.dtype = output_dtypes(pb_utils, self.config)["EMBEDDING"]

    def _texts(self, request):
        items = single_bytes_items(pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy(), "TEXT")
        texts = []
        for item in items:
            if len(item) > self.max_text_bytes:
                raise InputError(f"TEXT element is {len(item)} bytes, over the limit of {self.max_text_bytes}")
            texts.append(decode_utf8(item, "TEXT"))
        return texts

    def execute(self, requests):
        """Validate each request, encode the valid texts together, answer each request."""
        responses = [None] * len(requests)
        texts, owners = [], []
        for index, request in enumerate(requests):
            try:
                request_texts = self._texts(request)
            except InputError as exc:
                responses[index] = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
                continue
            texts.extend(request_texts)
            owners.append((index, len(request_texts)))
        if texts:
            vectors = self.model.encode(texts, batch_size=len(texts), convert_to_numpy=True)
            offset = 0
            for index, count in owners:
                embedding = np.ascontiguousarray(vectors[offset:offset + count], dtype=self.dtype)
                responses[index] = pb_utils.InferenceResponse([pb_utils.Tensor("EMBEDDING", embedding)])
                offset += count
        return responses

    def finalize(self):
        """Drop the model."""
        self.model = None
