"""Hostile images, generated: every image pre-processing function of the Python models (generic
decode in ``triton_helpers``, YOLO decode and letterbox, CN-CLIP, the classification preprocess model) and the YOLO head decoding
end in a result or a clear ``InputError`` within the time bound; the image findings of this fuzzing
kept as regression tests."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from resnet_npu_processing import classification
from yolo11_ensemble_processing import detection

from harness import PROJECT_ROOT
from harness.deployments import load_module
from harness.testing.python_models import load_model
from harness.tests.fuzz_tally import FUZZ, attempt, write_tally  # noqa: F401 - write_tally: autouse fixture
from harness.tests.hostile_inputs import PNG_MAGIC, hostile_images
from triton_helpers import images
from triton_helpers.errors import InputError

SMALL_LIMIT = {"max_pixels": 1_000_000, "max_bytes": 1 << 20}
RESNET = PROJECT_ROOT / "deployments" / "resnet_npu"
YOLO = PROJECT_ROOT / "deployments" / "yolo11_ensemble"
yolo_preprocess = load_model(YOLO / "model_repository" / "preprocess" / "1" / "model.py")


@pytest.mark.timeout(300)
@FUZZ
@given(data=hostile_images(), small=st.booleans())
def test_open_image(data, small):
    limits = SMALL_LIMIT if small else {}
    result = attempt("images.open_image", images.open_image, data, **limits)
    if not isinstance(result, InputError):
        assert result.mode == "RGB" and result.size[0] * result.size[1] <= limits.get("max_pixels", 40_000_000)


@pytest.mark.timeout(300)
@FUZZ
@given(data=hostile_images(), small=st.booleans())
def test_detection_decode_and_letterbox(data, small):
    limits = SMALL_LIMIT if small else {}
    result = attempt("yolo preprocess.decode_bgr", yolo_preprocess.decode_bgr, data, **limits)
    if not isinstance(result, InputError):
        assert result.ndim == 3 and result.shape[2] == 3 and result.dtype == np.uint8
        tensor = detection.to_model_input(detection.letterbox(result, (64, 64)))
        assert tensor.shape == (3, 64, 64) and np.isfinite(tensor).all()


@pytest.mark.timeout(300)
@FUZZ
@given(data=hostile_images(), small=st.booleans())
def test_cn_clip_image_preprocess(data, small):
    path = PROJECT_ROOT / "deployments/cn_clip/model_repository/preprocess_image/1/cn_clip_transform.py"
    cn_clip = load_module(path, "cn_clip_preprocess_image_cn_clip_transform")
    out = attempt("cn_clip.preprocess_image", cn_clip.preprocess_image, data, 32, **(SMALL_LIMIT if small else {}))
    if not isinstance(out, InputError):
        assert out.shape == (3, 32, 32) and np.isfinite(out).all()


def _preprocess(transform):
    """resnet_npu's preprocess model (model.py, as the stub loads it) set to ``transform``, without a stub."""
    model = load_model(RESNET / "model_repository" / "resnet50_preprocess" / "1" / "model.py").TritonPythonModel()
    model.transform = transform
    model.limits = {"max_pixels": 1_000_000, "max_bytes": 1 << 20}
    model.raw_pixels, model.dtype = False, np.float32
    return model


@pytest.mark.timeout(300)
@FUZZ
@given(items=st.lists(hostile_images(), min_size=1, max_size=3), lite=st.booleans())
def test_classification_preprocess(items, lite):
    transform = (
        classification.ImageTransform.efficientnet_lite(32)
        if lite
        else classification.ImageTransform.torchvision_imagenet(40, 32)
    )
    out = attempt("resnet preprocess model.preprocess", _preprocess(transform).preprocess, items)
    if not isinstance(out, InputError):
        assert out.shape == (len(items), 3, 32, 32) and np.isfinite(out).all()


@pytest.mark.timeout(120)
@FUZZ
@given(
    classes=st.integers(1, 4),
    anchors=st.integers(0, 300),
    fill=st.sampled_from(["random", "nan", "inf", "huge"]),
    seed=st.integers(0, 1000),
)
def test_detection_head_decoding(classes, anchors, fill, seed):
    """postprocess is callable directly by clients too: its HEAD_OUTPUT may be anything."""
    rng = np.random.default_rng(seed)
    head = rng.uniform(-1e3, 1e3, (4 + classes, anchors)).astype(np.float32)
    head[4:] = rng.uniform(0, 1, (classes, anchors))
    if fill == "nan" and anchors:
        head[rng.integers(0, head.shape[0], 8), rng.integers(0, max(anchors, 1), 8) % max(anchors, 1)] = np.nan
    elif fill == "inf":
        head[:4] = np.inf
    elif fill == "huge":
        head[:4] *= 1e30
    result = attempt("detection.decode_head", detection.decode_head, head)
    if not isinstance(result, InputError):
        boxes, scores, ids = result
        assert len(boxes) == len(scores) == len(ids) <= 300
        attempt("detection.scale_boxes", detection.scale_boxes, boxes, (640, 640), (480, 640))


@pytest.mark.parametrize("data", [PNG_MAGIC + b"\x00\x00\x00\rIHDR", b"RIFF6\x00\x00\x00WEBPVP8 ", b"P6"])
def test_open_image_turns_truncated_headers_into_input_errors(data):
    with pytest.raises(InputError):
        images.open_image(data)


@pytest.mark.timeout(60)
def test_decode_bgr_refuses_a_12_byte_png_quickly():
    began = time.perf_counter()
    with pytest.raises(InputError):
        yolo_preprocess.decode_bgr(PNG_MAGIC + b"\x7f\xff\xff\xff")
    assert time.perf_counter() - began < 0.5
