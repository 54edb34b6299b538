"""postprocess: raw YOLO head output -> final detections in original image pixels (+ JSON text)."""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils

from triton_helpers.detection import decode_head, detections_json, scale_boxes
from triton_helpers.errors import InputError, output_dtypes, respond_each

LIMITS = {"conf": (0.0, 1.0), "iou": (0.0, 1.0), "max_det": (1, 30000)}


class TritonPythonModel:
    """Confidence filter + class-aware NMS (numpy, vectorised) + un-letterbox, per request."""

    def initialize(self, args):
        """Load the class names written by export.py and the default thresholds."""
        config = json.loads(args["model_config"])
        self.dtypes = output_dtypes(pb_utils, config)
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        names_path = os.path.join(version_dir, params.get("class_names_file", "assets/class_names.json"))
        if not os.path.exists(names_path):
            raise pb_utils.TritonModelException(
                f"postprocess: {names_path} is missing; run `python export.py` in the deployment folder"
            )
        with open(names_path, encoding="utf-8") as handle:
            self.class_names = list(json.load(handle))
        self.names_array = np.array([n.encode("utf-8") for n in self.class_names] + [b""], dtype=object)
        self.defaults = {
            "conf": float(params.get("conf", 0.25)),
            "iou": float(params.get("iou", 0.7)),
            "max_det": int(params.get("max_det", 300)),
        }

    def execute(self, requests):
        """One response per request; bad parameters fail only their own request."""
        return respond_each(pb_utils, requests, self._handle)

    def _options(self, request):
        try:
            given = json.loads(request.parameters() or "{}")
        except ValueError:
            given = {}
        options = dict(self.defaults)
        for key, (low, high) in LIMITS.items():
            if key not in given:
                continue
            try:
                value = int(given[key]) if key == "max_det" else float(given[key])
            except (TypeError, ValueError):
                raise InputError(f"parameter '{key}' must be a number, got {given[key]!r}") from None
            if not low <= value <= high:
                raise InputError(f"parameter '{key}' must be within [{low}, {high}], got {value}")
            options[key] = value
        return options

    def _handle(self, request):
        options = self._options(request)
        heads = pb_utils.get_input_tensor_by_name(request, "HEAD_OUTPUT").as_numpy()
        sizes = pb_utils.get_input_tensor_by_name(request, "IMAGE_SIZES").as_numpy()
        if heads.shape[1] - 4 != len(self.class_names):
            raise InputError(
                f"HEAD_OUTPUT has {heads.shape[1] - 4} classes but class_names.json has {len(self.class_names)}: "
                "re-run export.py so both come from the same checkpoint"
            )
        results = []
        for head, size in zip(heads, sizes):
            boxes, scores, class_ids = decode_head(head, **options)
            orig_hw, model_hw = (int(size[0]), int(size[1])), (int(size[2]), int(size[3]))
            results.append((scale_boxes(boxes, model_hw, orig_hw), scores, class_ids, orig_hw))
        width = max(len(r[1]) for r in results)  # batch items share one shape: pad with score 0, class -1
        n = len(results)
        boxes_out = np.zeros((n, width, 4), np.float32)
        scores_out = np.zeros((n, width), np.float32)
        ids_out = np.full((n, width), -1, np.int32)
        texts = np.empty((n, 1), dtype=object)
        for i, (boxes, scores, class_ids, orig_hw) in enumerate(results):
            k = len(scores)
            boxes_out[i, :k], scores_out[i, :k], ids_out[i, :k] = boxes, scores, class_ids
            texts[i, 0] = detections_json(boxes, scores, class_ids, self.class_names, orig_hw).encode("utf-8")
        names_out = self.names_array[ids_out]  # id -1 -> b"" (the padding)
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor("BOXES", boxes_out.astype(self.dtypes["BOXES"], copy=False)),
                pb_utils.Tensor("SCORES", scores_out.astype(self.dtypes["SCORES"], copy=False)),
                pb_utils.Tensor("CLASS_IDS", ids_out.astype(self.dtypes["CLASS_IDS"], copy=False)),
                pb_utils.Tensor("CLASS_NAMES", names_out.astype(self.dtypes["CLASS_NAMES"], copy=False)),
                pb_utils.Tensor("DETECTIONS_JSON", texts.astype(self.dtypes["DETECTIONS_JSON"], copy=False)),
            ]
        )

    def finalize(self):
        """Nothing to release."""
