"""Zero-shot classification: IMAGE_BYTES + LABELS [N] -> PROBABILITIES [N], via BLS.

The image goes to the config's ``image_model`` and the labels to its ``text_model`` (the
ensembles ``image_embedding`` and ``text_embedding``) concurrently with ``async_exec``; the probabilities are cn_clip's
``softmax(logit_scale * image @ labels.T)`` with logit_scale from the config (export.py).
"""

import asyncio
import json

import numpy as np
import triton_python_backend_utils as pb_utils

from triton_helpers.config import parameter
from triton_helpers.errors import InputError, error_response, single_bytes_items

TEXT_BATCH = 64  # text_embedding's max_batch_size


def softmax(logits: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax in float32."""
    logits = np.asarray(logits, dtype=np.float32)
    exp = np.exp(logits - logits.max(axis=axis, keepdims=True))
    return exp / exp.sum(axis=axis, keepdims=True)


def zero_shot_probabilities(image_embedding, label_embeddings, logit_scale: float) -> np.ndarray:
    """``softmax(logit_scale * image @ labels.T)`` for normalised embeddings, as cn_clip scores them."""
    image = np.asarray(image_embedding, dtype=np.float32).reshape(1, -1)
    labels = np.asarray(label_embeddings, dtype=np.float32).reshape(-1, image.shape[1])
    return softmax(np.float32(logit_scale) * (image @ labels.T), axis=-1)[0]


def _refused_input(error) -> bool:
    """Whether a composing model's error is a refusal of the client's input (a 400 here too).

    Triton 2.51's BLS hands every error back as INTERNAL, so besides the code the message
    decides: the composing models report a bug as "internal error: ...", a dead stub as
    "Stub process ..."; anything else they send is their InputError.
    """
    if error.code() == pb_utils.TritonError.INVALID_ARG:
        return True
    message = error.message()
    return "internal error" not in message and "Stub process" not in message and "unknown model" not in message


class TritonPythonModel:
    """One request = one image and its candidate labels; requests are handled concurrently."""

    def initialize(self, args):
        """Read the output dtype, logit_scale, max_labels and the models it calls."""
        config = json.loads(args["model_config"])
        output = pb_utils.get_output_config_by_name(config, "PROBABILITIES")
        self.dtype = pb_utils.triton_string_to_numpy(output["data_type"])
        self.logit_scale = parameter(config, "logit_scale", cast=float)
        if self.logit_scale is None:
            raise ValueError("zero_shot/config.pbtxt needs the logit_scale parameter (export.py writes it)")
        self.max_labels = parameter(config, "max_labels", 1000, int)
        self.image_model = parameter(config, "image_model", "image_embedding")
        self.text_model = parameter(config, "text_model", "text_embedding")

    async def execute(self, requests):
        """Answer every request; bad input gets a 400 for its own request only."""
        return list(await asyncio.gather(*(self._respond(r) for r in requests)))

    async def _respond(self, request):
        try:
            return await self._handle(request)
        except Exception as exc:  # noqa: BLE001 - InputError -> INVALID_ARG; a bug fails this request only
            return error_response(pb_utils, exc)

    async def _handle(self, request):
        images = single_bytes_items(pb_utils.get_input_tensor_by_name(request, "IMAGE_BYTES").as_numpy(), "IMAGE_BYTES")
        if len(images) != 1:
            raise InputError(f"input 'IMAGE_BYTES' must hold exactly one image, got {len(images)}")
        labels = single_bytes_items(pb_utils.get_input_tensor_by_name(request, "LABELS").as_numpy(), "LABELS")
        if len(labels) > self.max_labels:
            raise InputError(f"input 'LABELS' has {len(labels)} labels, over the limit of {self.max_labels}")
        image_call = self._embed(self.image_model, "IMAGE_BYTES", images)
        label_calls = [
            self._embed(self.text_model, "TEXT", labels[i : i + TEXT_BATCH]) for i in range(0, len(labels), TEXT_BATCH)
        ]
        image, *chunks = await asyncio.gather(image_call, *label_calls)
        probs = zero_shot_probabilities(image, np.concatenate(chunks), self.logit_scale)
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("PROBABILITIES", probs.astype(self.dtype))])

    async def _embed(self, model, input_name, items):
        data = np.array(items, dtype=np.object_).reshape(-1, 1)
        response = await pb_utils.InferenceRequest(
            model_name=model,
            inputs=[pb_utils.Tensor(input_name, data)],
            requested_output_names=["EMBEDDING"],
        ).async_exec()
        if response.has_error():
            error = response.error()
            message = f"{'LABELS' if input_name == 'TEXT' else input_name}: {error.message()}"
            if _refused_input(error):
                raise InputError(message)  # the composing model refused the client's image or label
            raise RuntimeError(message)
        return pb_utils.get_output_tensor_by_name(response, "EMBEDDING").as_numpy()

    def finalize(self):
        """Nothing to release."""
