"""EfficientNet-Lite0 preprocessing: the TensorFlow EfficientNet-Lite eval transform.

Centre crop of 224/256 of the shorter side, bicubic resize to 224x224 ((x - 127) / 128 in the graph).

Input IMAGE_BYTES (encoded JPEG/PNG/... bytes, one per batch item); output PIXELS, RGB uint8
(224, 224, 3): the normalisation and the channel-first layout run inside efficientnet_lite0_uint8's graph
(export.py fold_pixels). The transform is set by this model's config.pbtxt parameters and
implemented in triton_helpers.classification (numpy + PIL, no torch).
"""

import triton_python_backend_utils as pb_utils

from triton_helpers.classification import PreprocessModel


class TritonPythonModel(PreprocessModel):
    """Decode + resize + crop + normalise, one response per request."""

    pb_utils = pb_utils
