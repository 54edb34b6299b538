"""Write fixtures/: test images and the detections ultralytics' own `predict` finds in them.

    python make_fixtures.py                     # same default weights as export.py
    python make_fixtures.py --weights best.pt   # any checkpoint (then export it with the same --weights)

The reference is ``YOLO(weights).predict(path, imgsz=640, conf=0.25, iou=0.7, rect=False)``
on the torch checkpoint: ``rect=False`` makes ultralytics letterbox to the full 640x640 square,
the shape of the exported model, instead of its minimal-rectangle mode for .pt files. imgsz is
preprocess's tensor size (its config.pbtxt, which export.py sets to the exported size).
Also the raw head (4 + classes, anchors) of that predictor on bus.jpg and zidane.jpg, at the
anchors of highest class score and at anchors spread evenly: what the checks compare when a
checkpoint (seeded weights, other classes) finds few or no boxes in these images.
And on those two images, the same predict at a low confidence of each image's own (in the
widest score gap among its best boxes, so a few boxes pass it whatever the checkpoint: trained or
seeded, YOLOv8 or YOLO11): the box path checked at a confidence where there are boxes.
Images: ultralytics' own bus.jpg and zidane.jpg plus edge cases made from them (PNG,
grayscale, CMYK JPEG, WebP, tiny, very wide, EXIF-rotated). Total well under 2 MB.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import export  # noqa: E402  (sets YOLO_OFFLINE / YOLO_CONFIG_DIR before ultralytics loads)

from harness import provenance  # noqa: E402

FIXTURES = HERE / "fixtures"
IMAGES = FIXTURES / "images"
EXPECTED = FIXTURES / "expected_detections.json"
CONF, IOU, MAX_DET = 0.25, 0.7, 300
HEAD_IMAGES, HEAD_ANCHORS = ("bus.jpg", "zidane.jpg"), 64
#: The low confidence is cut after this many best boxes at least, and this many at most.
LOW_CONF_BOXES = (3, 10)
REGENERATE = "python -m harness refresh yolo11_ensemble"


def make_images() -> list[Path]:
    """Copy ultralytics' assets and derive the edge cases from them (deterministic)."""
    import ultralytics
    from PIL import Image

    assets = Path(ultralytics.__file__).parent / "assets"
    IMAGES.mkdir(parents=True, exist_ok=True)
    for old in IMAGES.iterdir():
        old.unlink()
    shutil.copy(assets / "bus.jpg", IMAGES / "bus.jpg")
    shutil.copy(assets / "zidane.jpg", IMAGES / "zidane.jpg")
    bus = Image.open(assets / "bus.jpg").convert("RGB")  # 810x1080
    zidane = Image.open(assets / "zidane.jpg").convert("RGB")  # 1280x720

    bus.resize((405, 540), Image.BILINEAR).save(IMAGES / "bus_small.png", optimize=True)
    bus.convert("L").save(IMAGES / "bus_gray.jpg", quality=85)
    zidane.convert("CMYK").save(IMAGES / "zidane_cmyk.jpg", quality=85)
    zidane.resize((640, 360), Image.BILINEAR).save(IMAGES / "zidane.webp", quality=80)
    bus.resize((48, 64), Image.BILINEAR).save(IMAGES / "bus_tiny.jpg", quality=90)
    wide = Image.new("RGB", (810 + 1280 + 810, 1080), (40, 40, 40))  # 2900x1080 -> ~8:3
    wide.paste(bus, (0, 0))
    wide.paste(zidane, (810, 180))
    wide.paste(bus.transpose(Image.FLIP_LEFT_RIGHT), (810 + 1280, 0))
    wide.resize((1450, 540), Image.BILINEAR).save(IMAGES / "wide.jpg", quality=85)
    # Stored rotated 90 degrees; EXIF Orientation 6 (rotate 90 CW to display) makes it upright.
    exif = Image.Exif()
    exif[0x0112] = 6
    bus.transpose(Image.ROTATE_90).save(IMAGES / "bus_exif_rotated.jpg", quality=85, exif=exif.tobytes())
    return sorted(IMAGES.iterdir())


def head_reference(model, path: Path) -> dict:
    """The raw head of ``model``'s predictor (ultralytics' own preprocess and forward) on one image."""
    import cv2
    import torch

    predictor = model.predictor  # set up by the predict just run: imgsz, rect=False
    with torch.inference_mode():
        out = predictor.inference(predictor.preprocess([cv2.imread(str(path))]))
    head = (out[0] if isinstance(out, (list, tuple)) else out)[0].float().numpy()  # (4 + nc, anchors)
    top = np.argsort(-head[4:].max(axis=0), kind="stable")[:HEAD_ANCHORS]
    spread = np.linspace(0, head.shape[1] - 1, HEAD_ANCHORS).round().astype(int)
    anchors = sorted({int(a) for a in (*top, *spread)})
    return {
        "shape": list(head.shape),
        "anchors": anchors,
        "values": [[round(float(v), 5) for v in head[:, a]] for a in anchors],
    }


def detections(result, names: list[str]) -> dict:
    """An ultralytics result as the fixtures record it: the image size and its boxes."""
    boxes = result.boxes
    return {
        "size": [int(result.orig_shape[1]), int(result.orig_shape[0])],
        "detections": [
            {
                "box": [round(float(v), 3) for v in box],
                "score": round(float(score), 5),
                "class_id": int(cid),
                "class_name": names[int(cid)],
            }
            for box, score, cid in zip(boxes.xyxy.tolist(), boxes.conf.tolist(), boxes.cls.tolist())
        ],
    }


def low_confidence(model, path: Path, imgsz: int) -> float:
    """A confidence some of the image's best boxes pass: midway across the widest gap (relative to
    the scores) between the LOW_CONF_BOXES best scores predict finds at any confidence."""
    fewest, most = LOW_CONF_BOXES
    found = model.predict(
        str(path), imgsz=imgsz, conf=1e-6, iou=IOU, max_det=most + 1, rect=False, device="cpu", verbose=False
    )[0]
    scores = sorted(found.boxes.conf.tolist(), reverse=True)
    if len(scores) <= fewest:
        return scores[-1] / 2 if scores else 1e-6
    cut = max(range(fewest, len(scores)), key=lambda i: (scores[i - 1] - scores[i]) / scores[i - 1])
    return (scores[cut - 1] + scores[cut]) / 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", default=export.DEFAULT_WEIGHTS)
    args = parser.parse_args(argv)

    import ultralytics
    from ultralytics import YOLO

    weights = export.resolve_weights(args.weights)
    model = YOLO(str(weights))
    names = [model.names[i] for i in range(len(model.names))]
    imgsz = export.input_size()[0]
    images = make_images()
    expected, heads, low = {}, {}, {}
    for path in images:
        result = model.predict(
            str(path), imgsz=imgsz, conf=CONF, iou=IOU, max_det=MAX_DET, rect=False, device="cpu", verbose=False
        )[0]
        if path.name in HEAD_IMAGES:
            heads[path.name] = head_reference(model, path)
        expected[path.name] = detections(result, names)
        print(f"{path.name:24} {result.orig_shape[1]}x{result.orig_shape[0]:<5} {len(result.boxes)} boxes")
    for name in HEAD_IMAGES:
        conf = round(low_confidence(model, IMAGES / name, imgsz), 6)
        result = model.predict(
            str(IMAGES / name),
            imgsz=imgsz,
            conf=conf,
            iou=IOU,
            max_det=MAX_DET,
            rect=False,
            device="cpu",
            verbose=False,
        )[0]
        low[name] = {"conf": conf, **detections(result, names)}
        print(f"{name:24} conf {conf:<10} {len(result.boxes)} boxes")
    record = {
        "reference": f"ultralytics {ultralytics.__version__} YOLO(weights).predict(path, imgsz={imgsz}, "
        f"conf={CONF}, iou={IOU}, max_det={MAX_DET}, rect=False)",
        provenance.FIXTURES_KEY: provenance.fixtures_record(
            {"yolo11_detector": provenance.file_identity(weights, export.weights_source(weights))}, REGENERATE
        ),
        "imgsz": imgsz,
        "conf": CONF,
        "iou": IOU,
        "max_det": MAX_DET,
        "class_names": names,
        "match_rule": "same number of boxes, same classes, IoU >= 0.9 per matched box, score within 0.02",
        "images": expected,
        "head_rule": "raw head at the listed anchors: xywh within 1e-3 (relative) + 0.05 px, scores within 1e-4",
        "heads": heads,
        "low_conf": low,
    }
    EXPECTED.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    total = sum(p.stat().st_size for p in images)
    print(f"wrote {EXPECTED.relative_to(HERE)} ({len(images)} images, {total / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
