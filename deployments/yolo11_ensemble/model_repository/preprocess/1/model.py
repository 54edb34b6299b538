"""preprocess: encoded image bytes -> letterboxed FP32 tensor + sizes, as ultralytics predict does it.

Decoding is ultralytics' imread (``cv2.imdecode(..., IMREAD_COLOR)``: EXIF orientation applied,
gray and CMYK to 3 channels, alpha dropped), after the size limits are checked from the header
(triton_helpers.images.open_checked: no pixel of a decompression bomb is decoded); then the
letterbox to IMAGE_TENSOR's dims (pad 114), BGR -> RGB, HWC -> CHW and /255.
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils
from yolo11_ensemble_processing.detection import letterbox, to_model_input

from triton_helpers.config import parameter
from triton_helpers.errors import (
    DEFAULT_MAX_REQUEST_BYTES,
    InputError,
    request_bytes_items,
    respond_each,
)
from triton_helpers.images import DEFAULT_MAX_BYTES, DEFAULT_MAX_PIXELS, open_checked

# OpenCV's own decode limit (read at its first decode): a second line of defence behind the header check.
os.environ.setdefault("OPENCV_IO_MAX_IMAGE_PIXELS", str(DEFAULT_MAX_PIXELS))


def decode_bgr(data: bytes, *, max_pixels: int = DEFAULT_MAX_PIXELS, max_bytes: int = DEFAULT_MAX_BYTES) -> np.ndarray:
    """Encoded image bytes -> BGR ``uint8`` ``(h, w, 3)``, like ultralytics' imread, limits checked first."""
    import cv2

    with open_checked(data, max_pixels=max_pixels, max_bytes=max_bytes) as header:
        fmt = header.format
    if fmt == "JPEG" and data.rstrip(b"\x00\r\n ")[-2:] != b"\xff\xd9":
        raise InputError(f"truncated JPEG: no end-of-image marker in its {len(data)} bytes")
    try:
        image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    except cv2.error as exc:
        raise InputError(f"cannot decode image: {str(exc).strip().splitlines()[-1]}") from None
    if image is None:
        raise InputError(f"cannot decode {fmt} image")
    return image


class TritonPythonModel:
    """IMAGE_BYTES in; IMAGE_TENSOR (letterboxed, RGB, /255) and IMAGE_SIZES out; one response per request."""

    def initialize(self, args):
        """The tensor size from IMAGE_TENSOR's dims, the output dtypes and the size limits from config.pbtxt."""
        import cv2

        cv2.setNumThreads(1)  # one instance = one core; add instances to scale
        config = json.loads(args["model_config"])
        tensor_config = pb_utils.get_output_config_by_name(config, "IMAGE_TENSOR")
        sizes_config = pb_utils.get_output_config_by_name(config, "IMAGE_SIZES")
        self.tensor_dtype = pb_utils.triton_string_to_numpy(tensor_config["data_type"])
        self.sizes_dtype = pb_utils.triton_string_to_numpy(sizes_config["data_type"])
        self.size_hw = (int(tensor_config["dims"][1]), int(tensor_config["dims"][2]))
        self.limits = {
            "max_pixels": parameter(config, "max_pixels", DEFAULT_MAX_PIXELS, int),
            "max_bytes": parameter(config, "max_bytes", DEFAULT_MAX_BYTES, int),
        }
        self.max_request_bytes = parameter(config, "max_request_bytes", DEFAULT_MAX_REQUEST_BYTES, int)

    def execute(self, requests):
        """One response per request: a bad image fails its own request (INVALID_ARG), not the batch."""
        return respond_each(pb_utils, requests, self.answer)

    def answer(self, request):
        """Decode and letterbox each image of one request."""
        items = request_bytes_items(pb_utils, request, "IMAGE_BYTES", self.max_request_bytes)
        images, sizes = self.preprocess(items)
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor("IMAGE_TENSOR", images.astype(self.tensor_dtype, copy=False)),
                pb_utils.Tensor("IMAGE_SIZES", sizes.astype(self.sizes_dtype, copy=False)),
            ]
        )

    def preprocess(self, items: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """Decode and letterbox each image: ``(n, 3, H, W)`` float32 and ``(n, 4)`` sizes (orig h, w, tensor h, w)."""
        images = np.empty((len(items), 3, *self.size_hw), np.float32)
        sizes = np.empty((len(items), 4), np.int32)
        for index, data in enumerate(items):
            try:
                bgr = decode_bgr(data, **self.limits)
            except InputError as exc:
                raise InputError(f"IMAGE_BYTES[{index}]: {exc}" if len(items) > 1 else str(exc)) from None
            to_model_input(letterbox(bgr, self.size_hw), out=images[index])
            sizes[index] = (*bgr.shape[:2], *self.size_hw)
        return images, sizes
