"""Unit tests of yolo11_ensemble's processing (its package and its models' model.py) against
ultralytics / torchvision themselves (no server)."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from yolo11_ensemble_processing import detection as det

from harness.testing.python_models import Request, load_model, model_config
from triton_helpers.errors import InputError

REPOSITORY = Path(__file__).resolve().parents[1] / "model_repository"
preprocess = load_model(REPOSITORY / "preprocess" / "1" / "model.py")
postprocess = load_model(REPOSITORY / "postprocess" / "1" / "model.py")

cv2 = pytest.importorskip("cv2")


def _png_header_only_bomb(width=40000, height=40000) -> bytes:
    """A complete 1-bit PNG of width x height (all black) that is small on disk."""

    def chunk(kind, payload):
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))

    row = b"\x00" * (1 + (width + 7) // 8)
    comp = zlib.compressobj(9)
    body = b"".join(comp.compress(row) for _ in range(height)) + comp.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", body) + chunk(b"IEND", b"")


def _jpeg(image_bgr, quality=90) -> bytes:
    ok, buf = cv2.imencode(".jpg", image_bgr, [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return buf.tobytes()


@pytest.mark.parametrize("hw", [(1080, 810), (810, 1080), (640, 640), (3, 5), (1, 900), (50, 2000), (720, 1280)])
def test_letterbox_matches_ultralytics(hw):
    from ultralytics.data.augment import LetterBox

    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, size=(*hw, 3), dtype=np.uint8)
    ours = det.to_model_input(det.letterbox(image, (640, 640)))
    ref = LetterBox((640, 640), auto=False)(image=image)
    ref = np.ascontiguousarray(ref[..., ::-1].transpose(2, 0, 1)).astype(np.float32) / 255
    assert ours.shape == (3, 640, 640) and ours.dtype == np.float32
    np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("hw", [(1080, 810), (3, 5), (50, 2000), (720, 1280), (1, 900)])
def test_scale_boxes_matches_ultralytics(hw):
    from ultralytics.utils import ops

    rng = np.random.default_rng(1)
    xy = rng.uniform(0, 600, size=(20, 2)).astype(np.float32)
    boxes = np.concatenate([xy, xy + rng.uniform(1, 200, size=(20, 2)).astype(np.float32)], axis=1)
    ref = ops.scale_boxes((640, 640), boxes.copy(), hw)
    np.testing.assert_allclose(det.scale_boxes(boxes, (640, 640), hw), ref, rtol=1e-6, atol=1e-4)


def test_nms_matches_torchvision():
    torch = pytest.importorskip("torch")
    torchvision = pytest.importorskip("torchvision")
    rng = np.random.default_rng(2)
    xy = rng.uniform(0, 300, size=(500, 2)).astype(np.float32)
    boxes = np.concatenate([xy, xy + rng.uniform(5, 120, size=(500, 2)).astype(np.float32)], axis=1)
    scores = rng.uniform(0, 1, size=500).astype(np.float32)
    for thr in (0.3, 0.5, 0.7):
        ref = torchvision.ops.nms(torch.from_numpy(boxes), torch.from_numpy(scores), thr).numpy()
        np.testing.assert_array_equal(det.nms(boxes, scores, thr), ref)


def _synthetic_head(nc=3, anchors=8400, seed=3):
    rng = np.random.default_rng(seed)
    head = np.zeros((4 + nc, anchors), np.float32)
    centers = rng.uniform(50, 590, size=(12, 2))
    for a in range(anchors):  # clusters of overlapping boxes around a few objects
        c = centers[a % 12]
        head[0:2, a] = c + rng.normal(0, 6, 2)
        head[2:4, a] = rng.uniform(40, 120, 2)
    head[4:] = rng.uniform(0, 0.6, size=(nc, anchors)) ** 2
    return head


@pytest.mark.parametrize("conf,iou,max_det", [(0.25, 0.7, 300), (0.1, 0.45, 300), (0.25, 0.7, 5), (0.99, 0.7, 300)])
def test_decode_head_matches_ultralytics_nms(conf, iou, max_det):
    torch = pytest.importorskip("torch")
    from ultralytics.utils.nms import non_max_suppression

    head = _synthetic_head()
    ref = non_max_suppression(torch.from_numpy(head[None].copy()), conf, iou, max_det=max_det)[0].numpy()
    boxes, scores, class_ids = det.decode_head(head, conf=conf, iou=iou, max_det=max_det)
    assert len(boxes) == len(ref)
    np.testing.assert_allclose(boxes, ref[:, :4], rtol=1e-6, atol=1e-3)
    np.testing.assert_allclose(scores, ref[:, 4], rtol=1e-6)
    np.testing.assert_array_equal(class_ids, ref[:, 5].astype(np.int32))


def test_decode_head_empty_and_bad_shape():
    head = np.zeros((6, 100), np.float32)
    boxes, scores, class_ids = det.decode_head(head)
    assert boxes.shape == (0, 4) and scores.shape == (0,) and class_ids.shape == (0,)
    with pytest.raises(InputError):
        det.decode_head(np.zeros((3, 10), np.float32))


def test_decode_bgr_matches_cv2_imread_and_refuses_bad_input(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(4)
    image = rng.integers(0, 256, size=(60, 90, 3), dtype=np.uint8)
    data = _jpeg(image)
    np.testing.assert_array_equal(
        preprocess.decode_bgr(data), cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    )

    gray = io.BytesIO()
    Image.fromarray(image[..., 0]).save(gray, format="PNG")
    decoded = preprocess.decode_bgr(gray.getvalue())
    assert decoded.shape == (60, 90, 3)

    rotated = io.BytesIO()  # EXIF orientation 6: displayed rotated 90 degrees clockwise
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(image[..., ::-1]).save(rotated, format="JPEG", exif=exif.tobytes())
    path = tmp_path / "rot.jpg"
    path.write_bytes(rotated.getvalue())
    decoded = preprocess.decode_bgr(rotated.getvalue())
    assert decoded.shape == (90, 60, 3)
    np.testing.assert_array_equal(decoded, cv2.imread(str(path), cv2.IMREAD_COLOR))

    for bad, needle in [
        (b"", "empty"),
        (data[: len(data) // 2], "truncated"),
        (b"hello, this is not an image" * 10, "not a known image format"),
        (_png_header_only_bomb(), "over the limit"),
    ]:
        with pytest.raises(InputError, match=needle):
            preprocess.decode_bgr(bad)


def test_detections_json_is_compact():
    import json

    text = postprocess.detections_json(
        np.array([[1.23, 2, 3, 4]]), np.array([0.912345]), np.array([1]), ["a", "b"], (10, 20)
    )
    assert json.loads(text) == {
        "image_size": [20, 10],
        "detections": [{"box": [1.2, 2.0, 3.0, 4.0], "score": 0.9123, "class_id": 1, "class_name": "b"}],
    }


def test_preprocess_model_answers_each_request_of_a_batch():
    """A bad image fails its own request with INVALID_ARG; the others of the same execute are answered."""
    import json

    model = preprocess.TritonPythonModel()
    config = model_config(
        [("IMAGE_BYTES", "TYPE_STRING", [1])],
        [("IMAGE_TENSOR", "TYPE_FP32", [3, 64, 64]), ("IMAGE_SIZES", "TYPE_INT32", [4])],
        {"max_pixels": 1_000_000},
    )
    model.initialize({"model_config": json.dumps(config)})
    good = _jpeg(np.full((48, 80, 3), 200, np.uint8))
    requests = [
        Request({"IMAGE_BYTES": np.array([[good]], dtype=object)}),
        Request({"IMAGE_BYTES": np.array([[good], [_png_header_only_bomb()]], dtype=object)}),
        Request({"IMAGE_BYTES": np.array([[good], [good]], dtype=object)}),
    ]
    first, bad, last = model.execute(requests)
    assert first.output("IMAGE_TENSOR").shape == (1, 3, 64, 64) and first.output("IMAGE_SIZES").tolist() == [
        [48, 80, 64, 64]
    ]
    assert bad.error().code() == bad.error().INVALID_ARG and "IMAGE_BYTES[1]" in bad.error().message()
    assert "over the limit" in bad.error().message()
    assert last.output("IMAGE_TENSOR").shape == (2, 3, 64, 64)
