"""Image decoding for Python-backend pre-processing: bytes in, RGB uint8 array out.

Limits are checked before any pixel is decoded, so a decompression bomb (a 40000x40000 PNG
that is small on disk) is refused from its header alone.

``min_shorter_side`` turns on libjpeg-turbo's DCT scaling for JPEGs (PIL's ``draft``): the
image is decoded at 1/2, 1/4 or 1/8 of its size, the largest reduction that keeps its shorter
side at least ``min_shorter_side``. It changes pixels (a box-filtered DCT reduction instead of
the full image), so it is a config choice whose agreement is measured (docs/tuning.md).

``resize_then_crop`` is ``image.resize(size).crop(box)`` with the same pixels, resampling only the
source lines and output samples the crop needs (see its docstring for when it can).
"""

from __future__ import annotations

import io
import math
import struct
from fractions import Fraction

import numpy as np
import PIL
from PIL import Image, ImageOps, UnidentifiedImageError

from triton_helpers.errors import InputError

DEFAULT_MAX_PIXELS = 40_000_000
DEFAULT_MAX_BYTES = 32 * 1024 * 1024
EXIF_ORIENTATION = 0x0112


def open_image(
    data: bytes,
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    max_bytes: int = DEFAULT_MAX_BYTES,
    exif_transpose: bool = True,
    min_shorter_side: int | None = None,
) -> Image.Image:
    """Open encoded image bytes with PIL, checked against size limits; RGB, EXIF applied.

    No pixel copy beyond the decode: EXIF transposition only when the orientation tag asks
    for one, conversion only when the image is not RGB already.
    """
    if not data:
        raise InputError("image is empty (0 bytes)")
    if len(data) > max_bytes:
        raise InputError(f"image is {len(data)} bytes, over the limit of {max_bytes}")
    try:
        image = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        raise InputError(f"cannot decode image: not a known image format (first bytes {data[:8]!r})") from None
    except Image.DecompressionBombError as exc:
        raise InputError(f"image is over the limit of {max_pixels} pixels ({exc})") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise InputError(f"cannot read image header: {exc}") from None
    width, height = image.size
    if width <= 0 or height <= 0:
        raise InputError(f"image has an empty size {width}x{height}")
    if width * height > max_pixels:
        raise InputError(f"image is {width}x{height} = {width * height} pixels, over the limit of {max_pixels}")
    if min_shorter_side and image.format == "JPEG" and min(width, height) >= 2 * min_shorter_side:
        image.draft(image.mode, (min_shorter_side, min_shorter_side))
    try:
        image.load()
        if exif_transpose and image.getexif().get(EXIF_ORIENTATION, 1) != 1:
            image = ImageOps.exif_transpose(image)
        return image if image.mode == "RGB" else image.convert("RGB")
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise InputError(f"cannot decode {image.format or 'image'}: {exc}") from None


def decode_rgb(data: bytes, **limits) -> np.ndarray:
    """Decode to an RGB ``uint8`` array of shape ``(height, width, 3)``."""
    return np.asarray(open_image(data, **limits))


#: Filter half-widths of Pillow's convolution resampling (``Resample.c``), scaled by the downscale factor.
_FILTER_SUPPORT = {
    Image.Resampling.BOX: 0.5,
    Image.Resampling.BILINEAR: 1.0,
    Image.Resampling.HAMMING: 1.0,
    Image.Resampling.BICUBIC: 2.0,
    Image.Resampling.LANCZOS: 3.0,
}
#: Pillow versions whose two-pass order ``_vertical_first`` reproduces (checked on real photos by the tests).
_PASS_ORDER_CHECKED = {12: "horizontal first", 13: "vertical first when the height shrinks > 2x the width"}
_PILLOW_MAJOR = int(PIL.__version__.split(".")[0])
#: Pillow-SIMD (versions ``x.y.z.postN``) picks its fixed-point precision from a pass's own weights,
#: so a pass over fewer outputs can round differently: it always takes the plain path.
_PILLOW_SIMD = ".post" in PIL.__version__


def _vertical_first(size: tuple[int, int], new: tuple[int, int]) -> bool:
    """Which pass Pillow's two-pass resize runs first (13: python-pillow/Pillow#9549; before: horizontal)."""
    shrink_y, shrink_x = size[1] - new[1], size[0] - new[0]
    return _PILLOW_MAJOR >= 13 and shrink_y > 0 and shrink_y > shrink_x * 2


def _float32_exact(value: Fraction) -> bool:
    return Fraction(struct.unpack("f", struct.pack("f", float(value)))[0]) == value


def _resize_axis(image: Image.Image, axis: int, size: int, resample, start: float = 0.0, end: float | None = None):
    """One pass of Pillow's resize along ``axis`` (0: x, 1: y) from the source span ``[start, end)``."""
    width, height = image.size
    if axis == 0:
        return image.resize((size, height), resample, box=(start, 0, width if end is None else end, height))
    return image.resize((width, size), resample, box=(0, start, width, height if end is None else end))


def _with_axis(box: list, axis: int, low, high) -> tuple:
    box = list(box)
    box[axis], box[axis + 2] = low, high
    return tuple(box)


def resize_then_crop(image: Image.Image, size: tuple[int, int], box: tuple[int, int, int, int], resample):
    """``image.resize(size, resample).crop(box)``, pixel for pixel, without resampling what the crop drops.

    Pillow resizes in two one-axis passes. Each pass is run here alone, in Pillow's order, on
    only the source lines whose outputs survive the crop. Along an axis whose scale
    ``source / size`` is a dyadic fraction (e.g. ``810 / 256``) the pass is asked for the cropped
    samples only, through Pillow's ``box`` argument: its coordinates are then exact in Pillow's
    float32 box and every filter tap and weight equals the full resize's. Along any other axis
    the pass resamples the full axis and the crop follows. Falls back to the plain resize + crop
    for modes other than RGB / L, nearest-neighbour resampling, an axis left unchanged, Pillow-SIMD
    and a Pillow whose pass order was not checked (``_PASS_ORDER_CHECKED``).
    """
    width, height = image.size
    dims, new = (width, height), tuple(size)
    offsets, crop = (box[0], box[1]), (box[2] - box[0], box[3] - box[1])
    if (
        image.mode not in ("RGB", "L")
        or resample not in _FILTER_SUPPORT
        or _PILLOW_MAJOR not in _PASS_ORDER_CHECKED
        or _PILLOW_SIMD
        or new[0] == width
        or new[1] == height
        or not all(0 <= offsets[a] and offsets[a] + crop[a] <= new[a] and crop[a] > 0 for a in (0, 1))
    ):
        return image.resize(new, resample).crop(box)
    scale = [Fraction(dims[a], new[a]) for a in (0, 1)]

    def span(axis: int) -> tuple[int, int]:
        """The source lines that the kept outputs of ``axis`` read, with a 2-pixel margin."""
        support = _FILTER_SUPPORT[resample] * max(float(scale[axis]), 1.0)
        low = math.floor(offsets[axis] * scale[axis] - support) - 2
        high = math.ceil((offsets[axis] + crop[axis]) * scale[axis] + support) + 2
        return max(low, 0), min(high, dims[axis])

    spans = [span(0), span(1)]

    def exact_box(axis: int) -> tuple[float, float] | None:
        """The kept outputs' source box relative to ``spans[axis]``, if exactly representable."""
        if scale[axis].denominator & (scale[axis].denominator - 1):
            return None
        start = offsets[axis] * scale[axis] - spans[axis][0]
        end = (offsets[axis] + crop[axis]) * scale[axis] - spans[axis][0]
        if not (_float32_exact(start) and _float32_exact(end) and _float32_exact(end - start)):
            return None
        return float(start), float(end)

    boxes = [exact_box(0), exact_box(1)]
    if boxes == [None, None]:
        return image.resize(new, resample).crop(box)
    first = 1 if _vertical_first(dims, new) else 0
    second = 1 - first
    if boxes[first] is None:
        lines = _with_axis((0, 0, width, height), second, *spans[second])
        source = image if spans[second] == (0, dims[second]) else image.crop(lines)
        out = _resize_axis(source, first, new[first], resample)
        out = out.crop(_with_axis((0, 0, *out.size), first, offsets[first], offsets[first] + crop[first]))
    else:
        lines = _with_axis(_with_axis((0, 0, width, height), second, *spans[second]), first, *spans[first])
        out = _resize_axis(image.crop(lines), first, crop[first], resample, *boxes[first])
    if boxes[second] is not None:
        return _resize_axis(out, second, crop[second], resample, *boxes[second])
    full = list(out.size)
    full[second] = dims[second]
    canvas = Image.new(out.mode, tuple(full))
    canvas.paste(out, _with_axis((0, 0, 0, 0), second, spans[second][0], 0)[:2])
    out = _resize_axis(canvas, second, new[second], resample)
    return out.crop(_with_axis((0, 0, *out.size), second, offsets[second], offsets[second] + crop[second]))
