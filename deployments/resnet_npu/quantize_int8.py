"""INT8 for OpenVINO: NNCF post-training quantization of a served classifier, gated by top-1 agreement.

    python export.py --openvino-int8            # efficientnet_lite0 (default)
    python quantize_int8.py [--model efficientnet_lite0] [--samples 300] [--json out.json]

Reads ``model_repository/<model>/1/model.onnx`` with OpenVINO, quantizes it with
``nncf.quantize`` (8-bit weights and activations, the MIXED preset, fixed seed) and writes
``model_repository/<model>/1/model_int8.xml`` (+ ``.bin``) beside the FP32 file, for a config
variant with ``backend = "openvino"`` and ``default_model_filename = "model_int8.xml"``. None is
declared: EfficientNet-Lite0 misses the gate (docs/tuning.md, the OpenVINO section).

Calibration: random crops, rescales and flips (fixed seed) of scikit-learn's china.jpg and
flower.jpg only. The gate never sees them: the fixtures (fixtures/images + bus.jpg, what the
checks use) and the other photos installed with the packages (agreement.py: grace_hopper.jpg,
zidane.jpg, bus.jpg and four made from them) with crops of each. Gate: on every one of them, the
INT8 model's top-1 class equals the FP32 reference's (onnxruntime on model.onnx, FP32), on all
fixtures and on at least ``--min-unseen`` of the unseen images; the file is written only then.
Both are run at FP32 activations otherwise (``INFERENCE_PRECISION_HINT`` f32), so the gate measures
the quantization alone.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

import numpy as np

from harness.deployments import load_module

HERE = Path(__file__).resolve().parent
REPO = HERE / "model_repository"
CALIBRATION_PHOTOS = ("sklearn/china.jpg", "sklearn/flower.jpg")
SEED = 0


def _sibling(name: str):
    """Import a file of this folder under a unique module name (no sys.path changes)."""
    return load_module(HERE / f"{name}.py", f"resnet_npu_{name}")


def image_sets(variants_per_photo: int) -> tuple[dict[str, bytes], dict[str, bytes], dict[str, bytes]]:
    """(calibration photos, fixture images, unseen photos): the three never share a source photo."""
    agreement, fixtures = _sibling("agreement"), _sibling("make_fixtures")
    photos = agreement.source_photos()
    rng = np.random.RandomState(SEED)
    calibration, unseen = {}, {}
    for name, data in photos.items():
        target = calibration if name in CALIBRATION_PHOTOS else unseen
        target.update(agreement.variants(name, data, variants_per_photo, rng))
    missing = [p for p in CALIBRATION_PHOTOS if p not in photos]
    if missing:
        raise SystemExit(f"calibration photos not installed: {missing} (scikit-learn ships them)")
    checked = {name: path.read_bytes() for name, path in fixtures.image_paths().items()}
    unseen = {k: v for k, v in unseen.items() if k.split("#")[0].rsplit("/", 1)[-1] not in checked}
    return calibration, checked, unseen


def calibration_tensors(photos: dict[str, bytes], transform, samples: int) -> list[np.ndarray]:
    """``samples`` (1, 3, 224, 224) tensors: each photo cropped, rescaled and flipped at random."""
    from PIL import Image

    from triton_helpers.images import open_image

    rng = np.random.RandomState(SEED + 1)
    images = [open_image(data) for data in photos.values()]
    out = []
    for index in range(samples):
        image = images[index % len(images)]
        width, height = image.size
        cw, ch = int(width * rng.uniform(0.3, 1.0)), int(height * rng.uniform(0.3, 1.0))
        left, top = rng.randint(0, width - cw + 1), rng.randint(0, height - ch + 1)
        crop = image.crop((left, top, left + cw, top + ch))
        if rng.rand() < 0.5:
            crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
        buffer = io.BytesIO()
        crop.save(buffer, format="JPEG", quality=90)
        out.append(transform(open_image(buffer.getvalue()))[None])
    return out


def top1(run, transform, images: dict[str, bytes]) -> dict[str, int]:
    from triton_helpers.images import open_image

    return {name: int(np.argmax(run(transform(open_image(data))[None]))) for name, data in images.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="efficientnet_lite0", choices=["efficientnet_lite0", "resnet50"])
    parser.add_argument("--samples", type=int, default=300, help="calibration tensors")
    parser.add_argument("--variants", type=int, default=12, help="random crops per unseen photo")
    parser.add_argument("--min-unseen", type=float, default=0.95, help="top-1 agreement required on unseen photos")
    parser.add_argument("--json", help="write the gate's numbers here")
    args = parser.parse_args(argv)

    import nncf
    import onnxruntime as ort
    import openvino as ov
    from resnet_npu_processing.classification import ImageTransform

    transform = (
        ImageTransform.efficientnet_lite()
        if args.model == "efficientnet_lite0"
        else (ImageTransform.torchvision_imagenet())
    )
    source = REPO / args.model / "1" / "model.onnx"
    calibration, checked, unseen = image_sets(args.variants)
    core = ov.Core()
    model = core.read_model(str(source))
    dataset = nncf.Dataset(calibration_tensors(calibration, transform, args.samples))
    quantized = nncf.quantize(model, dataset, subset_size=args.samples, preset=nncf.QuantizationPreset.MIXED)

    session = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"])
    reference = lambda x: session.run(None, {session.get_inputs()[0].name: x})[0]
    compiled = core.compile_model(quantized, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    int8 = lambda x: compiled(x)[0]
    result = {"model": args.model, "calibration_samples": args.samples, "calibration_photos": list(CALIBRATION_PHOTOS)}
    for label, images in (("fixtures", checked), ("unseen", unseen)):
        want, got = top1(reference, transform, images), top1(int8, transform, images)
        agree = [n for n in images if want[n] == got[n]]
        result[label] = {
            "images": len(images),
            "top1_agreement": round(len(agree) / len(images), 4),
            "disagree": sorted(set(images) - set(agree)),
        }
    passed = result["fixtures"]["top1_agreement"] == 1.0 and result["unseen"]["top1_agreement"] >= args.min_unseen
    result["gate"] = "passed" if passed else "failed"
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    if not passed:
        print(f"{args.model}: INT8 misses the gate; model_int8.xml not written", file=sys.stderr)
        return 1
    target = source.with_name("model_int8.xml")
    ov.save_model(quantized, str(target), compress_to_fp16=False)
    print(f"{args.model}: wrote {target.relative_to(HERE)} (+ .bin)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
