"""``images.resize_then_crop`` (resample only what a crop keeps) gives exactly the pixels of the plain
resize then crop, the reference path of torchvision's ``Resize`` + ``CenterCrop``, on real photos
cut to shapes that take both of Pillow's pass orders, downscales and upscales (no server)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from triton_helpers import images
from triton_helpers.classification import ImageTransform, center_crop_box, shorter_side_size
from triton_helpers.images import open_image, resize_then_crop

ROOT = Path(__file__).resolve().parents[2]
PHOTOS = [ROOT / "deployments" / "yolo11_ensemble" / "fixtures" / "images" / name for name in ("bus.jpg", "wide.jpg")]
PHOTOS += sorted((ROOT / "deployments" / "resnet_npu" / "fixtures" / "images").iterdir())
R = Image.Resampling
#: (left, top, width, height) of the photo as fractions, then a scale: portrait, tall (over 2:1, the
#: vertical pass first in Pillow 13), landscape, near-square, and upscaled from under 256 px.
SHAPES = [
    (0, 0, 1, 1, 1.0),
    (0.3, 0, 0.35, 1, 1.0),
    (0, 0.2, 1, 0.5, 1.0),
    (0.1, 0.1, 0.8, 0.8, 0.9),
    (0, 0, 1, 1, 0.3),
]


def _variants() -> list[tuple[str, Image.Image]]:
    out = []
    for path in PHOTOS:
        photo = open_image(path.read_bytes())
        width, height = photo.size
        for index, (left, top, w, h, scale) in enumerate(SHAPES):
            box = (int(left * width), int(top * height), int((left + w) * width), int((top + h) * height))
            cut = photo.crop(box)
            if scale != 1.0:
                cut = cut.resize((max(int(cut.width * scale), 8), max(int(cut.height * scale), 8)), R.BICUBIC)
            out.append((f"{path.name}#{index}", cut))
    return out


VARIANTS = _variants()


def _plain(image: Image.Image, resize: int, crop: int, resample) -> tuple[np.ndarray, tuple, tuple]:
    size = shorter_side_size(*image.size, resize)
    box = center_crop_box(size, crop)
    return np.asarray(image.resize(size, resample).crop(box)), size, box


@pytest.mark.parametrize("resample", [R.BILINEAR, R.BICUBIC, R.LANCZOS], ids=["bilinear", "bicubic", "lanczos"])
@pytest.mark.parametrize("resize,crop", [(256, 224), (232, 224), (320, 288)])
def test_same_pixels_as_resize_then_crop(resize, crop, resample):
    compared = 0
    for name, image in VARIANTS:
        for mode in ("RGB", "L"):
            source = image.convert(mode)
            if min(shorter_side_size(*source.size, resize)) < crop:
                continue
            plain, size, box = _plain(source, resize, crop, resample)
            np.testing.assert_array_equal(
                np.asarray(resize_then_crop(source, size, box, resample)), plain, err_msg=f"{name} {mode}"
            )
            compared += 1
    assert compared >= 2 * len(VARIANTS) - 4


def test_variants_take_both_pass_orders_and_both_directions():
    cases = set()
    for _, image in VARIANTS:
        size = shorter_side_size(*image.size, 256)
        cases.add(("vertical first" if images._vertical_first(image.size, size) else "horizontal first", size[0] > 256))
        cases.add(("up" if min(image.size) < 256 else "down", image.width > image.height))
    wanted = {("horizontal first", False), ("horizontal first", True), ("up", True), ("down", False), ("down", True)}
    if images._PILLOW_MAJOR >= 13:
        wanted.add(("vertical first", False))
    assert wanted <= cases, sorted(cases)


def test_torchvision_transform_pixels_equal_the_reference_path():
    transform = ImageTransform.torchvision_imagenet()
    for name, image in VARIANTS:
        plain, _, _ = _plain(image, 256, 224, R.BILINEAR)
        np.testing.assert_array_equal(transform.pixels(image), plain, err_msg=name)


def test_other_modes_and_nearest_take_the_plain_path():
    image = VARIANTS[0][1]
    size = shorter_side_size(*image.size, 256)
    box = center_crop_box(size, 224)
    for source, resample in ((image.convert("RGBA"), R.BILINEAR), (image, R.NEAREST), (image.convert("I"), R.BILINEAR)):
        expected = np.asarray(source.resize(size, resample).crop(box))
        np.testing.assert_array_equal(np.asarray(resize_then_crop(source, size, box, resample)), expected)
