"""The preprocess models' ``decode: "reduced"`` option (triton_helpers.images' JPEG DCT scaling,
asked for by resnet_npu_processing.classification.decode_min_side): close to the full decode after
the transform, and only the modes it names (no server)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image
from resnet_npu_processing import classification as cls

from triton_helpers.images import open_image


def _photo(width, height) -> bytes:
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack([(x * 255 // max(width - 1, 1)), (y * 255 // max(height - 1, 1)), (x + y) % 256], -1)
    buffer = io.BytesIO()
    Image.fromarray(rgb.astype(np.uint8)).save(buffer, format="JPEG")
    return buffer.getvalue()


def test_reduced_decode_is_close_to_the_full_decode_after_the_transform():
    data = _photo(1600, 1200)
    transform = cls.ImageTransform.efficientnet_lite()
    full = transform(open_image(data))
    reduced = transform(open_image(data, min_shorter_side=cls.decode_min_side("reduced", transform)))
    assert full.shape == reduced.shape == (3, 224, 224)
    assert not np.array_equal(full, reduced)  # it does change pixels: hence a config choice
    assert np.abs(full - reduced).mean() < 0.02  # about 1.3 levels of 255 on a smooth image


def test_decode_modes():
    transform = cls.ImageTransform.torchvision_imagenet()
    assert cls.decode_min_side(None, transform) is None and cls.decode_min_side("full", transform) is None
    assert cls.decode_min_side("reduced", transform) == 256
    assert cls.decode_min_side("reduced", cls.ImageTransform.efficientnet_lite()) == 256
    with pytest.raises(ValueError, match="decode"):
        cls.decode_min_side("fast", transform)
