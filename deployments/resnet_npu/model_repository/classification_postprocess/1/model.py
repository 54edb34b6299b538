"""Top-k classification results from logits: LABELS, PROBABILITIES (softmax), CLASS_IDS.

Input LOGITS float32 (1000); outputs of shape (k) per batch item, k = the request parameter
``top_k`` (default 5). Implemented in triton_helpers.classification.
"""

import triton_python_backend_utils as pb_utils

from triton_helpers.classification import TopKPostprocessModel


class TritonPythonModel(TopKPostprocessModel):
    """Softmax + top-k + ImageNet class names, one response per request."""

    pb_utils = pb_utils
