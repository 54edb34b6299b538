"""Write the expected outputs of this deployment from the REFERENCE: torch + torchvision.

    python export.py && python make_fixtures.py

For each classifier and each image in fixtures/images/ (plus ultralytics' bus.jpg), the
reference is the torch model on the exact weights export.py exported (``.exported/<model>.pt``)
fed by the reference transform built from torchvision's own transforms (not by
triton_helpers, the code under test):

- resnet50: ``Resize(256)``, ``CenterCrop(224)``, ``ToTensor``, ``Normalize(ImageNet)``.
- efficientnet_lite0: TensorFlow's EfficientNet eval crop (centre square of 224/256 of the
  shorter side), ``Resize((224, 224), BICUBIC)``, ``Normalize(127/255, 128/255)``.

A classifier export.py ``--onnx`` brought in (``.exported/<model>.json``): the reference is its
ONNX file run by onnxruntime, fed by ``Resize(resize)``, ``CenterCrop(size)``, ``ToTensor``,
``Normalize(mean, std)``, labelled from its labels file. Only the models whose folder is in
model_repository/ are run.

Writes fixtures/expected.json (the weights' identity under ``"weights"`` for every served model
made from them, harness.provenance; top-5 ids / labels / probabilities per image)
and fixtures/logits.npz (the full logits, key ``<model>/<image>``). The synthetic test images
are generated here once (deterministic) and committed.
"""

from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path

import numpy as np

from harness import provenance

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
IMAGES = FIXTURES / "images"
REGENERATE = "python -m harness refresh resnet_npu"
MODELS = ("resnet50", "efficientnet_lite0")
BUS = "bus.jpg"


def ultralytics_asset(name: str) -> Path:
    """An image shipped in the ultralytics package (found without importing it)."""
    spec = importlib.util.find_spec("ultralytics")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("ultralytics is not installed: its assets/bus.jpg is a fixture image")
    return Path(list(spec.submodule_search_locations)[0]) / "assets" / name


def image_paths() -> dict[str, Path]:
    """Fixture image name -> path (committed synthetic images + ultralytics' bus.jpg)."""
    paths = {p.name: p for p in sorted(IMAGES.iterdir()) if p.suffix in (".jpg", ".png")}
    paths[BUS] = ultralytics_asset(BUS)
    return paths


def make_images() -> None:
    """Small synthetic images covering the transform's corner cases (sizes, modes, formats)."""
    from PIL import Image, ImageDraw

    IMAGES.mkdir(parents=True, exist_ok=True)
    rng = np.random.RandomState(1234)

    def scene(width, height, noise=20):
        y, x = np.mgrid[0:height, 0:width]
        rgb = np.stack(
            [x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1), (x + y) * 255 // max(width + height - 2, 1)],
            axis=-1,
        ).astype(np.uint8)
        rgb = np.clip(rgb.astype(int) + rng.randint(-noise, noise + 1, rgb.shape), 0, 255).astype(np.uint8)
        image = Image.fromarray(rgb)
        draw = ImageDraw.Draw(image)
        for _ in range(6):
            x0, y0 = rng.randint(0, width - 10), rng.randint(0, height - 10)
            box = (x0, y0, x0 + rng.randint(8, width // 2), y0 + rng.randint(8, height // 2))
            colour = tuple(int(v) for v in rng.randint(0, 255, 3))
            (draw.ellipse if rng.rand() < 0.5 else draw.rectangle)(box, fill=colour)
        return image

    scene(320, 240).save(IMAGES / "landscape_320x240.jpg", quality=90)  # wide, odd crop offsets
    scene(199, 401, noise=0).save(IMAGES / "portrait_199x401.png")  # tall, PNG
    scene(96, 80).convert("L").save(IMAGES / "gray_96x80.jpg", quality=90)  # upscaled, grayscale
    rgba = scene(300, 300, noise=0).convert("RGBA")
    rgba.putalpha(Image.fromarray(np.full((300, 300), 128, np.uint8)))
    rgba.save(IMAGES / "rgba_300x300.png")  # alpha dropped by convert


def reference_transform(name: str):
    """The reference preprocessing, from torchvision transforms (PIL RGB in, tensor out)."""
    from PIL import Image
    from torchvision import transforms as T

    if name == "resnet50":
        return T.Compose(
            [T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]
        )

    def tf_center_crop(image: Image.Image) -> Image.Image:
        width, height = image.size
        side = int(224 / (224 + 32) * min(width, height))
        top, left = (height - side + 1) // 2, (width - side + 1) // 2
        return image.crop((left, top, left + side, top + side))

    return T.Compose(
        [
            T.Lambda(tf_center_crop),
            T.Resize((224, 224), interpolation=T.InterpolationMode.BICUBIC),
            T.ToTensor(),
            T.Normalize([127 / 255] * 3, [128 / 255] * 3),
        ]
    )


def imported_reference(spec: dict):
    """(logits of one PIL image, weights identity, class names) of an ``--onnx`` classifier: its own
    ONNX file in onnxruntime behind the torchvision transforms of its size, mean and std."""
    from torchvision import transforms as T

    from harness.measuring.engines import cpu_session
    from harness.provenance import file_identity

    transform = T.Compose(
        [T.Resize(spec["resize"]), T.CenterCrop(spec["size"]), T.ToTensor(), T.Normalize(spec["mean"], spec["std"])]
    )
    session = cpu_session(spec["onnx"], threads=2)
    input_name = session.get_inputs()[0].name

    def logits(image):
        return session.run(None, {input_name: transform(image)[None].numpy()})[0][0]

    names = [line.strip() for line in Path(spec["labels"]).read_text(encoding="utf-8").splitlines() if line.strip()]
    return logits, file_identity(spec["onnx"], f"onnx:{Path(spec['onnx']).name}"), names


def main() -> int:
    import torch
    from export import REPO, folded_name, imported_onnx, load_exported
    from PIL import Image

    if not IMAGES.exists() or not any(IMAGES.iterdir()):
        make_images()
    from torchvision.models._meta import _IMAGENET_CATEGORIES

    imagenet = list(_IMAGENET_CATEGORIES)  # torchvision's ImageNet-1k order
    paths = image_paths()
    expected = {
        "generated_by": "make_fixtures.py (torch + torchvision reference)",
        "match_rule": "top-5 class ids identical; probabilities within 1e-3",
        "models": {},
    }
    logits_out, identities = {}, {}
    torch.set_num_threads(2)
    for model_name in [name for name in MODELS if (REPO / name).is_dir()]:
        spec = imported_onnx(model_name)
        if spec is None:
            model, identity = load_exported(model_name)
            transform, names = reference_transform(model_name), imagenet

            def run(image, model=model, transform=transform):
                with torch.no_grad():
                    return model(transform(image)[None])[0]

        else:
            onnx_logits, identity, names = imported_reference(spec)

            def run(image, onnx_logits=onnx_logits):
                return torch.from_numpy(onnx_logits(image))

        identities[model_name] = identities[folded_name(model_name)] = identity
        entry = {"images": {}}
        for image_name, path in paths.items():
            image = Image.open(io.BytesIO(path.read_bytes())).convert("RGB")
            logits = run(image)
            probs = torch.softmax(logits, dim=0)
            top = torch.topk(logits, min(5, len(logits)))
            ids = [int(i) for i in top.indices]
            entry["images"][image_name] = {
                "top5_ids": ids,
                "top5_labels": [names[i] for i in ids],
                "top5_probabilities": [round(float(probs[i]), 6) for i in ids],
            }
            logits_out[f"{model_name}/{image_name}"] = logits.numpy().astype(np.float32)
            print(f"{model_name:18s} {image_name:22s} {names[ids[0]]} ({float(probs[ids[0]]):.3f})")
        expected["models"][model_name] = entry
    expected[provenance.FIXTURES_KEY] = provenance.fixtures_record(identities, REGENERATE)
    FIXTURES.mkdir(exist_ok=True)
    (FIXTURES / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    np.savez_compressed(FIXTURES / "logits.npz", **logits_out)
    print(f"wrote {FIXTURES / 'expected.json'} and {FIXTURES / 'logits.npz'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
