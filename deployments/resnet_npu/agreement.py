"""Agreement of the reduced JPEG decode (``decode: "reduced"``) with the full decode, on held-out photos.

The server's preprocess models can decode large JPEGs at 1/2, 1/4 or 1/8 scale
(libjpeg-turbo DCT scaling, triton_helpers.images), which changes pixels. This script runs both
pipelines (triton_helpers.classification, exactly what the preprocess models run) through the
served ONNX classifiers in-process (onnxruntime) and reports top-1 agreement, top-5 overlap and
the largest probability difference. It also runs the full-decode pixels through ``<model>_uint8``
(normalisation folded into the graph, what the ensembles serve) and reports the largest logit
difference to the FP32 model fed the Python-normalised tensor (0 means bit-identical).

Held-out photos: every real photograph installed with the project's packages (matplotlib's
grace_hopper.jpg, scikit-learn's china.jpg / flower.jpg, ultralytics' bus.jpg / zidane.jpg) plus
yolo11_ensemble's fixture photos, none used to make resnet_npu's fixtures except bus.jpg. Each is
also cropped and rescaled into ``--variants`` re-encoded JPEGs (quality 90, fixed seed) so that
different content and sizes reach the classifier.

    .venv/bin/python deployments/resnet_npu/agreement.py [--variants 12] [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
from pathlib import Path

import numpy as np

from triton_helpers.classification import ImageTransform, decode_min_side, softmax
from triton_helpers.images import open_image

HERE = Path(__file__).resolve().parent
MODELS = {"efficientnet_lite0": ImageTransform.efficientnet_lite(), "resnet50": ImageTransform.torchvision_imagenet()}
PACKAGE_PHOTOS = [
    ("matplotlib", "mpl-data/sample_data/grace_hopper.jpg"),
    ("sklearn", "datasets/images/china.jpg"),
    ("sklearn", "datasets/images/flower.jpg"),
    ("ultralytics", "assets/bus.jpg"),
    ("ultralytics", "assets/zidane.jpg"),
]
FIXTURE_PHOTOS = ["wide.jpg", "zidane_cmyk.jpg", "bus_exif_rotated.jpg", "bus_gray.jpg"]


def source_photos() -> dict[str, bytes]:
    found = {}
    for package, relative in PACKAGE_PHOTOS:
        spec = importlib.util.find_spec(package)
        if spec and spec.submodule_search_locations:
            path = Path(list(spec.submodule_search_locations)[0]) / relative
            if path.exists():
                found[f"{package}/{path.name}"] = path.read_bytes()
    fixtures = HERE.parent / "yolo11_ensemble" / "fixtures" / "images"
    for name in FIXTURE_PHOTOS:
        if (fixtures / name).exists():
            found[f"yolo11_ensemble/{name}"] = (fixtures / name).read_bytes()
    return found


def variants(name: str, data: bytes, count: int, rng: np.random.RandomState) -> dict[str, bytes]:
    """The photo itself plus ``count`` random crops (40-100 % of each side), rescaled 0.6-1.5x, as JPEG."""
    from PIL import Image

    out = {name: data}
    image = open_image(data)
    width, height = image.size
    for index in range(count):
        cw, ch = (int(width * rng.uniform(0.4, 1.0)), int(height * rng.uniform(0.4, 1.0)))
        left, top = rng.randint(0, width - cw + 1), rng.randint(0, height - ch + 1)
        scale = rng.uniform(0.6, 1.5)
        crop = image.crop((left, top, left + cw, top + ch)).resize(
            (max(int(cw * scale), 8), max(int(ch * scale), 8)), Image.Resampling.BICUBIC
        )
        buffer = io.BytesIO()
        crop.save(buffer, format="JPEG", quality=90)
        out[f"{name}#{index}"] = buffer.getvalue()
    return out


def main(argv=None) -> int:
    import onnxruntime as ort

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=int, default=12, help="random crops/rescales per source photo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the per-model summary here")
    args = parser.parse_args(argv)
    rng = np.random.RandomState(args.seed)
    images = {}
    for name, data in source_photos().items():
        images.update(variants(name, data, args.variants, rng))
    summary = {"sources": len(source_photos()), "images": len(images), "models": {}}
    for model, transform in MODELS.items():
        session = ort.InferenceSession(
            str(HERE / "model_repository" / model / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
        )
        input_name = session.get_inputs()[0].name
        folded = ort.InferenceSession(
            str(HERE / "model_repository" / f"{model}_uint8" / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
        )
        folded_worst = 0.0
        reduced_side = decode_min_side("reduced", transform)
        top1 = top5 = reduced_count = 0
        worst = 0.0
        for data in images.values():
            full_image = open_image(data)
            full = transform(full_image)
            small_image = open_image(data, min_shorter_side=reduced_side)
            reduced = transform(small_image)
            reduced_count += small_image.size != open_image(data).size
            logits = session.run(None, {input_name: np.stack([full, reduced])})[0]
            folded_logits = folded.run(None, {"PIXELS": transform.pixels(full_image)[None]})[0]
            folded_worst = max(folded_worst, float(np.abs(folded_logits[0] - logits[0]).max()))
            probs = softmax(logits)
            a, b = np.argsort(-logits[0])[:5], np.argsort(-logits[1])[:5]
            top1 += a[0] == b[0]
            top5 += len(set(a) & set(b))
            worst = max(worst, float(np.abs(probs[0] - probs[1]).max()))
        n = len(images)
        summary["models"][model] = {
            "top1_agreement": round(top1 / n, 4),
            "top5_overlap": round(top5 / (5 * n), 4),
            "max_probability_difference": round(worst, 4),
            "images_decoded_reduced": int(reduced_count),
            "folded_uint8_max_logit_difference": folded_worst,
        }
        print(
            f"{model:20s} {n} images ({reduced_count} decoded reduced): top-1 agreement {top1}/{n} "
            f"({top1 / n:.1%}), top-5 overlap {top5 / (5 * n):.1%}, max |dp| {worst:.4f}; "
            f"{model}_uint8 vs FP32 max |dlogit| {folded_worst:.3g}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
