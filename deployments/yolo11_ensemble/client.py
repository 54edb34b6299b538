"""Client for the yolo11_ensemble deployment: send image files, print (and draw) the detections.

    .venv/bin/python deployments/yolo11_ensemble/client.py IMAGE... [--url HOST:PORT] [--protocol http|grpc]
        [--conf 0.25] [--iou 0.7] [--max-det 300] [--save out.jpg] [--mode ensemble|tensor640|naive]

Modes:
  ensemble   (default) the raw file bytes go to `yolo11_ensemble`; the server decodes,
             letterboxes, runs the detector and NMS; the answer is a few hundred bytes.
  tensor640  the "before" path done sanely: this process decodes and letterboxes to 640,
             sends the float32 tensor (4.9 MB) to the bare `yolo11_detector`, and runs NMS here.
  naive      the "before" path as in the real incident: the image is stretched to a large
             square (--naive-size, default 1280) and sent as float32 (19.7 MB at 1280).

Importable: ``detect_ensemble``, ``tensor_request_640``, ``tensor_request_naive``,
``finish_tensor`` build and read the requests the harness benchmarks use.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.client_cli import DEFAULT_URLS, EXIT_USAGE, ClientError, client_parser, read_file, run, server_url

ENSEMBLE = "yolo11_ensemble"
DETECTOR = "yolo11_detector"
OUTPUTS = ["BOXES", "SCORES", "CLASS_IDS", "CLASS_NAMES", "DETECTIONS_JSON"]
NAIVE_SIZE = 1280


@dataclass
class Detections:
    """Final detections of one image, boxes in its original pixels."""

    boxes: np.ndarray  # (n, 4) x1, y1, x2, y2
    scores: np.ndarray  # (n,)
    class_ids: np.ndarray  # (n,)
    class_names: list[str]
    image_size: tuple[int, int]  # width, height

    def as_dicts(self) -> list[dict]:
        return [
            {"box": [round(float(v), 1) for v in b], "score": round(float(s), 4), "class_id": int(c), "class_name": n}
            for b, s, c, n in zip(self.boxes, self.scores, self.class_ids, self.class_names)
        ]


def _client(protocol: str, url: str):
    if protocol == "http":
        import tritonclient.http as module
    else:
        import tritonclient.grpc as module
    return module, module.InferenceServerClient(url)


def _infer(protocol, url, model, inputs, outputs, parameters=None) -> dict:
    from tritonclient.utils import np_to_triton_dtype

    module, client = _client(protocol, url)
    try:
        infer_inputs = []
        for name, array in inputs.items():
            item = module.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            item.set_data_from_numpy(array)
            infer_inputs.append(item)
        requested = [module.InferRequestedOutput(n) for n in outputs]
        result = client.infer(model, infer_inputs, outputs=requested, parameters=parameters)
        return {n: result.as_numpy(n) for n in outputs}
    finally:
        client.close()


def ensemble_outputs_to_detections(out: dict, index: int = 0) -> Detections:
    """Batch item ``index`` of the ensemble's outputs (padding rows have class id -1)."""
    keep = out["CLASS_IDS"][index] >= 0
    text = json.loads(out["DETECTIONS_JSON"][index][0])
    names = [n.decode("utf-8") if isinstance(n, bytes) else str(n) for n in out["CLASS_NAMES"][index][keep]]
    return Detections(
        out["BOXES"][index][keep],
        out["SCORES"][index][keep],
        out["CLASS_IDS"][index][keep],
        names,
        tuple(text["image_size"]),
    )


def detect_ensemble(
    images: list[bytes],
    url: str | None = None,
    protocol: str = "http",
    conf: float | None = None,
    iou: float | None = None,
    max_det: int | None = None,
) -> list[Detections]:
    """Send encoded images (one batch) to the ensemble; one ``Detections`` per image."""
    params = {k: v for k, v in {"conf": conf, "iou": iou, "max_det": max_det}.items() if v is not None}
    array = np.array([[data] for data in images], dtype=object)
    out = _infer(protocol, url or DEFAULT_URLS[protocol], ENSEMBLE, {"IMAGE_BYTES": array}, OUTPUTS, params or None)
    return [ensemble_outputs_to_detections(out, i) for i in range(len(images))]


def _decode(data: bytes) -> np.ndarray:
    import cv2

    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if image is None:
        raise ValueError("cannot decode image")
    return image


def tensor_request_640(data: bytes, size: int = 640) -> tuple[dict, dict]:
    """Client-side preprocessing as ultralytics does it: ({'images': (1, 3, 640, 640)}, geometry)."""
    from yolo11_ensemble_processing.detection import letterbox, to_model_input

    bgr = _decode(data)
    tensor = to_model_input(letterbox(bgr, (size, size)))[None]
    return {"images": tensor}, {"orig_hw": bgr.shape[:2], "model_hw": (size, size), "stretched": False}


def tensor_request_naive(data: bytes, size: int = NAIVE_SIZE) -> tuple[dict, dict]:
    """The naive client: stretch the image to ``size`` x ``size`` (aspect ignored), float32."""
    from yolo11_ensemble_processing.detection import stretch, to_model_input

    bgr = _decode(data)
    tensor = to_model_input(stretch(bgr, (size, size)))[None]
    return {"images": tensor}, {"orig_hw": bgr.shape[:2], "model_hw": (size, size), "stretched": True}


def finish_tensor(
    head: np.ndarray, geometry: dict, class_names: list[str], conf=0.25, iou=0.7, max_det=300
) -> Detections:
    """Client-side postprocessing of the detector's ``output0`` for one image."""
    from yolo11_ensemble_processing.detection import decode_head, scale_boxes

    boxes, scores, class_ids = decode_head(np.asarray(head)[0], conf=conf, iou=iou, max_det=max_det)
    (h, w), (mh, mw) = geometry["orig_hw"], geometry["model_hw"]
    if geometry["stretched"]:
        boxes = boxes * np.array([w / mw, h / mh, w / mw, h / mh], np.float32)
        boxes[:, [0, 2]] = boxes[:, [0, 2]].clip(0, w)
        boxes[:, [1, 3]] = boxes[:, [1, 3]].clip(0, h)
    else:
        boxes = scale_boxes(boxes, (mh, mw), (h, w))
    names = [class_names[int(c)] if 0 <= int(c) < len(class_names) else str(int(c)) for c in class_ids]
    return Detections(boxes, scores, class_ids, names, (w, h))


def detector_class_names(url: str, protocol: str = "http") -> list[str]:
    """Class names for client-side postprocessing. A client that post-processes itself must ship
    them; this one reads the list export.py wrote (empty list: ids are printed instead)."""
    path = Path(__file__).resolve().parent / "model_repository/postprocess/1/assets/class_names.json"
    if path.exists():
        return json.loads(path.read_text())
    return []


def detect_tensor(
    data: bytes,
    url: str | None = None,
    protocol: str = "http",
    naive: bool = False,
    naive_size: int = NAIVE_SIZE,
    **thresholds,
) -> Detections:
    """The "before" path for one image: preprocess here, bare detector, postprocess here."""
    url = url or DEFAULT_URLS[protocol]
    inputs, geometry = tensor_request_naive(data, naive_size) if naive else tensor_request_640(data)
    out = _infer(protocol, url, DETECTOR, inputs, ["output0"])
    return finish_tensor(out["output0"], geometry, detector_class_names(url, protocol), **thresholds)


def draw(data: bytes, detections: Detections, path: str) -> None:
    """Save a copy of the image with the boxes and labels drawn."""
    import cv2

    image = _decode(data)
    for box, score, name in zip(detections.boxes, detections.scores, detections.class_names):
        x1, y1, x2, y2 = (int(round(float(v))) for v in box)
        cv2.rectangle(image, (x1, y1), (x2, y2), (0, 200, 255), 2)
        cv2.putText(
            image, f"{name} {score:.2f}", (x1, max(y1 - 5, 12)), cv2.FONT_HERSHEY_SIMPLEX, 0.6, (0, 200, 255), 2
        )
    if not cv2.imwrite(path, image):
        raise OSError(f"cannot write {path}")


def _detect(args) -> int:
    url = server_url(args)
    datas = [read_file(p) for p in args.images]
    if args.mode == "ensemble":
        results = detect_ensemble(datas, url, args.protocol, args.conf, args.iou, args.max_det)
    else:
        thresholds = {
            k: v for k, v in {"conf": args.conf, "iou": args.iou, "max_det": args.max_det}.items() if v is not None
        }
        try:
            results = [
                detect_tensor(d, url, args.protocol, args.mode == "naive", args.naive_size, **thresholds) for d in datas
            ]
        except ValueError as exc:
            raise ClientError(f"{exc} (mode {args.mode} decodes on this machine)", EXIT_USAGE) from None
    for path, data, det in zip(args.images, datas, results):
        if args.json:
            print(json.dumps({"image": path, "image_size": det.image_size, "detections": det.as_dicts()}))
        else:
            print(f"{path}: {det.image_size[0]}x{det.image_size[1]}, {len(det.scores)} detections")
            for d in det.as_dicts():
                print(f"  {d['class_name']:>12} {d['score']:.3f}  box {d['box']}")
        if args.save:
            target = args.save
            if len(args.images) > 1:
                Path(args.save).mkdir(parents=True, exist_ok=True)
                target = str(Path(args.save) / Path(path).name)
            draw(data, det, target)
            print(f"  drawn to {target}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = client_parser(__doc__)
    parser.add_argument("images", nargs="+", help="image files")
    parser.add_argument("--mode", choices=["ensemble", "tensor640", "naive"], default="ensemble")
    parser.add_argument("--naive-size", type=int, default=NAIVE_SIZE)
    parser.add_argument("--conf", type=float)
    parser.add_argument("--iou", type=float)
    parser.add_argument("--max-det", type=int)
    parser.add_argument("--save", help="draw the detections to this file (one image), or to a folder (several)")
    parser.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    return run(parser, _detect, argv)


if __name__ == "__main__":
    sys.exit(main())
