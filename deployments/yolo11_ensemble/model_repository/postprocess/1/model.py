"""postprocess: raw YOLO head output -> final detections in original image pixels (+ JSON text).

Per image: confidence filter + class-aware NMS (yolo11_ensemble_processing.detection.decode_head,
ultralytics' non_max_suppression in numpy), boxes mapped back through the letterbox
(scale_boxes), class names from the file export.py writes. ``conf`` / ``iou`` / ``max_det``:
config parameters, overridable per request.
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils
from yolo11_ensemble_processing.detection import decode_head, scale_boxes

from triton_helpers.config import parameter
from triton_helpers.errors import InputError, respond_each

LIMITS = {"conf": (0.0, 1.0), "iou": (0.0, 1.0), "max_det": (1, 30000)}
OUTPUTS = ("BOXES", "SCORES", "CLASS_IDS", "CLASS_NAMES", "DETECTIONS_JSON")


def detections_json(boxes, scores, class_ids, class_names, orig_hw) -> str:
    """The compact text answer: one object per detection, boxes in original pixels."""
    dets = [
        {
            "box": [round(float(v), 1) for v in box],
            "score": round(float(score), 4),
            "class_id": int(cid),
            "class_name": class_names[int(cid)] if 0 <= int(cid) < len(class_names) else str(int(cid)),
        }
        for box, score, cid in zip(boxes, scores, class_ids)
    ]
    return json.dumps({"image_size": [int(orig_hw[1]), int(orig_hw[0])], "detections": dets}, separators=(",", ":"))


class TritonPythonModel:
    """Confidence filter + class-aware NMS (numpy, vectorised) + un-letterbox, per request."""

    def initialize(self, args):
        """Output dtypes, the class names written by export.py and the default thresholds, from config.pbtxt."""
        config = json.loads(args["model_config"])
        self.dtypes = {
            name: pb_utils.triton_string_to_numpy(pb_utils.get_output_config_by_name(config, name)["data_type"])
            for name in OUTPUTS
        }
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        names_path = os.path.join(version_dir, parameter(config, "class_names_file", "assets/class_names.json"))
        if not os.path.exists(names_path):
            raise pb_utils.TritonModelException(
                f"postprocess: {names_path} is missing; run `python export.py` in the deployment folder"
            )
        with open(names_path, encoding="utf-8") as handle:
            self.class_names = list(json.load(handle))
        self.names_array = np.array([n.encode("utf-8") for n in self.class_names] + [b""], dtype=object)
        self.defaults = {
            "conf": parameter(config, "conf", 0.25, float),
            "iou": parameter(config, "iou", 0.7, float),
            "max_det": parameter(config, "max_det", 300, int),
        }

    def execute(self, requests):
        """One response per request: bad parameters or tensors fail their own request (INVALID_ARG), not the batch."""
        return respond_each(pb_utils, requests, self.postprocess)

    def _options(self, request):
        """``conf`` / ``iou`` / ``max_det``: the config's, or the request's within LIMITS."""
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

    def postprocess(self, request):
        """Decode each image's head output, undo its letterbox, pad the batch to one shape."""
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
