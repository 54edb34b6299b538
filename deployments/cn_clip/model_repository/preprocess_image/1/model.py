"""cn_clip image pre-processing: IMAGE_BYTES (encoded image) -> PIXEL_VALUES [3,224,224] FP32."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils
from cn_clip_transform import transform_image  # beside this file (the stub puts 1/ on sys.path)

from triton_helpers.config import parameter
from triton_helpers.errors import (
    DEFAULT_MAX_REQUEST_BYTES,
    request_bytes_items,
    respond_each,
)
from triton_helpers.images import open_image


class TritonPythonModel:
    """Decodes each image with size limits and applies cn_clip's own transform in numpy."""

    def initialize(self, args):
        """Read the output dtype and the image_size / max_bytes / max_pixels / max_request_bytes parameters."""
        config = json.loads(args["model_config"])
        output = pb_utils.get_output_config_by_name(config, "PIXEL_VALUES")
        self.dtype = pb_utils.triton_string_to_numpy(output["data_type"])
        self.image_size = parameter(config, "image_size", 224, int)
        self.max_bytes = parameter(config, "max_bytes", 16 << 20, int)
        self.max_pixels = parameter(config, "max_pixels", 40_000_000, int)
        self.max_request_bytes = parameter(config, "max_request_bytes", DEFAULT_MAX_REQUEST_BYTES, int)

    def execute(self, requests):
        """One response per request; a bad image gets a 400 for its own request only."""
        return respond_each(pb_utils, requests, self.answer)

    def answer(self, request):
        """Decode, resize and normalise each image of one request."""
        items = request_bytes_items(pb_utils, request, "IMAGE_BYTES", self.max_request_bytes)
        pixels = []
        for data in items:
            # Sizes are checked before any pixel is decoded; cn_clip does not apply EXIF rotation.
            image = open_image(data, exif_transpose=False, max_bytes=self.max_bytes, max_pixels=self.max_pixels)
            pixels.append(transform_image(image, self.image_size))
        out = pb_utils.Tensor("PIXEL_VALUES", np.stack(pixels).astype(self.dtype, copy=False))
        return pb_utils.InferenceResponse(output_tensors=[out])

    def finalize(self):
        """Nothing to release."""
