"""Write fixtures/ from the REFERENCE: the cn_clip torch model, cn_clip's own tokenize and transform.

    python deployments/cn_clip/make_fixtures.py [--checkpoint PATH]   # same weights as export.py

Never uses the deployment's code (no triton_helpers, no ONNX). Writes:
  fixtures/images/*        small test images (generated, deterministic)
  fixtures/reference.json  weights identity (harness.provenance), logit_scale, token ids per text, pre-processed
                           tensor checksums and samples per image, zero-shot probabilities
  fixtures/reference.npz   normalised image and text embeddings
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from cn_clip_model import DEFAULT_ARCH, DEFAULT_SEED, build_model, image_resolution, weights_identity  # noqa: E402

from harness import provenance  # noqa: E402

FIXTURES = HERE / "fixtures"
CONTEXT_LENGTH = 52
SAMPLES = 512  # sampled pre-processed values stored per image
REGENERATE = "python -m harness refresh cn_clip"
TOWERS = ("image_encoder", "text_encoder")

TEXTS = [
    "一只猫",
    "一只狗在草地上奔跑",
    "A photo of a DOG!",
    "皮卡丘 Pikachu 在 Tokyo 的街头",
    "生日快乐 🎂🎉 happy birthday 😀",
    "café naïve résumé Ångström",
    "  多个   空格\t和\n换行  ",
    "很长的中文句子，" * 30,  # longer than the context: truncated to 50 tokens
    "supercalifragilisticexpialidocious antidisestablishmentarianism " * 10,
    "",  # cn_clip gives [CLS][SEP]; the served model refuses it (no token)
]
ZERO_SHOT_LABELS = ["一只猫", "一只狗", "一辆红色的公交车", "蓝天白云", "一个人在踢足球", "夜晚的城市"]


def make_images() -> dict[str, bytes]:
    """Deterministic small images in the formats and modes clients send."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:240, 0:320]
    gradient = np.stack([x * 255 // 319, y * 255 // 239, (x + y) * 255 // 558], axis=-1).astype(np.uint8)
    scene = Image.fromarray(gradient)
    draw = ImageDraw.Draw(scene)
    draw.ellipse((40, 30, 160, 150), fill=(220, 30, 30))
    draw.rectangle((180, 100, 300, 220), fill=(20, 60, 200))
    noise = Image.fromarray(rng.integers(0, 256, (97, 131, 3), dtype=np.uint8))  # odd size, upsampled
    grey = Image.fromarray((gradient[..., 0] // 2 + gradient[..., 1] // 2).astype(np.uint8), mode="L")
    tall = scene.resize((150, 400), Image.BILINEAR)
    images = {}
    for name, image, fmt, kwargs in [
        ("scene.jpg", scene, "JPEG", {"quality": 90}),
        ("scene.png", scene, "PNG", {}),
        ("noise.png", noise, "PNG", {}),
        ("grey.png", grey, "PNG", {}),
        ("tall.webp", tall, "WEBP", {"quality": 85}),
    ]:
        buffer = __import__("io").BytesIO()
        image.save(buffer, fmt, **kwargs)
        images[name] = buffer.getvalue()
    return images


def tensor_summary(tensor: np.ndarray) -> dict:
    flat = tensor.astype(np.float64).reshape(-1)
    index = np.random.default_rng(1).choice(flat.size, SAMPLES, replace=False)
    index.sort()
    return {
        "shape": list(tensor.shape),
        "sha256": hashlib.sha256(np.ascontiguousarray(tensor, dtype=np.float32).tobytes()).hexdigest(),
        "sum": float(flat.sum()),
        "abs_sum": float(np.abs(flat).sum()),
        "sq_sum": float((flat**2).sum()),
        "sample_index": index.tolist(),
        "sample_values": [float(v) for v in flat[index]],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default=DEFAULT_ARCH)
    parser.add_argument("--checkpoint")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    args = parser.parse_args(argv)

    import cn_clip.clip as clip
    from cn_clip.clip.utils import image_transform

    model = build_model(args.arch, args.checkpoint, args.seed)
    identity = weights_identity(model, args.arch, args.checkpoint, args.seed)
    transform = image_transform(image_resolution(args.arch))
    (FIXTURES / "images").mkdir(parents=True, exist_ok=True)
    images = make_images()
    pixels = {}
    for name, data in images.items():
        (FIXTURES / "images" / name).write_bytes(data)
        pixels[name] = transform(Image.open(FIXTURES / "images" / name)).numpy()

    token_ids = clip.tokenize(TEXTS, context_length=CONTEXT_LENGTH)
    labels = clip.tokenize(ZERO_SHOT_LABELS, context_length=CONTEXT_LENGTH)
    with torch.no_grad():
        image_features = model.encode_image(torch.from_numpy(np.stack(list(pixels.values()))))
        image_features = image_features / image_features.norm(dim=-1, keepdim=True)
        text_features = model.encode_text(token_ids)
        text_features = text_features / text_features.norm(dim=-1, keepdim=True)
        label_features = model.encode_text(labels)
        label_features = label_features / label_features.norm(dim=-1, keepdim=True)
        logit_scale = model.logit_scale.exp()
        zero_shot = (logit_scale * image_features @ label_features.t()).softmax(dim=-1)

    reference = {
        "generator": "make_fixtures.py (cn_clip torch model, cn_clip.clip.tokenize, cn_clip image_transform)",
        "arch": args.arch,
        "checkpoint": Path(args.checkpoint).name if args.checkpoint else None,
        "seed": None if args.checkpoint else args.seed,
        provenance.FIXTURES_KEY: provenance.fixtures_record(dict.fromkeys(TOWERS, identity), REGENERATE),
        "logit_scale": float(logit_scale),
        "context_length": CONTEXT_LENGTH,
        "texts": [{"text": t, "token_ids": ids.tolist()} for t, ids in zip(TEXTS, token_ids)],
        "images": [{"file": f"images/{name}", "pixels": tensor_summary(pixels[name])} for name in images],
        "zero_shot": {
            "labels": ZERO_SHOT_LABELS,
            "probabilities": {name: [float(p) for p in row] for name, row in zip(images, zero_shot.numpy())},
        },
    }
    (FIXTURES / "reference.json").write_text(json.dumps(reference, ensure_ascii=False, indent=1) + "\n")
    np.savez_compressed(
        FIXTURES / "reference.npz",
        image_embeddings=image_features.numpy(),
        text_embeddings=text_features.numpy(),
    )
    size = sum(p.stat().st_size for p in FIXTURES.rglob("*") if p.is_file())
    print(f"wrote {FIXTURES.relative_to(HERE.parent.parent)} ({size / 1024:.0f} KiB), weights {identity.describe()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
