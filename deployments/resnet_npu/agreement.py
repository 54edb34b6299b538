"""Agreement of the preprocess models' fast options with the exact reference transform, on held-out photos.

The server's preprocess models have config options that change pixels for speed: ``decode:
"reduced"`` (large JPEGs decoded at 1/2, 1/4 or 1/8 scale, libjpeg-turbo DCT scaling,
triton_helpers.images) and ``reducing_gap: "<x>"`` (Pillow's integer box reduction before the
resize filter, resnet_npu_processing.classification). Each ``--candidate`` (config parameters as
``key=value,key=value``; default: ``decode=reduced``) is run next to the exact pipeline
(resnet_npu_processing.classification, exactly what the preprocess models run) through the served ONNX
classifiers in-process (onnxruntime); reported: images whose pixels changed, top-1 agreement,
top-5 overlap, the largest probability and pixel differences. It also runs the full-decode pixels through ``<model>_uint8``
(normalisation folded into the graph, what the ensembles serve) and reports the largest logit
difference to the FP32 model fed the Python-normalised tensor (0 means bit-identical).

Held-out photos: every real photograph installed with the project's packages (matplotlib's
grace_hopper.jpg, scikit-learn's china.jpg / flower.jpg, ultralytics' bus.jpg / zidane.jpg) plus
four made from the last two (very wide, CMYK, EXIF-rotated, gray), none used to make resnet_npu's
fixtures except bus.jpg. Each is
also cropped and rescaled into ``--variants`` re-encoded JPEGs (quality 90, fixed seed) so that
different content and sizes reach the classifier (``--scale-max`` above 1.5 adds larger images,
upscaled, so that options that act only on large images are exercised).

    .venv/bin/python deployments/resnet_npu/agreement.py [--variants 12] [--json out.json] \
        [--candidate decode=reduced --candidate reducing_gap=1.5 ...]
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
from resnet_npu_processing.classification import ImageTransform, decode_min_side, softmax

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


def derived_photos(bus: bytes, zidane: bytes) -> dict[str, bytes]:
    """Four harder photos made from ultralytics' bus.jpg / zidane.jpg: very wide, CMYK, EXIF-rotated, gray."""
    from PIL import Image

    def jpeg(image, **options) -> bytes:
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=85, **options)
        return buffer.getvalue()

    bus_image = Image.open(io.BytesIO(bus)).convert("RGB")  # 810x1080
    zidane_image = Image.open(io.BytesIO(zidane)).convert("RGB")  # 1280x720
    wide = Image.new("RGB", (810 + 1280 + 810, 1080), (40, 40, 40))
    wide.paste(bus_image, (0, 0))
    wide.paste(zidane_image, (810, 180))
    wide.paste(bus_image.transpose(Image.FLIP_LEFT_RIGHT), (810 + 1280, 0))
    exif = Image.Exif()
    exif[0x0112] = 6  # stored rotated 90 degrees; Orientation 6 makes it upright
    return {
        "derived/wide.jpg": jpeg(wide.resize((1450, 540), Image.BILINEAR)),
        "derived/zidane_cmyk.jpg": jpeg(zidane_image.convert("CMYK")),
        "derived/bus_exif_rotated.jpg": jpeg(bus_image.transpose(Image.ROTATE_90), exif=exif.tobytes()),
        "derived/bus_gray.jpg": jpeg(bus_image.convert("L")),
    }


def source_photos() -> dict[str, bytes]:
    found = {}
    for package, relative in PACKAGE_PHOTOS:
        spec = importlib.util.find_spec(package)
        if spec and spec.submodule_search_locations:
            path = Path(list(spec.submodule_search_locations)[0]) / relative
            if path.exists():
                found[f"{package}/{path.name}"] = path.read_bytes()
    if "ultralytics/bus.jpg" in found and "ultralytics/zidane.jpg" in found:
        found.update(derived_photos(found["ultralytics/bus.jpg"], found["ultralytics/zidane.jpg"]))
    return found


def variants(
    name: str, data: bytes, count: int, rng: np.random.RandomState, scale_max: float = 1.5
) -> dict[str, bytes]:
    """The photo itself plus ``count`` random crops (40-100 % of each side), rescaled 0.6-``scale_max`` x, as JPEG."""
    from PIL import Image

    out = {name: data}
    image = open_image(data)
    width, height = image.size
    for index in range(count):
        cw, ch = (int(width * rng.uniform(0.4, 1.0)), int(height * rng.uniform(0.4, 1.0)))
        left, top = rng.randint(0, width - cw + 1), rng.randint(0, height - ch + 1)
        scale = rng.uniform(0.6, scale_max)
        crop = image.crop((left, top, left + cw, top + ch)).resize(
            (max(int(cw * scale), 8), max(int(ch * scale), 8)), Image.Resampling.BICUBIC
        )
        buffer = io.BytesIO()
        crop.save(buffer, format="JPEG", quality=90)
        out[f"{name}#{index}"] = buffer.getvalue()
    return out


def candidate_pipeline(spec: str, transform: ImageTransform) -> tuple[ImageTransform, int | None]:
    """``key=value,...`` config parameters (``decode``, ``reducing_gap``) applied to a model's transform."""
    params = dict(item.split("=", 1) for item in spec.split(",") if item)
    unknown = set(params) - {"decode", "reducing_gap"}
    if unknown:
        raise SystemExit(f"candidate {spec!r}: unknown parameters {sorted(unknown)} (decode, reducing_gap)")
    gap = ImageTransform.from_parameters({"reducing_gap": params.get("reducing_gap", "")}).reducing_gap
    return replace(transform, reducing_gap=gap), decode_min_side(params.get("decode"), transform)


def compare(session, transform: ImageTransform, spec: str, images: dict[str, bytes]) -> dict:
    """Exact transform vs one candidate on every image: changed images, top-1/top-5 agreement, worst differences."""
    fast, min_side = candidate_pipeline(spec, transform)
    input_name = session.get_inputs()[0].name
    top1 = top5 = changed = 0
    worst_p = worst_px = 0.0
    for data in images.values():
        exact_pixels = transform.pixels(open_image(data))
        fast_pixels = fast.pixels(open_image(data, min_shorter_side=min_side))
        pixel_diff = int(np.abs(exact_pixels.astype(np.int16) - fast_pixels.astype(np.int16)).max())
        changed += pixel_diff > 0
        worst_px = max(worst_px, pixel_diff)
        batch = np.stack([transform.normalize(exact_pixels), transform.normalize(fast_pixels)])
        logits = session.run(None, {input_name: batch})[0]
        probs = softmax(logits)
        a, b = np.argsort(-logits[0])[:5], np.argsort(-logits[1])[:5]
        top1 += a[0] == b[0]
        top5 += len(set(a) & set(b))
        worst_p = max(worst_p, float(np.abs(probs[0] - probs[1]).max()))
    n = len(images)
    return {
        "images": n,
        "images_changed": int(changed),
        "top1_agree": int(top1),
        "top1_agreement": round(top1 / n, 4),
        "top5_overlap": round(top5 / (5 * n), 4),
        "max_probability_difference": round(worst_p, 4),
        "max_pixel_difference": int(worst_px),
    }


def folded_difference(model: str, session, transform: ImageTransform, images: dict[str, bytes]) -> float:
    """Largest logit difference: ``<model>_uint8`` on the pixels vs the FP32 model on the Python-normalised tensor."""
    import onnxruntime as ort

    folded = ort.InferenceSession(
        str(HERE / "model_repository" / f"{model}_uint8" / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    input_name = session.get_inputs()[0].name
    worst = 0.0
    for data in images.values():
        pixels = transform.pixels(open_image(data))
        logits = session.run(None, {input_name: transform.normalize(pixels)[None]})[0]
        folded_logits = folded.run(None, {"PIXELS": pixels[None]})[0]
        worst = max(worst, float(np.abs(folded_logits - logits).max()))
    return worst


def main(argv=None) -> int:
    import onnxruntime as ort

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=int, default=12, help="random crops/rescales per source photo")
    parser.add_argument("--scale-max", type=float, default=1.5, help="largest rescale of a variant (default 1.5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--candidate", action="append", help="config parameters to compare, e.g. decode=reduced,reducing_gap=1.5"
    )
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--json", help="also write the per-model summary here")
    args = parser.parse_args(argv)
    candidates = args.candidate or ["decode=reduced"]
    rng = np.random.RandomState(args.seed)
    images = {}
    for name, data in source_photos().items():
        images.update(variants(name, data, args.variants, rng, args.scale_max))
    summary = {"sources": len(source_photos()), "images": len(images), "models": {}}
    for model in args.models:
        transform = MODELS[model]
        session = ort.InferenceSession(
            str(HERE / "model_repository" / model / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
        )
        folded = folded_difference(model, session, transform, images)
        summary["models"][model] = {"folded_uint8_max_logit_difference": folded, "candidates": {}}
        print(f"{model}: {len(images)} images; {model}_uint8 vs FP32 max |dlogit| {folded:.3g}")
        for spec in candidates:
            r = compare(session, transform, spec, images)
            summary["models"][model]["candidates"][spec] = r
            print(
                f"  {spec:34s} changed {r['images_changed']:3d}: top-1 agreement {r['top1_agree']}/{r['images']} "
                f"({r['top1_agreement']:.1%}), top-5 overlap {r['top5_overlap']:.1%}, "
                f"max |dp| {r['max_probability_difference']:.4f}, max |dpixel| {r['max_pixel_difference']}"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
