"""``cn_clip.clip.image_transform`` in numpy, without torch: bicubic resize to a square,
``ToTensor`` (/255) and CLIP's mean/std, float32 CHW. The preprocess_image model imports this
file from its version folder; checks and benchmarks load it by path."""

from __future__ import annotations

import numpy as np

from triton_helpers.images import open_image

IMAGE_SIZE = 224
MEAN = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32)
STD = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32)


def transform_image(image, image_size: int = IMAGE_SIZE) -> np.ndarray:
    """cn_clip's ``image_transform(image_size)`` on a PIL image: float32 ``[3, size, size]``."""
    from PIL import Image

    resized = image.resize((image_size, image_size), Image.BICUBIC)
    if resized.mode != "RGB":
        resized = resized.convert("RGB")
    pixels = np.asarray(resized, dtype=np.uint8).astype(np.float32) / np.float32(255)
    pixels = (pixels - MEAN) / STD
    return np.ascontiguousarray(pixels.transpose(2, 0, 1))


def preprocess_image(data: bytes, image_size: int = IMAGE_SIZE, **limits) -> np.ndarray:
    """Encoded image bytes -> the tensor ``cn_clip.clip.image_transform`` gives for it.

    Decoded by ``open_image`` (size limits before any pixel is decoded) without EXIF rotation
    (cn_clip's reference does not rotate). Exact for RGB and greyscale sources; palette/RGBA
    images are converted to RGB before the resize here, while cn_clip resizes them in their own
    mode (see the deployment README).
    """
    return transform_image(open_image(data, exif_transpose=False, **limits), image_size)
