"""cn_clip image pre-processing: IMAGE_BYTES (encoded image) -> PIXEL_VALUES [3,224,224] FP32."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

from triton_helpers.cn_clip import preprocess_image
from triton_helpers.config import parameter
from triton_helpers.errors import (
    DEFAULT_MAX_REQUEST_BYTES,
    check_request_bytes,
    output_dtypes,
    respond_each,
    single_bytes_items,
)


class TritonPythonModel:
    """Decodes each image with size limits and applies cn_clip's own transform in numpy."""

    def initialize(self, args):
        """Read output dtypes and the image_size / max_bytes / max_pixels parameters."""
        config = json.loads(args["model_config"])
        self.dtypes = output_dtypes(pb_utils, config)
        self.image_size = parameter(config, "image_size", 224, int)
        self.limits = {
            "max_bytes": parameter(config, "max_bytes", 16 << 20, int),
            "max_pixels": parameter(config, "max_pixels", 40_000_000, int),
        }
        self.max_request_bytes = parameter(config, "max_request_bytes", DEFAULT_MAX_REQUEST_BYTES, int)

    def execute(self, requests):
        """One response per request; a bad image fails only its own request."""
        return respond_each(pb_utils, requests, self._handle)

    def _handle(self, request):
        items = single_bytes_items(pb_utils.get_input_tensor_by_name(request, "IMAGE_BYTES").as_numpy(), "IMAGE_BYTES")
        check_request_bytes(items, "IMAGE_BYTES", self.max_request_bytes)
        pixels = np.stack([preprocess_image(data, self.image_size, **self.limits) for data in items])
        out = pb_utils.Tensor("PIXEL_VALUES", pixels.astype(self.dtypes["PIXEL_VALUES"], copy=False))
        return pb_utils.InferenceResponse(output_tensors=[out])

    def finalize(self):
        """Nothing to release."""
