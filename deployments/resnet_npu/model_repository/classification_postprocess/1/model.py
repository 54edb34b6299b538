"""Top-k classification results from logits: LABELS, PROBABILITIES (softmax), CLASS_IDS.

Input LOGITS float32 (1000) per batch item; outputs of shape (k) per item, k = the request
parameter ``top_k`` (default: the config's ``default_top_k``). Class names: the file the config's
``class_names`` parameter names, relative to this model's folder (torchvision's ImageNet order).
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils
from resnet_npu_processing.classification import top_k

from triton_helpers.config import parameter
from triton_helpers.errors import InputError, respond_each

OUTPUTS = ("LABELS", "PROBABILITIES", "CLASS_IDS")


class TritonPythonModel:
    """Softmax + top-k + class names, one response per request."""

    def initialize(self, args):
        """Output dtypes, the default k and the class names, from config.pbtxt."""
        config = json.loads(args["model_config"])
        self.dtypes = {}
        for name in OUTPUTS:
            output = pb_utils.get_output_config_by_name(config, name)
            if output is None:
                raise pb_utils.TritonModelException(f"classification_postprocess: config has no output {name}")
            self.dtypes[name] = pb_utils.triton_string_to_numpy(output["data_type"])
        self.default_top_k = parameter(config, "default_top_k", 5, int)
        names_file = os.path.join(args["model_repository"], parameter(config, "class_names", "imagenet_classes.txt"))
        with open(names_file, encoding="utf-8") as handle:
            self.names = [line.strip() for line in handle if line.strip()]
        if not self.names:
            raise pb_utils.TritonModelException(f"classification_postprocess: {names_file} has no class names")

    def execute(self, requests):
        """One response per request: a bad ``top_k`` fails its own request (INVALID_ARG), not the batch."""
        return respond_each(pb_utils, requests, self.answer)

    def answer(self, request):
        """Top-k labels of one request's logits."""
        tensor = pb_utils.get_input_tensor_by_name(request, "LOGITS")
        if tensor is None:
            raise InputError("input 'LOGITS' is missing")
        logits = np.asarray(tensor.as_numpy(), dtype=np.float32)
        if logits.ndim != 2:
            raise InputError(f"input 'LOGITS' must be (batch, classes), got shape {logits.shape}")
        k = self.requested_k(request, maximum=min(logits.shape[1], len(self.names)))
        outputs = self.postprocess(logits, k)
        return pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor(name, array) for name, array in outputs.items()]
        )

    def requested_k(self, request, maximum: int) -> int:
        """The request parameter ``top_k`` (an integer or a numeric string), within ``1..maximum``."""
        raw = request.parameters()
        value = (json.loads(raw) if isinstance(raw, str) and raw else raw or {}).get("top_k")
        if value is None:
            return min(self.default_top_k, maximum)
        if isinstance(value, bool):
            raise InputError(f"parameter top_k must be an integer, got {value!r}")
        try:
            k = int(value)
        except (TypeError, ValueError):
            raise InputError(f"parameter top_k must be an integer, got {value!r}") from None
        if not 1 <= k <= maximum:
            raise InputError(f"parameter top_k must be between 1 and {maximum}, got {k}")
        return k

    def postprocess(self, logits: np.ndarray, k: int) -> dict:
        """``{LABELS, PROBABILITIES, CLASS_IDS}`` of shape ``(batch, k)``; an id without a name is ``class_<id>``."""
        ids = np.empty((len(logits), k), dtype=np.int64)
        probs = np.empty((len(logits), k), dtype=np.float32)
        for row, vector in enumerate(logits):
            ids[row], probs[row] = top_k(vector, k)
        labels = np.array(
            [[(self.names[i] if i < len(self.names) else f"class_{i}").encode("utf-8") for i in row] for row in ids],
            dtype=object,
        )
        return {
            "LABELS": labels.astype(self.dtypes["LABELS"]),
            "PROBABILITIES": probs.astype(self.dtypes["PROBABILITIES"]),
            "CLASS_IDS": ids.astype(self.dtypes["CLASS_IDS"]),
        }
