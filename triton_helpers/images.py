"""Bounded image decoding for Python-backend pre-processing: bytes in, RGB image (PIL) out.

Limits are checked before any pixel is decoded, so a decompression bomb (a 40000x40000 PNG
that is small on disk) is refused from its header alone (``open_checked``; a model that
decodes with OpenCV calls it first).

``min_shorter_side`` turns on libjpeg-turbo's DCT scaling for JPEGs (PIL's ``draft``): the
image is decoded at 1/2, 1/4 or 1/8 of its size, the largest reduction that keeps its shorter
side at least ``min_shorter_side``. It changes pixels (a box-filtered DCT reduction instead of
the full image), so it is a config choice whose agreement is measured (docs/tuning.md).
"""

from __future__ import annotations

import io

from PIL import Image, ImageOps, UnidentifiedImageError

from triton_helpers.errors import InputError

DEFAULT_MAX_PIXELS = 40_000_000
DEFAULT_MAX_BYTES = 32 * 1024 * 1024
EXIF_ORIENTATION = 0x0112


def open_checked(
    data: bytes, *, max_pixels: int = DEFAULT_MAX_PIXELS, max_bytes: int = DEFAULT_MAX_BYTES
) -> Image.Image:
    """Open encoded image bytes lazily: the header read and the limits checked, no pixel decoded.

    For a model that decodes with another library (OpenCV) after this check, and for ``open_image``.
    """
    if not data:
        raise InputError("image is empty (0 bytes)")
    if len(data) > max_bytes:
        raise InputError(f"image is {len(data)} bytes, over the limit of {max_bytes} (max_bytes)")
    try:
        image = Image.open(io.BytesIO(data))
    except (UnidentifiedImageError, ImportError):
        # ImportError: ultralytics, when imported in the same process, patches Image.open to try
        # an optional HEIF plugin on unknown data.
        raise InputError(f"cannot decode image: not a known image format (first bytes {data[:8]!r})") from None
    except Image.DecompressionBombError as exc:
        raise InputError(
            f"image is over the limit of {max_pixels} pixels (max_pixels; decompression bomb): {exc}"
        ) from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise InputError(f"cannot read image header: {exc}") from None
    width, height = image.size
    if width <= 0 or height <= 0:
        raise InputError(f"image has an empty size {width}x{height}")
    if width * height > max_pixels:
        raise InputError(
            f"image is {width}x{height} = {width * height} pixels, over the limit of {max_pixels} (max_pixels)"
        )
    return image


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
    image = open_checked(data, max_pixels=max_pixels, max_bytes=max_bytes)
    width, height = image.size
    if min_shorter_side and image.format == "JPEG" and min(width, height) >= 2 * min_shorter_side:
        image.draft(image.mode, (min_shorter_side, min_shorter_side))
    try:
        image.load()
        if exif_transpose and image.getexif().get(EXIF_ORIENTATION, 1) != 1:
            image = ImageOps.exif_transpose(image)
        return image if image.mode == "RGB" else image.convert("RGB")
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise InputError(f"cannot decode {image.format or 'image'}: {exc}") from None
