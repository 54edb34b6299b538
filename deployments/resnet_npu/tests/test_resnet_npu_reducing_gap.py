"""The ``reducing_gap`` option of ImageTransform (Pillow's box reduction before the resize filter):
off by default, the documented two-step resize when on, bounded pixel change, bad values refused
(no server)."""

from __future__ import annotations

import importlib.util
import io
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from resnet_npu_processing import classification as cls
from test_resnet_npu_classification import preprocess_model  # beside this file

from harness.testing.python_models import Request
from triton_helpers.images import open_image

# ultralytics' bus.jpg, a fixture image of make_fixtures.py (found without importing ultralytics)
BUS = Path(importlib.util.find_spec("ultralytics").submodule_search_locations[0]) / "assets" / "bus.jpg"
BICUBIC = Image.Resampling.BICUBIC


def _bus() -> Image.Image:
    return open_image(BUS.read_bytes())


def _diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a.astype(np.int16) - b.astype(np.int16))


def test_default_is_the_exact_resize():
    assert cls.ImageTransform.efficientnet_lite().reducing_gap is None
    assert cls.ImageTransform.from_parameters({}).reducing_gap is None
    for off in ("", "none", " None "):
        assert cls.ImageTransform.from_parameters({"reducing_gap": off}).reducing_gap is None


def test_parameter_is_parsed_and_bad_values_are_refused():
    assert cls.ImageTransform.from_parameters({"reducing_gap": " 1.5 "}).reducing_gap == 1.5
    for bad in ("0.5", "0", "-2", "nan", "fast", "1,5"):
        with pytest.raises(ValueError, match="reducing_gap"):
            cls.ImageTransform.from_parameters({"reducing_gap": bad})


def test_efficientnet_crop_is_box_reduced_then_bicubic():
    """bus.jpg 810x1080: a 708 px crop, 3.16x the output: 2x box reduction (354 px), then bicubic to 224."""
    image = _bus()
    exact = cls.ImageTransform.efficientnet_lite()
    fast = replace(exact, reducing_gap=1.5)
    side = int(224 / 256 * 810)
    top, left = (1080 - side + 1) // 2, (810 - side + 1) // 2
    crop = image.crop((left, top, left + side, top + side))
    two_step = np.asarray(crop.reduce(2).resize((224, 224), BICUBIC))
    np.testing.assert_array_equal(fast.pixels(image), two_step)
    diff = _diff(fast.pixels(image), exact.pixels(image))
    assert diff.max() > 0  # it does change pixels: hence a config choice
    assert diff.mean() < 3.0 and diff.max() <= 48  # a few levels of 255 on a photo, no outliers


def test_no_change_below_twice_the_gap():
    """A crop under 2 x gap x the output (here 1.5: 672 px) is resized exactly as the reference."""
    image = _bus().resize((600, 800), BICUBIC)
    exact = cls.ImageTransform.efficientnet_lite()
    np.testing.assert_array_equal(replace(exact, reducing_gap=1.5).pixels(image), exact.pixels(image))
    resnet = cls.ImageTransform.torchvision_imagenet()
    np.testing.assert_array_equal(
        replace(resnet, reducing_gap=3.0).pixels(image.resize((400, 533))), resnet.pixels(image.resize((400, 533)))
    )


def test_resnet_mode_uses_it_too_and_stays_close():
    image = _bus()
    exact = cls.ImageTransform.torchvision_imagenet()
    fast = replace(exact, reducing_gap=1.5)
    diff = _diff(fast.pixels(image), exact.pixels(image))
    assert fast.pixels(image).shape == (224, 224, 3)
    assert 0 < diff.max() <= 48 and diff.mean() < 3.0


def _model(parameters: dict):
    return preprocess_model(
        ("PIXELS", "TYPE_UINT8", [224, 224, 3]),
        {"mode": "crop_resize", "crop": "224", "interpolation": "bicubic", **parameters},
        model="efficientnet_lite0_preprocess",
    )


def test_preprocess_model_takes_it_from_the_config():
    data = BUS.read_bytes()
    request = Request({"IMAGE_BYTES": np.array([[data]], dtype=object)})
    [fast] = _model({"reducing_gap": "1.5"}).execute([request])
    [exact] = _model({}).execute([request])
    image = Image.open(io.BytesIO(data)).convert("RGB")
    transform = cls.ImageTransform.efficientnet_lite()
    np.testing.assert_array_equal(exact.output("PIXELS")[0], transform.pixels(image))
    np.testing.assert_array_equal(fast.output("PIXELS")[0], replace(transform, reducing_gap=1.5).pixels(image))


def test_preprocess_model_refuses_a_bad_value_at_load():
    with pytest.raises(ValueError, match="reducing_gap must be a number >= 1.0"):
        _model({"reducing_gap": "0.5"})
