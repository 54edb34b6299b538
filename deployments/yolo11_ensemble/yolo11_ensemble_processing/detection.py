"""The letterbox geometry and YOLO head decoding that yolo11_ensemble's preprocess and
postprocess models share with client.py and checks.py, matching ultralytics' ``predict`` step for step.

- ``letterbox`` / ``to_model_input``: ultralytics' ``LetterBox(auto=False)`` (the fixed-size
  exported model) followed by BGR->RGB, HWC->CHW and ``/255`` in float32.
- ``decode_head`` / ``nms`` / ``scale_boxes``: the raw YOLO head output ``(4 + nc, anchors)``
  -> confidence filter -> class-aware NMS (the ``max_wh`` class-offset trick, same as
  ``ultralytics.utils.nms.non_max_suppression``) -> boxes in original image pixels.

numpy only, except OpenCV for resizing (the exact functions ultralytics uses). Decoding is the
preprocess model's own (model_repository/preprocess/1/model.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from triton_helpers.errors import InputError

PAD_VALUE = 114
MAX_WH = 7680  # ultralytics' per-class coordinate offset for class-aware NMS
MAX_NMS = 30000  # ultralytics' cap on boxes entering NMS


def _cv2():
    import cv2  # imported lazily: the NMS half of this module is numpy only

    return cv2


@dataclass(frozen=True)
class Letterbox:
    """Geometry of one letterbox: ``resized`` is (w, h) before padding; pads in pixels."""

    gain: float
    resized: tuple[int, int]
    top: int
    bottom: int
    left: int
    right: int


def letterbox_geometry(orig_hw: tuple[int, int], new_hw: tuple[int, int]) -> Letterbox:
    """ultralytics ``LetterBox(auto=False, scaleup=True, center=True).get_params``."""
    h, w = orig_hw
    gain = min(new_hw[0] / h, new_hw[1] / w)
    resized = (max(round(w * gain), 1), max(round(h * gain), 1))
    dw = (new_hw[1] - resized[0]) / 2
    dh = (new_hw[0] - resized[1]) / 2
    return Letterbox(gain, resized, round(dh - 0.1), round(dh + 0.1), round(dw - 0.1), round(dw + 0.1))


def letterbox(image: np.ndarray, new_hw: tuple[int, int] = (640, 640)) -> np.ndarray:
    """Resize keeping the aspect ratio (bilinear) and pad with 114 to ``new_hw``: HWC uint8."""
    cv2 = _cv2()
    geo = letterbox_geometry(image.shape[:2], new_hw)
    if image.shape[1::-1] != geo.resized:
        image = cv2.resize(image, geo.resized, interpolation=cv2.INTER_LINEAR)
    return cv2.copyMakeBorder(
        image, geo.top, geo.bottom, geo.left, geo.right, cv2.BORDER_CONSTANT, value=(PAD_VALUE,) * 3
    )


def to_model_input(bgr: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """BGR HWC uint8 -> RGB CHW float32 in [0, 1] (division by 255, as ultralytics does).

    Bit-identical to ``bgr[..., ::-1].transpose(2, 0, 1) / 255`` but ~10x faster: each plane
    is split out contiguous first, so the division reads and writes memory linearly.
    """
    if out is None:
        out = np.empty((3, *bgr.shape[:2]), np.float32)
    for k, plane in enumerate(reversed(_cv2().split(bgr))):
        np.divide(plane, np.float32(255.0), out=out[k], dtype=np.float32)
    return out


def stretch(image: np.ndarray, size_hw: tuple[int, int]) -> np.ndarray:
    """Resize to ``size_hw`` ignoring the aspect ratio (the naive client path)."""
    cv2 = _cv2()
    return cv2.resize(image, (size_hw[1], size_hw[0]), interpolation=cv2.INTER_LINEAR)


def nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float, max_keep: int | None = None) -> np.ndarray:
    """Greedy NMS on xyxy boxes like ``torchvision.ops.nms``: indices kept, by descending score.

    A box is dropped when its IoU with a kept, higher-scoring box is > ``iou_threshold``.
    Each step is vectorised over the remaining boxes; the loop runs once per kept box.
    """
    order = np.argsort(-scores, kind="stable")
    x1, y1, x2, y2 = (boxes[:, k] for k in range(4))
    areas = (x2 - x1) * (y2 - y1)
    keep = []
    limit = len(order) if max_keep is None else max_keep
    while order.size and len(keep) < limit:
        i = order[0]
        keep.append(i)
        rest = order[1:]
        inter = np.clip(np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]), 0, None) * np.clip(
            np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]), 0, None
        )
        union = areas[i] + areas[rest] - inter
        iou = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
        order = rest[iou <= iou_threshold]
    return np.asarray(keep, dtype=np.int64)


def decode_head(
    head: np.ndarray,
    conf: float = 0.25,
    iou: float = 0.7,
    max_det: int = 300,
    agnostic: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One image's raw head output ``(4 + nc, anchors)`` (xywh + class scores) -> detections.

    Returns ``(boxes xyxy float32 (n, 4) in model-input pixels, scores float32 (n,),
    class_ids int32 (n,))`` sorted by descending score, as ultralytics' NMS keeps them.
    """
    if head.ndim != 2 or head.shape[0] < 5:
        raise InputError(f"head output must be (4 + classes, anchors), got {tuple(head.shape)}")
    cls = head[4:]
    best = cls.max(axis=0)
    candidates = np.flatnonzero(best > conf)
    empty = (np.zeros((0, 4), np.float32), np.zeros((0,), np.float32), np.zeros((0,), np.int32))
    if candidates.size == 0 or max_det <= 0:
        return empty
    scores = best[candidates].astype(np.float32)
    class_ids = cls[:, candidates].argmax(axis=0)
    xywh = head[:4, candidates].T.astype(np.float32)
    half_wh = xywh[:, 2:] / 2
    boxes = np.concatenate([xywh[:, :2] - half_wh, xywh[:, :2] + half_wh], axis=1)
    if scores.size > MAX_NMS:
        top = np.argsort(-scores, kind="stable")[:MAX_NMS]
        boxes, scores, class_ids = boxes[top], scores[top], class_ids[top]
    offsets = 0.0 if agnostic else (class_ids.astype(np.float32) * MAX_WH)[:, None]
    keep = nms(boxes + offsets, scores, iou, max_keep=max_det)
    return boxes[keep], scores[keep], class_ids[keep].astype(np.int32)


def scale_boxes(boxes: np.ndarray, model_hw: tuple[int, int], orig_hw: tuple[int, int]) -> np.ndarray:
    """Map xyxy boxes from the letterboxed model input back to the original image, clipped.

    ultralytics ``ops.scale_boxes`` (per-axis gain from the rounded resized size) + ``clip_boxes``.
    """
    geo = letterbox_geometry(orig_hw, model_hw)
    gain_x = geo.resized[0] / orig_hw[1]
    gain_y = geo.resized[1] / orig_hw[0]
    pad_x = round((model_hw[1] - geo.resized[0]) / 2 - 0.1)
    pad_y = round((model_hw[0] - geo.resized[1]) / 2 - 0.1)
    out = boxes.astype(np.float32, copy=True)
    out[:, [0, 2]] = ((out[:, [0, 2]] - pad_x) / gain_x).clip(0, orig_hw[1])
    out[:, [1, 3]] = ((out[:, [1, 3]] - pad_y) / gain_y).clip(0, orig_hw[0])
    return out


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU of xyxy boxes: ``(len(a), len(b))``."""
    a = np.asarray(a, np.float64).reshape(-1, 4)
    b = np.asarray(b, np.float64).reshape(-1, 4)
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    area_a = np.prod(a[:, 2:] - a[:, :2], axis=1)
    area_b = np.prod(b[:, 2:] - b[:, :2], axis=1)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
