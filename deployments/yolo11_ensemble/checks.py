"""Checks and benchmark workloads of yolo11_ensemble (see docs/adding-a-deployment.md).

Correctness is judged against fixtures/expected_detections.json, written by ultralytics'
own ``predict`` (make_fixtures.py), never by this deployment.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import cache, lru_cache
from pathlib import Path

import numpy as np
from tritonclient.utils import InferenceServerException
from yolo11_ensemble_processing.detection import box_iou

from harness import provenance
from harness.deployments import load_module
from harness.testing.hostile_images import png_zip_bomb

HERE = Path(__file__).resolve().parent


client = load_module(HERE / "client.py", "yolo11_ensemble_client")

ENSEMBLE, DETECTOR = "yolo11_ensemble", "yolo11_detector"
MIN_IOU, MAX_SCORE_DIFF = 0.9, 0.02
BOX_RTOL, BOX_ATOL, SCORE_ATOL = 1e-3, 0.05, 1e-4  # raw head vs the reference: xywh pixels, class scores
BENCH_IMAGE = "bus.jpg"


# ----------------------------------------------------------------------------- helpers


@cache
def _expected(fixtures_path: Path) -> dict:
    return json.loads((fixtures_path / "expected_detections.json").read_text())


def _image(ctx, name: str) -> bytes:
    return (ctx.deployment.fixtures_path / "images" / name).read_bytes()


def _bytes_input(*images: bytes) -> dict:
    return {"IMAGE_BYTES": np.array([[data] for data in images], dtype=object)}


def _infer_ensemble(ctx, *images: bytes, protocol="http", parameters=None) -> list[client.Detections]:
    out = ctx.infer(ENSEMBLE, _bytes_input(*images), outputs=client.OUTPUTS, protocol=protocol, parameters=parameters)
    return [client.ensemble_outputs_to_detections(out, i) for i in range(len(images))]


def _infer_internal(ctx, model: str, inputs: dict, outputs: list[str]) -> dict:
    """One HTTP inference on an internal ensemble step: behind the front gate, with the server's admin
    header (servers without a gate have none and need none)."""
    from harness.tensors import make_inputs, make_outputs, result_arrays

    headers = dict(getattr(ctx.server, "admin_headers", None) or {})
    with ctx.http_client() as http:
        result = http.infer(
            model, make_inputs("http", inputs), outputs=make_outputs("http", outputs), headers=headers or None
        )
        return result_arrays(result, outputs)


def _require_same_weights(ctx) -> None:
    """The served detector ONNX carries the weights identity the fixtures record (harness.provenance)."""
    expected = _expected(ctx.deployment.fixtures_path)
    provenance.assert_served_weights(ctx, DETECTOR, provenance.fixtures_identity(expected, DETECTOR))


def match_detections(got: client.Detections, expected: list[dict], where: str) -> None:
    """The match rule: same count, same classes, IoU >= 0.9 per matched box, score within 0.02."""
    assert len(got.scores) == len(expected), (
        f"{where}: {len(got.scores)} boxes, reference has {len(expected)}\n got {got.as_dicts()}\n expected {expected}"
    )
    assert sorted(got.class_names) == sorted(d["class_name"] for d in expected), (
        f"{where}: classes {sorted(got.class_names)} != reference {sorted(d['class_name'] for d in expected)}"
    )
    if not expected:
        return
    ious = box_iou(np.array([d["box"] for d in expected]), got.boxes)
    used: set[int] = set()
    for i in np.argsort([-d["score"] for d in expected]):
        ref = expected[i]
        candidates = [j for j in np.argsort(-ious[i]) if j not in used and got.class_names[j] == ref["class_name"]]
        assert candidates, f"{where}: no unmatched {ref['class_name']} box left for {ref}"
        j = candidates[0]
        used.add(j)
        assert ious[i, j] >= MIN_IOU, f"{where}: best IoU {ious[i, j]:.3f} < {MIN_IOU} for reference {ref}"
        assert abs(float(got.scores[j]) - ref["score"]) <= MAX_SCORE_DIFF, (
            f"{where}: score {float(got.scores[j]):.4f} vs reference {ref['score']:.4f} for box {ref['box']}"
        )


def assert_head_matches(head: np.ndarray, ref: dict, where: str) -> None:
    """A served raw head ``(4 + classes, anchors)`` equals the reference's at its recorded anchors."""
    assert list(head.shape) == ref["shape"], f"{where}: head {list(head.shape)}, reference {ref['shape']}"
    got, want = head[:, ref["anchors"]].T, np.array(ref["values"])
    np.testing.assert_allclose(got[:, :4], want[:, :4], BOX_RTOL, BOX_ATOL, err_msg=f"{where}: raw head boxes")
    np.testing.assert_allclose(got[:, 4:], want[:, 4:], 0, SCORE_ATOL, err_msg=f"{where}: raw head scores")


def assert_reference_not_degenerate(expected: dict) -> None:
    """Boxes somewhere, at the fixtures' confidence or at the low one of each image (make_fixtures.py):
    else no check would compare a box."""
    boxes = sum(len(ref["detections"]) for ref in expected["images"].values())
    low = sum(len(ref["detections"]) for ref in expected.get("low_conf", {}).values())
    assert boxes or low, (
        "the reference finds no box in any fixture image, not even at a low confidence: its scores do not "
        "depend on the image or the head is broken; check the checkpoint, then regenerate the fixtures: "
        f"{expected[provenance.FIXTURES_KEY]['regenerate']}"
    )


def _base_parameters(ctx) -> dict | None:
    """None where the reference has boxes on bus.jpg, else the best five boxes of any score."""
    boxes = _expected(ctx.deployment.fixtures_path)["images"]["bus.jpg"]["detections"]
    return None if len(boxes) >= 2 else {"conf": 0.0, "max_det": 5}


def _bad_inputs(ctx) -> list[tuple[str, bytes, str]]:
    jpeg = _image(ctx, "bus.jpg")
    png = _image(ctx, "bus_small.png")
    return [
        ("empty bytes", b"", "empty"),
        ("truncated JPEG", jpeg[: len(jpeg) // 2], "truncated JPEG"),
        ("truncated PNG", png[: len(png) // 3], "cannot decode"),
        ("non-image bytes", b"%PDF-1.4 this is not an image " * 20, "not a known image format"),
        ("40000x40000 PNG bomb", png_zip_bomb(40000), "over the limit"),
    ]


def _counts(ctx, model: str) -> tuple[int, int]:
    """(requests, executions) a model has run so far, from Triton's statistics."""
    with ctx.http_client() as http:
        stats = http.get_inference_statistics(model)["model_stats"]
    return (
        sum(int(s["inference_stats"]["success"]["count"]) + int(s["inference_stats"]["fail"]["count"]) for s in stats),
        sum(int(s.get("execution_count", 0)) for s in stats),
    )


# ----------------------------------------------------------------------------- checks


def check_weights_match_fixtures(ctx):
    """The served ONNX comes from the checkpoint the fixtures were made with."""
    _require_same_weights(ctx)


def check_fixtures_match_ultralytics(ctx):
    """Each fixture image, one request each over HTTP: same detections as ultralytics predict."""
    _require_same_weights(ctx)
    expected = _expected(ctx.deployment.fixtures_path)
    assert_reference_not_degenerate(expected)
    for name, ref in expected["images"].items():
        (got,) = _infer_ensemble(ctx, _image(ctx, name))
        assert list(got.image_size) == ref["size"], f"{name}: image size {got.image_size} != {ref['size']}"
        match_detections(got, ref["detections"], name)


def check_batched_request_grpc(ctx):
    """All fixture images in ONE gRPC request (batch dim): each item still matches the reference."""
    _require_same_weights(ctx)
    expected = _expected(ctx.deployment.fixtures_path)["images"]
    names = sorted(expected)[:8]  # max_batch_size
    results = _infer_ensemble(ctx, *(_image(ctx, n) for n in names), protocol="grpc")
    for name, got in zip(names, results):
        match_detections(got, expected[name]["detections"], f"{name} (batched)")


def check_server_preprocess_head_matches(ctx):
    """preprocess's tensor through the detector: the reference's raw head (where the fixtures have one)."""
    _require_same_weights(ctx)
    expected = _expected(ctx.deployment.fixtures_path)
    assert_reference_not_degenerate(expected)
    for name, ref in expected.get("heads", {}).items():
        tensor = _infer_internal(ctx, "preprocess", _bytes_input(_image(ctx, name)), ["IMAGE_TENSOR"])["IMAGE_TENSOR"]
        head = ctx.infer(DETECTOR, {"images": tensor}, outputs=["output0"])["output0"]
        assert_head_matches(head[0], ref, f"{name} via preprocess")


def check_json_text_matches_tensors(ctx):
    """DETECTIONS_JSON carries the same detections as the tensors, and is small."""
    out = ctx.infer(
        ENSEMBLE, _bytes_input(_image(ctx, "bus.jpg")), outputs=client.OUTPUTS, parameters=_base_parameters(ctx)
    )
    text = out["DETECTIONS_JSON"][0][0]
    parsed = json.loads(text)
    tensors = client.ensemble_outputs_to_detections(out)
    assert parsed["image_size"] == [810, 1080], parsed["image_size"]
    assert [d["class_name"] for d in parsed["detections"]] == tensors.class_names
    np.testing.assert_allclose([d["box"] for d in parsed["detections"]], tensors.boxes, atol=0.06)
    np.testing.assert_allclose([d["score"] for d in parsed["detections"]], tensors.scores, atol=6e-5)
    assert len(text) < 2000, f"DETECTIONS_JSON is {len(text)} bytes"


def check_request_parameters(ctx):
    """conf / iou / max_det per request reach postprocess through the ensemble; bad values refused."""
    data = _image(ctx, "bus.jpg")
    base = _base_parameters(ctx) or {}
    (default,) = _infer_ensemble(ctx, data, parameters=base or None)
    assert len(default.scores) >= 2, f"bus.jpg should have several detections, got {default.as_dicts()}"
    names = _expected(ctx.deployment.fixtures_path)["class_names"]
    assert set(default.class_names) <= set(names), f"classes {default.class_names} not in {names}"
    (one,) = _infer_ensemble(ctx, data, parameters={**base, "max_det": 1})
    assert len(one.scores) == 1 and abs(one.scores[0] - default.scores.max()) < 1e-6, one.as_dicts()
    best, second = np.sort(default.scores)[-2:][::-1]
    if best - second > 2e-4:  # a threshold between them keeps exactly the best box
        threshold = float(second) + 1e-4
        (strict,) = _infer_ensemble(ctx, data, parameters={**base, "conf": threshold})
        assert len(strict.scores) == 1, f"conf={threshold}: {strict.as_dicts()}"
    (loose,) = _infer_ensemble(ctx, data, parameters={**base, "conf": min(0.05, base.get("conf", 1.0)), "iou": 0.3})
    assert len(loose.scores) >= len(default.scores) - 1, loose.as_dicts()
    ctx.expect_error(ENSEMBLE, _bytes_input(data), "parameter 'conf'", parameters={"conf": 2.5})
    ctx.expect_error(ENSEMBLE, _bytes_input(data), "parameter 'max_det'", parameters={"max_det": "many"})
    ctx.assert_healthy()


def check_bad_inputs_are_refused(ctx):
    """Empty, truncated, non-image and bomb inputs: a clear error each, server healthy after."""
    for _what, data, needle in _bad_inputs(ctx):
        ctx.expect_error(ENSEMBLE, _bytes_input(data), needle)
    ctx.assert_healthy(models=[ENSEMBLE, "preprocess", DETECTOR, "postprocess"])
    (got,) = _infer_ensemble(ctx, _image(ctx, "zidane.jpg"))
    match_detections(
        got,
        _expected(ctx.deployment.fixtures_path)["images"]["zidane.jpg"]["detections"],
        "zidane.jpg after bad inputs",
    )


def check_batch_mixing_good_and_bad(ctx):
    """Good and bad images in flight together: bad ones fail alone, good ones are answered right.

    Concurrent single-image requests (dynamically batched on the server) and one request whose
    batch holds a good and a bad image (that request fails, naming the bad item).
    """
    expected = _expected(ctx.deployment.fixtures_path)["images"]
    good = ["bus.jpg", "zidane.jpg", "zidane.webp", "bus_small.png"]
    bad = _bad_inputs(ctx)
    jobs = [("good", name, _image(ctx, name), None) for name in good]
    jobs += [("bad", what, data, needle) for what, data, needle in bad]
    jobs = [job for pair in zip(jobs[: len(good)], jobs[len(good) :]) for job in pair] + jobs[2 * len(good) :]
    barrier = threading.Barrier(len(jobs))

    def run(job):
        kind, name, data, needle = job
        barrier.wait(timeout=60)
        try:
            return job, _infer_ensemble(ctx, data)[0], None
        except InferenceServerException as exc:
            return job, None, str(exc)

    for attempt in range(3):  # until the burst was taken as (at least) one multi-request batch
        before = _counts(ctx, "preprocess")
        with ThreadPoolExecutor(len(jobs)) as pool:
            outcomes = list(pool.map(run, jobs))
        after = _counts(ctx, "preprocess")
        if after[1] - before[1] < after[0] - before[0]:
            break
    else:
        raise AssertionError("preprocess never received good and bad requests in one dynamic batch")
    for (kind, name, data, needle), got, error in outcomes:
        if kind == "good":
            assert error is None, f"{name} failed next to bad inputs: {error}"
            match_detections(got, expected[name]["detections"], f"{name} (mixed batch)")
        else:
            assert error is not None and needle.lower() in error.lower(), f"{name}: expected {needle!r}, got {error}"
    message = ctx.expect_error(ENSEMBLE, _bytes_input(_image(ctx, "bus.jpg"), b"not an image"), "IMAGE_BYTES[1]")
    assert "not a known image format" in message, message
    ctx.assert_healthy(models=[ENSEMBLE, "preprocess", DETECTOR, "postprocess"])


def check_before_path_matches(ctx):
    """The "before" path (client letterbox + bare detector + client NMS) gives the same answer."""
    _require_same_weights(ctx)
    expected = _expected(ctx.deployment.fixtures_path)
    names = expected["class_names"]
    for image in ("bus.jpg", "zidane.jpg"):
        data = _image(ctx, image)
        inputs, geometry = client.tensor_request_640(data, expected["imgsz"])
        head = ctx.infer(DETECTOR, inputs, outputs=["output0"], protocol="grpc")["output0"]
        if image in expected.get("heads", {}):
            assert_head_matches(head[0], expected["heads"][image], f"{image} via client-side tensor")
        got = client.finish_tensor(head, geometry, names)
        match_detections(
            got,
            _expected(ctx.deployment.fixtures_path)["images"][image]["detections"],
            f"{image} via client-side tensor",
        )


def check_low_confidence_boxes_match_ultralytics(ctx):
    """At each image's low confidence (make_fixtures.py: a few boxes pass it whatever the checkpoint),
    the ensemble and the client-side tensor path find ultralytics' boxes: the box path checked
    where a seeded or weak checkpoint finds nothing at the default confidence."""
    _require_same_weights(ctx)
    expected = _expected(ctx.deployment.fixtures_path)
    assert_reference_not_degenerate(expected)
    assert expected.get("low_conf"), f"no low-confidence reference: {expected[provenance.FIXTURES_KEY]['regenerate']}"
    for image, ref in expected["low_conf"].items():
        thresholds = {"conf": ref["conf"], "iou": expected["iou"], "max_det": expected["max_det"]}
        (got,) = _infer_ensemble(ctx, _image(ctx, image), parameters=thresholds)
        match_detections(got, ref["detections"], f"{image} at conf {ref['conf']}")
        inputs, geometry = client.tensor_request_640(_image(ctx, image), expected["imgsz"])
        head = ctx.infer(DETECTOR, inputs, outputs=["output0"])["output0"]
        got = client.finish_tensor(head, geometry, expected["class_names"], **thresholds)
        match_detections(got, ref["detections"], f"{image} at conf {ref['conf']} via client-side tensor")


# ----------------------------------------------------------------------------- workloads


@lru_cache(maxsize=1)
def _detector_session():
    from harness.measuring.engines import cpu_session

    return cpu_session(HERE / "model_repository" / DETECTOR / "1" / "model.onnx", threads=2)


def _detector_ceiling(batch: int):
    """The bare detector in this process (onnxruntime, 2 threads like the served one), batch of ``batch``."""
    session = _detector_session()
    tensor = np.random.default_rng(0).random((batch, 3, 640, 640), dtype=np.float32)
    return lambda: session.run(None, {"images": tensor})


def workload_ensemble_jpeg(ctx):
    """The raw JPEG to the ensemble; the answer read is the JSON text."""
    from harness.measuring.loadgen import Workload

    data = _image(ctx, BENCH_IMAGE)
    return Workload(
        model=ENSEMBLE,
        inputs=_bytes_input(data),
        outputs=["DETECTIONS_JSON"],
        variant="ensemble-raw-jpeg",
        finish=lambda out: json.loads(out["DETECTIONS_JSON"][0][0]),
        notes={"image": f"{BENCH_IMAGE} {len(data)} B", "client_work": "none"},
        ceiling=_detector_ceiling,
    )


def _tensor_workload(ctx, naive: bool, size: int, variant: str):
    from harness.measuring.loadgen import Workload

    data = _image(ctx, BENCH_IMAGE)
    names = _expected(ctx.deployment.fixtures_path)["class_names"]
    geometry: dict = {}

    def prepare():
        inputs, geo = client.tensor_request_naive(data, size) if naive else client.tensor_request_640(data, size)
        geometry.update(geo)  # same image every time: the geometry is shared safely
        return inputs

    return Workload(
        model=DETECTOR,
        outputs=["output0"],
        variant=variant,
        prepare=prepare,
        finish=lambda out: client.finish_tensor(out["output0"], geometry, names),
        notes={
            "image": f"{BENCH_IMAGE} {len(data)} B",
            "tensor": f"1x3x{size}x{size} float32",
            "client_work": "decode + " + ("stretch" if naive else "letterbox") + " + NMS",
        },
    )


def workload_client_tensor_640(ctx):
    """The "before" path, sane: client letterbox to 640 (timed), bare detector, client NMS (timed)."""
    workload = _tensor_workload(ctx, naive=False, size=640, variant="client-tensor-640")
    workload.ceiling = _detector_ceiling
    return workload


def workload_client_tensor_naive(ctx):
    """The "before" path as in the incident: the image stretched to 1280x1280 float32 (19.7 MB)."""
    return _tensor_workload(ctx, naive=True, size=client.NAIVE_SIZE, variant=f"client-tensor-naive-{client.NAIVE_SIZE}")


# The speed-run paths: the same three requests to yolo11n_speedrun (YOLO11n, seeded weights,
# export.py), fast enough that a network-bound run measures the link, not this machine's CPU.
# Their records say so (notes.speed_run, the served file's weights stamp); no ceiling (the bare
# detector of the ceiling is the real one), no correctness claim (its detections mean nothing).
SPEED_RUN_DETECTOR, SPEED_RUN_ENSEMBLE = "yolo11n_speedrun", "yolo11_ensemble_speedrun"


def _speed_run(ctx, workload, model: str):
    (path,) = provenance.served_onnx_files(ctx.deployment.model_repository, SPEED_RUN_DETECTOR)
    stamp = provenance.read_stamp(path)
    workload.model = model
    workload.variant = f"{workload.variant} (speed-run, seeded weights)"
    workload.ceiling = None
    workload.notes = {
        **workload.notes,
        "speed_run": "speed-run, seeded weights: YOLO11n, torch.manual_seed(0); speeds only, detections meaningless",
        "weights": stamp.describe() if stamp else "no stamp",
    }
    return workload


def workload_speed_run_jpeg(ctx):
    """The raw JPEG to the speed-run ensemble."""
    return _speed_run(ctx, workload_ensemble_jpeg(ctx), SPEED_RUN_ENSEMBLE)


def workload_speed_run_tensor_640(ctx):
    """Client letterbox to 640 and NMS around the speed-run detector."""
    return _speed_run(
        ctx, _tensor_workload(ctx, naive=False, size=640, variant="client-tensor-640"), SPEED_RUN_DETECTOR
    )


def workload_speed_run_tensor_naive(ctx):
    """The image stretched to 1280x1280 float32 for the speed-run detector."""
    workload = _tensor_workload(
        ctx, naive=True, size=client.NAIVE_SIZE, variant=f"client-tensor-naive-{client.NAIVE_SIZE}"
    )
    return _speed_run(ctx, workload, SPEED_RUN_DETECTOR)
