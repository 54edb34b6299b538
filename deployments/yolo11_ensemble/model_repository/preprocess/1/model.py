"""preprocess: encoded image bytes -> letterboxed FP32 tensor + sizes, as ultralytics predict does it."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

from triton_helpers.detection import DEFAULT_MAX_BYTES, DEFAULT_MAX_PIXELS, decode_bgr, letterbox, to_model_input
from triton_helpers.errors import (
    DEFAULT_MAX_REQUEST_BYTES,
    InputError,
    check_request_bytes,
    output_dtypes,
    respond_each,
    single_bytes_items,
)


class TritonPythonModel:
    """Decode (OpenCV, like ultralytics' imread), letterbox to the configured size, RGB /255."""

    def initialize(self, args):
        """Read the tensor size from the IMAGE_TENSOR dims and the size limits from parameters."""
        import cv2

        cv2.setNumThreads(1)  # one instance = one core; add instances to scale
        config = json.loads(args["model_config"])
        self.dtypes = output_dtypes(pb_utils, config)
        dims = next(o["dims"] for o in config["output"] if o["name"] == "IMAGE_TENSOR")
        self.size_hw = (int(dims[1]), int(dims[2]))
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.limits = {
            "max_pixels": int(params.get("max_pixels", DEFAULT_MAX_PIXELS)),
            "max_bytes": int(params.get("max_bytes", DEFAULT_MAX_BYTES)),
        }
        self.max_request_bytes = int(params.get("max_request_bytes", DEFAULT_MAX_REQUEST_BYTES))

    def execute(self, requests):
        """One response per request; a bad image fails only its own request."""
        return respond_each(pb_utils, requests, self._handle)

    def _handle(self, request):
        items = single_bytes_items(pb_utils.get_input_tensor_by_name(request, "IMAGE_BYTES").as_numpy(), "IMAGE_BYTES")
        check_request_bytes(items, "IMAGE_BYTES", self.max_request_bytes)
        tensor = np.empty((len(items), 3, *self.size_hw), np.float32)
        sizes = np.empty((len(items), 4), np.int32)
        for index, data in enumerate(items):
            try:
                bgr = decode_bgr(data, **self.limits)
            except InputError as exc:
                raise InputError(f"IMAGE_BYTES[{index}]: {exc}" if len(items) > 1 else str(exc)) from None
            to_model_input(letterbox(bgr, self.size_hw), out=tensor[index])
            sizes[index] = (*bgr.shape[:2], *self.size_hw)
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor("IMAGE_TENSOR", tensor.astype(self.dtypes["IMAGE_TENSOR"], copy=False)),
                pb_utils.Tensor("IMAGE_SIZES", sizes.astype(self.dtypes["IMAGE_SIZES"], copy=False)),
            ]
        )

    def finalize(self):
        """Nothing to release."""
