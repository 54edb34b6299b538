"""Client for the yolo11_ensemble deployment: send image files, print (and draw) the detections.

    python client.py IMAGE... [--url HOST:PORT] [--protocol http|grpc]
        [--conf 0.25] [--iou 0.7] [--max-det 300] [--save out.jpg] [--mode ensemble|tensor640|naive]

Modes:
  ensemble   (default) the raw file bytes go to `yolo11_ensemble`; the server decodes,
             letterboxes, runs the detector and NMS; the answer is a few hundred bytes.
  tensor640  the "before" path done sanely: this process decodes and letterboxes to 640,
             sends the float32 tensor (4.9 MB) to the bare `yolo11_detector`, and runs NMS here.
  naive      the "before" path as in the real incident: the image is stretched to a large
             square (--naive-size, default 1280) and sent as float32 (19.7 MB at 1280).

The ensemble mode needs tritonclient[all] and numpy (Pillow for --save) only: it runs outside
this repository too (README, "Outside this repository"). The "before" modes preprocess here as
ultralytics does, with opencv-python and this folder's yolo11_ensemble_processing package.

Importable: ``detect_ensemble``, ``tensor_request_640``, ``tensor_request_naive``,
``finish_tensor`` build and read the requests the harness benchmarks use.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tritonclient.utils import InferenceServerException

# Command-line plumbing, the same in every deployment's client so that each file stands alone
# (tritonclient and numpy are all it needs): server options, one-line failures, exit codes
# 0 done, 1 server unreachable or request refused, 2 bad arguments or an unreadable file.
DEFAULT_URLS = {"http": "127.0.0.1:8000", "grpc": "127.0.0.1:8001"}
EXIT_SERVER, EXIT_USAGE = 1, 2


class ClientError(Exception):
    """A failure the client explains in one line (``exit_code`` says which kind)."""

    def __init__(self, message: str, exit_code: int = EXIT_SERVER):
        super().__init__(message)
        self.exit_code = exit_code


class ClientArgumentParser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line (``--help`` still prints the usage)."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def add_server_options(parser: argparse.ArgumentParser, in_subcommand: bool = False) -> None:
    """``--url`` and ``--protocol``; on a subcommand they default to what was given before it."""
    url_default = argparse.SUPPRESS if in_subcommand else None
    protocol_default = argparse.SUPPRESS if in_subcommand else "http"
    parser.add_argument("--url", default=url_default, help="host:port (default 127.0.0.1:8000 http, :8001 grpc)")
    parser.add_argument("--protocol", choices=("http", "grpc"), default=protocol_default)


def read_file(path) -> bytes:
    """A file's bytes, or a one-line ``ClientError`` saying why it cannot be read."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ClientError(f"cannot read {path}: {exc.strerror or exc}", EXIT_USAGE) from None


def explain(exc: Exception, url: str, protocol: str) -> tuple[str, int]:
    """One line and an exit code for a failure."""
    unreachable = f"cannot reach a Triton server at {url} ({protocol}): is it running?"
    if isinstance(exc, ClientError):
        return str(exc), exc.exit_code
    if isinstance(exc, InferenceServerException):
        message = " ".join(str(exc.message() or exc).split())
        if exc.status() in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED") or "failed to connect" in message:
            return unreachable, EXIT_SERVER
        return f"server refused the request: {message}", EXIT_SERVER
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.filename}: {exc.strerror}", EXIT_USAGE
    if isinstance(exc, OSError) or type(exc).__module__.startswith(("aiohttp", "gevent")):
        return unreachable, EXIT_SERVER
    return f"{type(exc).__name__}: {exc}", EXIT_SERVER


def run(parser: argparse.ArgumentParser, handler, argv=None) -> int:
    """Parse ``argv`` and call ``handler(args, url)``; a failure becomes one line on stderr."""
    args = parser.parse_args(argv)
    url = args.url or DEFAULT_URLS[args.protocol]
    try:
        return handler(args, url) or 0
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - a command-line tool explains, it does not dump a traceback
        message, code = explain(exc, url, args.protocol)
        print(f"{parser.prog}: {message}", file=sys.stderr)
        return code


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
    from PIL import Image, ImageDraw

    image = Image.open(io.BytesIO(data)).convert("RGB")
    pen = ImageDraw.Draw(image)
    for box, score, name in zip(detections.boxes, detections.scores, detections.class_names):
        x1, y1, x2, y2 = (round(float(v)) for v in box)
        pen.rectangle((x1, y1, x2, y2), outline=(255, 200, 0), width=2)
        pen.text((x1, max(y1 - 12, 0)), f"{name} {score:.2f}", fill=(255, 200, 0))
    image.save(path)


def _detect(args, url: str) -> int:
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
    parser = ClientArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_options(parser)
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
