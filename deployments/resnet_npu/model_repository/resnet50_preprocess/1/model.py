"""ResNet-50 preprocessing: torchvision's ImageNet eval transform.

Resize(256) (PIL bilinear, antialiased), CenterCrop(224), ToTensor, Normalize(ImageNet).

Input IMAGE_BYTES (encoded JPEG/PNG/... bytes, one per batch item); output IMAGE, float32
(3, 224, 224). The transform is set by this model's config.pbtxt parameters and implemented
in triton_helpers.classification (numpy + PIL, no torch).
"""

import triton_python_backend_utils as pb_utils

from triton_helpers.classification import PreprocessModel


class TritonPythonModel(PreprocessModel):
    """Decode + resize + crop + normalise, one response per request."""

    pb_utils = pb_utils
