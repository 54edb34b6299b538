"""Zero-shot classification: IMAGE_BYTES + LABELS [N] -> PROBABILITIES [N], via BLS.

The image goes to ``image_embedding`` and the labels to ``text_embedding`` (both ensembles)
concurrently with ``async_exec``; the probabilities are cn_clip's
``softmax(logit_scale * image @ labels.T)`` with logit_scale from the config (export.py).
"""

import asyncio
import json

import numpy as np
import triton_python_backend_utils as pb_utils

from triton_helpers.cn_clip import zero_shot_probabilities
from triton_helpers.config import parameter
from triton_helpers.errors import InputError, output_dtypes, single_bytes_items

TEXT_BATCH = 64  # text_embedding's max_batch_size


class TritonPythonModel:
    """One request = one image and its candidate labels; requests are handled concurrently."""

    def initialize(self, args):
        """Read logit_scale and max_labels from the config parameters."""
        config = json.loads(args["model_config"])
        self.dtypes = output_dtypes(pb_utils, config)
        self.logit_scale = parameter(config, "logit_scale", cast=float)
        if self.logit_scale is None:
            raise ValueError("zero_shot/config.pbtxt needs the logit_scale parameter (export.py writes it)")
        self.max_labels = parameter(config, "max_labels", 1000, int)

    async def execute(self, requests):
        """Answer every request; one that fails gets its own error response."""
        return list(await asyncio.gather(*(self._respond(r) for r in requests)))

    async def _respond(self, request):
        try:
            return await self._handle(request)
        except InputError as exc:
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
        except Exception as exc:  # noqa: BLE001 - a bug must not take the stub down
            return pb_utils.InferenceResponse(
                error=pb_utils.TritonError(f"internal error: {type(exc).__name__}: {exc}")
            )

    async def _handle(self, request):
        images = single_bytes_items(pb_utils.get_input_tensor_by_name(request, "IMAGE_BYTES").as_numpy(), "IMAGE_BYTES")
        if len(images) != 1:
            raise InputError(f"input 'IMAGE_BYTES' must hold exactly one image, got {len(images)}")
        labels = single_bytes_items(pb_utils.get_input_tensor_by_name(request, "LABELS").as_numpy(), "LABELS")
        if len(labels) > self.max_labels:
            raise InputError(f"input 'LABELS' has {len(labels)} labels, over the limit of {self.max_labels}")
        image_call = self._embed("image_embedding", "IMAGE_BYTES", images)
        label_calls = [
            self._embed("text_embedding", "TEXT", labels[i : i + TEXT_BATCH]) for i in range(0, len(labels), TEXT_BATCH)
        ]
        image, *chunks = await asyncio.gather(image_call, *label_calls)
        probs = zero_shot_probabilities(image, np.concatenate(chunks), self.logit_scale)
        out = pb_utils.Tensor("PROBABILITIES", probs.astype(self.dtypes["PROBABILITIES"], copy=False))
        return pb_utils.InferenceResponse(output_tensors=[out])

    async def _embed(self, model, input_name, items):
        data = np.array(items, dtype=np.object_).reshape(-1, 1)
        response = await pb_utils.InferenceRequest(
            model_name=model,
            inputs=[pb_utils.Tensor(input_name, data)],
            requested_output_names=["EMBEDDING"],
        ).async_exec()
        if response.has_error():
            # Input errors of the composing models (undecodable image, bad label) go back as-is.
            what = "LABELS" if input_name == "TEXT" else input_name
            raise InputError(f"{what}: {response.error().message()}")
        return pb_utils.get_output_tensor_by_name(response, "EMBEDDING").as_numpy()

    def finalize(self):
        """Nothing to release."""
