"""triton_helpers.images: the copy-free decode gives PIL's own pixels; the reduced JPEG decode
keeps the size the transform needs, only for large JPEGs, and only when asked (no server)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image, ImageOps

from triton_helpers.errors import InputError
from triton_helpers.images import open_checked, open_image


def _photo(width, height, mode="RGB", fmt="JPEG", orientation=None) -> bytes:
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack([(x * 255 // max(width - 1, 1)), (y * 255 // max(height - 1, 1)), (x + y) % 256], -1)
    image = Image.fromarray(rgb.astype(np.uint8)).convert(mode)
    buffer = io.BytesIO()
    kwargs = {}
    if orientation is not None:
        exif = Image.Exif()
        exif[0x0112] = orientation
        kwargs["exif"] = exif.tobytes()
    image.save(buffer, format=fmt, **kwargs)
    return buffer.getvalue()


def _pil_reference(data: bytes) -> np.ndarray:
    """What open_image returned before it avoided copies: load, exif_transpose, convert."""
    image = Image.open(io.BytesIO(data))
    image.load()
    return np.asarray(ImageOps.exif_transpose(image).convert("RGB"))


@pytest.mark.parametrize(
    "data",
    [
        _photo(320, 240),
        _photo(320, 240, "L"),
        _photo(320, 240, "CMYK"),
        _photo(300, 200, "RGBA", "PNG"),
        _photo(300, 200, "P", "PNG"),
        _photo(320, 240, orientation=6),
        _photo(320, 240, orientation=3),
        _photo(320, 240, orientation=1),
    ],
    ids=["rgb", "grey", "cmyk", "rgba-png", "palette-png", "exif-rot90", "exif-rot180", "exif-upright"],
)
def test_open_image_pixels_equal_pil_pipeline(data):
    got = np.asarray(open_image(data))
    np.testing.assert_array_equal(got, _pil_reference(data))
    assert got.ndim == 3 and got.shape[2] == 3


@pytest.mark.parametrize(
    "size,side,expected",
    [
        ((1080, 810), 256, (540, 405)),  # 1/2: 405 >= 256, 1/4 would give 203
        ((4000, 3000), 256, (500, 375)),  # 1/8
        ((2000, 1100), 256, (500, 275)),  # 1/4
        ((600, 400), 256, (600, 400)),  # shorter side < 2 x 256: decoded in full
    ],
)
def test_reduced_decode_keeps_the_shorter_side_needed(size, side, expected):
    image = open_image(_photo(*size), min_shorter_side=side)
    assert image.size == expected and min(image.size) >= min(side, min(size))


def test_reduced_decode_applies_exif_and_leaves_other_formats_alone():
    rotated = open_image(_photo(1200, 800, orientation=6), min_shorter_side=256)
    assert rotated.size == (400, 600)  # decoded at 1/2 (600x400), then turned upright
    png = _photo(1200, 800, fmt="PNG")
    assert open_image(png, min_shorter_side=256).size == (1200, 800)
    np.testing.assert_array_equal(np.asarray(open_image(png, min_shorter_side=256)), _pil_reference(png))


def test_open_checked_reads_the_header_only_and_names_the_limit():
    """The check a model that decodes with another library (OpenCV) runs first: nothing decoded."""
    header = open_checked(_photo(1200, 800), max_pixels=1_000_000)
    assert header.size == (1200, 800) and header.format == "JPEG"
    with pytest.raises(InputError, match=r"over the limit of 900000 \(max_pixels\)"):
        open_checked(_photo(1200, 800), max_pixels=900_000)
    with pytest.raises(InputError, match=r"over the limit of 100 \(max_bytes\)"):
        open_checked(_photo(64, 64), max_bytes=100)
    with pytest.raises(InputError, match="not a known image format"):
        open_checked(b"plain text, not an image")
