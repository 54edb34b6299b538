"""The classification math both preprocess models, the postprocess model, the checks and export.py share.

``ImageTransform`` reproduces, without torch, the two eval transforms of the classifiers
served here:

- ``resize_crop`` (torchvision's ImageNet eval transform, as used for ResNet):
  ``Resize(256)`` on the PIL image (shorter side to 256, the longer one truncated as
  torchvision does; PIL resampling, which antialiases), ``CenterCrop(224)`` (offsets rounded
  as torchvision does), ``ToTensor`` (``/255`` in float32), ``Normalize(mean, std)``.
- ``crop_resize`` (the TensorFlow EfficientNet eval transform, as used for EfficientNet-Lite):
  a centred square crop of ``crop / (crop + 32)`` of the shorter side, resized to
  ``crop x crop``, normalised with mean 127 / std 128 (on the 0..255 scale).

Both produce float32 ``(3, crop, crop)`` arrays, channel-first RGB, bit-identical to the
torchvision pipeline on the same PIL image; ``ImageTransform.pixels`` stops before the
normalisation (``uint8`` channel-last), for graphs that normalise themselves. ``top_k`` turns
logits into class ids and softmax probabilities.

``reducing_gap`` (off by default) is Pillow's fast path for a large downscale: an integer box
reduction (``Image.reduce``) first, then the filter over the last ``>= reducing_gap`` times. It
changes pixels (agreement measured by agreement.py, docs/tuning.md).

numpy + PIL only, no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from PIL import Image

from triton_helpers.errors import InputError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# EfficientNet-Lite (TensorFlow official): MEAN_RGB = 127.0, STDDEV_RGB = 128.0 on 0..255.
EFFICIENTNET_LITE_MEAN = (127.0 / 255.0,) * 3
EFFICIENTNET_LITE_STD = (128.0 / 255.0,) * 3
TF_CROP_PADDING = 32

_INTERPOLATIONS = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
}
MODES = ("resize_crop", "crop_resize")


@dataclass(frozen=True)
class ImageTransform:
    """An eval transform: PIL RGB image in, float32 ``(3, crop, crop)`` array out."""

    mode: str = "resize_crop"
    resize: int = 256
    crop: int = 224
    interpolation: str = "bilinear"
    mean: tuple = IMAGENET_MEAN
    std: tuple = IMAGENET_STD
    reducing_gap: float | None = None

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"transform mode must be one of {MODES}, got {self.mode!r}")
        if self.interpolation not in _INTERPOLATIONS:
            raise ValueError(f"interpolation must be one of {sorted(_INTERPOLATIONS)}, got {self.interpolation!r}")
        if len(self.mean) != 3 or len(self.std) != 3:
            raise ValueError("mean and std need 3 values (R, G, B)")
        if self.crop <= 0 or (self.mode == "resize_crop" and self.resize < self.crop):
            raise ValueError(f"bad sizes: resize={self.resize} crop={self.crop}")
        if self.reducing_gap is not None and not self.reducing_gap >= 1.0:
            raise ValueError(f"reducing_gap must be a number >= 1.0 (Pillow's rule), got {self.reducing_gap!r}")

    @classmethod
    def torchvision_imagenet(cls, resize: int = 256, crop: int = 224) -> ImageTransform:
        """torchvision's ImageNet eval transform (ResNet & co.)."""
        return cls("resize_crop", resize, crop, "bilinear", IMAGENET_MEAN, IMAGENET_STD)

    @classmethod
    def efficientnet_lite(cls, crop: int = 224) -> ImageTransform:
        """The TensorFlow EfficientNet-Lite eval transform (centre crop then bicubic resize)."""
        return cls(
            "crop_resize", crop + TF_CROP_PADDING, crop, "bicubic", EFFICIENTNET_LITE_MEAN, EFFICIENTNET_LITE_STD
        )

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, str]) -> ImageTransform:
        """Build from string key/values (a Triton config's ``parameters``).

        Keys: ``mode``, ``resize``, ``crop``, ``interpolation``, ``mean``, ``std`` (comma
        separated floats), ``reducing_gap`` (a float >= 1, or ``none``/empty: the exact resize);
        any missing key keeps the torchvision ImageNet default.
        """

        def floats(text: str) -> tuple:
            return tuple(float(v) for v in text.split(","))

        kwargs = {}
        if "mode" in parameters:
            kwargs["mode"] = parameters["mode"].strip()
        for key in ("resize", "crop"):
            if key in parameters:
                kwargs[key] = int(parameters[key])
        if "interpolation" in parameters:
            kwargs["interpolation"] = parameters["interpolation"].strip().lower()
        for key in ("mean", "std"):
            if key in parameters:
                kwargs[key] = floats(parameters[key])
        gap = parameters.get("reducing_gap", "").strip().lower()
        if gap not in ("", "none"):
            try:
                kwargs["reducing_gap"] = float(gap)
            except ValueError:
                raise ValueError(f"reducing_gap must be a number >= 1.0 or 'none', got {gap!r}") from None
        return cls(**kwargs)

    # -- steps ---------------------------------------------------------------------------
    def resize_crop_pil(self, image: Image.Image) -> Image.Image:
        """The geometric part: the PIL image that ``ToTensor`` would see."""
        resample = _INTERPOLATIONS[self.interpolation]
        width, height = image.size
        if self.mode == "resize_crop":
            image = image.resize(
                shorter_side_size(width, height, self.resize), resample, reducing_gap=self.reducing_gap
            )
            return center_crop(image, self.crop)
        side = int(self.crop / (self.crop + TF_CROP_PADDING) * min(width, height))
        side = max(side, 1)
        top = (height - side + 1) // 2
        left = (width - side + 1) // 2
        image = image.crop((left, top, left + side, top + side))
        return image.resize((self.crop, self.crop), resample, reducing_gap=self.reducing_gap)

    def min_source_side(self) -> int:
        """The shorter side the geometric step resamples from at the least (a reduced decode keeps it)."""
        if self.mode == "resize_crop":
            return self.resize
        return self.crop + TF_CROP_PADDING

    def normalize(self, rgb: np.ndarray) -> np.ndarray:
        """``(H, W, 3)`` uint8 -> ``(3, H, W)`` float32, as ``ToTensor`` + ``Normalize``."""
        chw = np.ascontiguousarray(rgb.transpose(2, 0, 1)).astype(np.float32) / np.float32(255)
        mean = np.asarray(self.mean, dtype=np.float32).reshape(3, 1, 1)
        std = np.asarray(self.std, dtype=np.float32).reshape(3, 1, 1)
        return (chw - mean) / std

    def pixels(self, image: Image.Image) -> np.ndarray:
        """The geometric step as ``(crop, crop, 3)`` RGB ``uint8``: what a graph that normalises itself takes."""
        if image.mode != "RGB":
            image = image.convert("RGB")
        return np.asarray(self.resize_crop_pil(image))

    def __call__(self, image: Image.Image) -> np.ndarray:
        return self.normalize(self.pixels(image))


def shorter_side_size(width: int, height: int, size: int) -> tuple[int, int]:
    """``(width, height)`` after torchvision ``Resize(size)``: shorter side = size, longer truncated."""
    short, long = (width, height) if width <= height else (height, width)
    if short == size:
        return width, height
    new_short, new_long = size, int(size * long / short)
    return (new_short, new_long) if width <= height else (new_long, new_short)


def center_crop(image: Image.Image, size: int) -> Image.Image:
    """torchvision ``CenterCrop(size)`` on a PIL image at least ``size`` on each side."""
    width, height = image.size
    if width < size or height < size:
        raise ValueError(f"image {width}x{height} is smaller than the crop {size}")
    top = int(round((height - size) / 2.0))
    left = int(round((width - size) / 2.0))
    return image.crop((left, top, left + size, top + size))


# -- postprocessing ----------------------------------------------------------------------
def softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis in float32 (stable: max subtracted)."""
    x = np.asarray(logits, dtype=np.float32)
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def top_k(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(class_ids, probabilities)`` of the ``k`` best classes of a 1-D logits vector.

    Ties keep the lower class id first (stable sort), as ``torch.topk`` does in practice.
    """
    logits = np.asarray(logits, dtype=np.float32).reshape(-1)
    if not 1 <= k <= logits.size:
        raise InputError(f"top_k must be between 1 and {logits.size}, got {k}")
    probs = softmax(logits)
    ids = np.argsort(-logits, kind="stable")[:k]
    return ids.astype(np.int64), probs[ids]


# -- decoding ------------------------------------------------------------------------
DECODE_MODES = ("full", "reduced")


def decode_min_side(mode: str | None, transform: ImageTransform) -> int | None:
    """``open_image``'s ``min_shorter_side`` for a config's ``decode`` parameter.

    ``full`` (default): every pixel decoded, equal to the reference pipeline. ``reduced``:
    JPEGs at least twice the size the transform resamples from are decoded at 1/2, 1/4 or 1/8
    scale (libjpeg-turbo DCT scaling), never below ``transform.min_source_side()``.
    """
    mode = (mode or "full").strip().lower()
    if mode not in DECODE_MODES:
        raise ValueError(f"decode must be one of {DECODE_MODES}, got {mode!r}")
    return transform.min_source_side() if mode == "reduced" else None
