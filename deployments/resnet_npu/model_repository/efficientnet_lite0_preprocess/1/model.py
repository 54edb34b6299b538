"""EfficientNet-Lite0 preprocessing: the TensorFlow EfficientNet-Lite eval transform, encoded image in, RGB pixels out.

Centre crop of 224/256 of the shorter side, bicubic resize to 224x224; (x - 127) / 128 runs inside
efficientnet_lite0_uint8's graph (export.py folds it in). config.pbtxt's parameters choose the
transform (resnet_npu_processing.classification.ImageTransform) and the limits; this code is the
same as resnet50_preprocess's (a test keeps them equal).
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils
from resnet_npu_processing.classification import ImageTransform, decode_min_side

from triton_helpers.config import parameter
from triton_helpers.errors import (
    DEFAULT_MAX_REQUEST_BYTES,
    InputError,
    request_bytes_items,
    respond_each,
)
from triton_helpers.images import DEFAULT_MAX_BYTES, DEFAULT_MAX_PIXELS, open_image


class TritonPythonModel:
    """IMAGE_BYTES (one encoded image per batch item) in, PIXELS out; one response per request."""

    def initialize(self, args):
        """The transform and the decoder's limits from the config's parameters; the output layout from PIXELS."""
        config = json.loads(args["model_config"])
        strings = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        self.transform = ImageTransform.from_parameters(strings)  # mode, resize, crop, interpolation, mean, std
        self.limits = {
            "max_pixels": parameter(config, "max_pixels", DEFAULT_MAX_PIXELS, int),
            "max_bytes": parameter(config, "max_bytes", DEFAULT_MAX_BYTES, int),
            "min_shorter_side": decode_min_side(parameter(config, "decode"), self.transform),
        }
        self.max_request_bytes = parameter(config, "max_request_bytes", DEFAULT_MAX_REQUEST_BYTES, int)
        output = pb_utils.get_output_config_by_name(config, "PIXELS")
        self.dtype = pb_utils.triton_string_to_numpy(output["data_type"])
        # TYPE_UINT8 [crop, crop, 3]: the resized RGB pixels (the classifier's graph normalises them);
        # a float [3, crop, crop]: normalised here, channel-first, as torchvision's tensor.
        self.raw_pixels = np.dtype(self.dtype) == np.uint8
        crop = self.transform.crop
        want = [crop, crop, 3] if self.raw_pixels else [3, crop, crop]
        if [int(d) for d in output["dims"]] != want:
            raise ValueError(
                f"output PIXELS dims {output['dims']} do not match the transform's crop {crop}: want {want}"
            )

    def execute(self, requests):
        """One response per request: a bad image fails its own request (INVALID_ARG), not the batch."""
        return respond_each(pb_utils, requests, self.answer)

    def answer(self, request):
        """Decode, resize and crop each image of one request."""
        items = request_bytes_items(pb_utils, request, "IMAGE_BYTES", self.max_request_bytes)
        pixels = self.preprocess(items)
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("PIXELS", pixels)])

    def preprocess(self, items: list[bytes]) -> np.ndarray:
        """Decode (size limits checked from the header first), resize, crop [, normalise] each image."""
        convert = self.transform.pixels if self.raw_pixels else self.transform
        batch = []
        for index, data in enumerate(items):
            try:
                batch.append(convert(open_image(data, **self.limits)))
            except InputError as exc:
                raise InputError(f"IMAGE_BYTES[{index}]: {exc}" if len(items) > 1 else str(exc)) from None
        return np.stack(batch).astype(self.dtype, copy=False)
