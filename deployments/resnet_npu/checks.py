"""Correctness, bad-input checks and benchmark workloads of resnet_npu (the harness contract).

Expected outputs come from make_fixtures.py (torch + torchvision on the same weights, or
onnxruntime on the file export.py ``--onnx`` brought in). Match rule: top-5 class ids identical
and probabilities within 1e-3. The classifiers checked are those whose folders are in the
model repository, each with the transform of its ``<model>_preprocess`` config.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import numpy as np
from resnet_npu_processing.classification import ImageTransform, top_k
from tritonclient.utils import InferenceServerException

from harness import provenance
from harness.deployments import load_module
from harness.testing.hostile_images import png_header_bomb

HERE = Path(__file__).resolve().parent
PROB_TOL = 1e-3
#: Logits within this share of the reference's largest |logit| (its own scale, whatever the model).
LOGIT_RTOL = 1e-3


def _preprocess_transform(model: str) -> ImageTransform:
    """The transform ``<model>_preprocess``'s config.pbtxt parameters describe (what the ensemble runs)."""
    text = (HERE / "model_repository" / f"{model}_preprocess" / "config.pbtxt").read_text()
    pattern = r'parameters\s*\{\s*key:\s*"([^"]+)"\s*value:\s*\{\s*string_value:\s*"([^"]*)"\s*\}\s*\}'
    return ImageTransform.from_parameters(dict(re.findall(pattern, text)))


CLASSIFIERS = {
    # bare model -> (ensemble, client-side transform equal to the server's preprocess model)
    model: (f"classify_{model}", _preprocess_transform(model))
    for model in ("resnet50", "efficientnet_lite0")
    if (HERE / "model_repository" / model).is_dir()
}
# the ensemble the top-k and still-answering checks use (EfficientNet-Lite0 has real weights)
MAIN = "efficientnet_lite0" if "efficientnet_lite0" in CLASSIFIERS else next(iter(CLASSIFIERS))
# ImageNet classes that are a fair answer for ultralytics' bus.jpg (a city bus, people in front)
BUS_LIKE = {
    "minibus",
    "trolleybus",
    "school bus",
    "passenger car",
    "streetcar",
    "police van",
    "recreational vehicle",
    "moving van",
    "tram",
}


def _sibling(name: str):
    """Import a file of this folder under a unique module name (no sys.path changes)."""
    return load_module(HERE / f"{name}.py", f"resnet_npu_{name}")


@cache
def expected() -> dict:
    return json.loads((HERE / "fixtures" / "expected.json").read_text())


@cache
def expected_logits() -> dict[str, np.ndarray]:
    with np.load(HERE / "fixtures" / "logits.npz") as data:
        return {k: data[k] for k in data.files}


@cache
def fixture_images() -> dict[str, bytes]:
    return {name: path.read_bytes() for name, path in _sibling("make_fixtures").image_paths().items()}


def served_weights_sha256(ctx_repository: str, model: str) -> str | None:
    stamp = provenance.read_stamp(Path(ctx_repository) / model / "1" / "model.onnx")
    return stamp.sha256 if stamp else None


def _require_same_weights(ctx, model: str) -> dict:
    """The fixture entry of ``model``, after proving the served ONNX files of ``model`` and of its
    folded ``<model>_uint8`` (the ensembles' step) carry the fixture's weights (harness.provenance)
    and that the reference's logits tell the fixture images apart."""
    for served in (model, f"{model}_uint8"):
        provenance.assert_served_weights(ctx, served, provenance.fixtures_identity(expected(), served))
    assert_reference_not_degenerate(model)
    return expected()["models"][model]


def _classes(model: str) -> int:
    return len(next(v for k, v in expected_logits().items() if k.startswith(f"{model}/")))


def logit_scale(model: str) -> float:
    """The largest |logit| of the reference on the fixture images: what the logit tolerances scale with."""
    return float(max(np.abs(v).max() for k, v in expected_logits().items() if k.startswith(f"{model}/")))


def assert_reference_not_degenerate(model: str) -> None:
    """Reference logits that are not finite, all 0, or one and the same vector for every image (at
    their own scale) would let a served model that ignores its input pass: fail, saying why and
    what to do, before comparing."""
    rows = np.stack([v for k, v in expected_logits().items() if k.startswith(f"{model}/")])
    remedy = (
        f"check the model (its export and weights), then regenerate the fixtures: python -m harness refresh {HERE.name}"
    )
    assert np.isfinite(rows).all(), f"{model}: the reference logits hold NaN or inf (broken weights); {remedy}"
    scale = logit_scale(model)
    assert scale > 0, f"{model}: every reference logit is 0 (the model's output ignores the image); {remedy}"
    spread = float((rows.max(axis=0) - rows.min(axis=0)).max())
    assert spread > 1e-4 * scale, (
        f"{model}: the reference gives {len(rows)} images one and the same logits (spread {spread:.2e} at "
        f"scale {scale:.2e}): the model's output ignores the image; {remedy}"
    )


def _second_protocol(ctx) -> str:
    """gRPC where the server has it (the Ascend npu_ge images are built without it)."""
    return "grpc" if ctx.server.grpc_url else "http"


def _bytes_tensor(items: list[bytes]) -> np.ndarray:
    return np.array([[b] for b in items], dtype=object)


def _classify(ctx, ensemble: str, images: list[bytes], protocol: str = "http", parameters=None) -> dict:
    return ctx.infer(
        ensemble,
        {"IMAGE_BYTES": _bytes_tensor(images)},
        ["LABELS", "PROBABILITIES", "CLASS_IDS"],
        protocol=protocol,
        parameters=parameters,
    )


def _assert_matches(model: str, image_name: str, ids, probs, labels=None) -> None:
    """Top-5 ids as the reference's (where two classes' reference logits tie within the logit
    tolerance, either order), probabilities within PROB_TOL, labels equal."""
    want = expected()["models"][model]["images"][image_name]
    got_ids = [int(i) for i in ids]
    reference, tie = expected_logits()[f"{model}/{image_name}"], LOGIT_RTOL * logit_scale(model)
    assert all(g == w or abs(reference[g] - reference[w]) <= tie for g, w in zip(got_ids, want["top5_ids"])), (
        f"{model} on {image_name}: top-5 {got_ids} != reference {want['top5_ids']} ({want['top5_labels']})"
    )
    diff = np.abs(np.asarray(probs, dtype=np.float64) - np.asarray(want["top5_probabilities"])).max()
    assert diff <= PROB_TOL, f"{model} on {image_name}: probabilities off by {diff:.2e} (> {PROB_TOL})"
    if labels is not None:
        got = [x.decode() if isinstance(x, bytes) else str(x) for x in labels]
        assert got == want["top5_labels"], f"{model} on {image_name}: labels {got} != {want['top5_labels']}"


# -- correctness -------------------------------------------------------------------------
def check_fixtures_have_served_weights(ctx):
    """The ONNX files being served carry the weights the fixtures were made with."""
    for model in CLASSIFIERS:
        _require_same_weights(ctx, model)


def check_resnet50_ensemble_matches_reference(ctx):
    """JPEG/PNG bytes -> classify_resnet50: top-5 equal to torch+torchvision, one request each."""
    _require_same_weights(ctx, "resnet50")
    for name, data in fixture_images().items():
        out = _classify(ctx, "classify_resnet50", [data])
        _assert_matches("resnet50", name, out["CLASS_IDS"][0], out["PROBABILITIES"][0], out["LABELS"][0])


def check_efficientnet_ensemble_matches_reference(ctx):
    """classify_efficientnet_lite0 (real ImageNet weights): all images in ONE request, bus.jpg is a bus."""
    if "efficientnet_lite0" not in CLASSIFIERS:
        import pytest

        pytest.skip("this copy serves no efficientnet_lite0")
    _require_same_weights(ctx, "efficientnet_lite0")
    images = fixture_images()
    out = _classify(ctx, "classify_efficientnet_lite0", list(images.values()), protocol=_second_protocol(ctx))
    for row, name in enumerate(images):
        _assert_matches(
            "efficientnet_lite0", name, out["CLASS_IDS"][row], out["PROBABILITIES"][row], out["LABELS"][row]
        )
    bus_row = list(images).index("bus.jpg")
    top1 = out["LABELS"][bus_row][0].decode()
    assert top1 in BUS_LIKE, f"bus.jpg classified as {top1!r}, expected one of {sorted(BUS_LIKE)}"


def check_bare_models_with_client_tensor(ctx):
    """The client preprocesses (batch of all images) and sends IMAGE to the bare model: logits match."""
    images = fixture_images()
    import io

    from PIL import Image

    for model, (_, transform) in CLASSIFIERS.items():
        _require_same_weights(ctx, model)
        batch = np.stack([transform(Image.open(io.BytesIO(d)).convert("RGB")) for d in images.values()])
        logits = ctx.infer(model, {"IMAGE": batch}, ["LOGITS"])["LOGITS"]
        assert logits.shape == (len(images), _classes(model)), f"{model}: LOGITS shape {logits.shape}"
        for row, name in enumerate(images):
            want, scale = expected_logits()[f"{model}/{name}"], logit_scale(model)
            err = float(np.abs(logits[row] - want).max())
            assert err <= LOGIT_RTOL * scale, f"{model} on {name}: logits differ by {err:.2e} (scale {scale:.2e})"
            ids, probs = top_k(logits[row], 5)
            _assert_matches(model, name, ids, probs)


def check_folded_models_equal_bare_models(ctx):
    """<model>_uint8 (the ensembles' step: uint8 pixels in, normalisation in the graph) gives the
    bare model's logits for the same images, from the same weights."""
    import io

    from PIL import Image

    from harness.tensors import make_inputs, result_arrays

    headers = dict(getattr(ctx.server, "admin_headers", None) or {}) or None
    images = [Image.open(io.BytesIO(d)).convert("RGB") for d in fixture_images().values()]
    for model, (_, transform) in CLASSIFIERS.items():
        repository = str(ctx.deployment.model_repository)
        folded = f"{model}_uint8"
        assert served_weights_sha256(repository, folded) == served_weights_sha256(repository, model), (
            f"{folded} was not folded from the served {model}: run `python export.py` again"
        )
        pixels = np.stack([transform.pixels(image) for image in images])
        assert pixels.dtype == np.uint8 and pixels.shape[1:] == (transform.crop, transform.crop, 3)
        client = ctx.http_client()
        try:
            got = result_arrays(client.infer(folded, make_inputs("http", {"PIXELS": pixels}), headers=headers), None)
        finally:
            client.close()
        want = ctx.infer(model, {"IMAGE": np.stack([transform(image) for image in images])}, ["LOGITS"])["LOGITS"]
        err, scale = float(np.abs(got["LOGITS"] - want).max()), float(np.abs(want).max())
        assert err <= 1e-5 * scale, f"{folded}: logits differ from {model} by {err:.2e} (scale {scale:.2e})"


def check_top_k_parameter(ctx):
    """Request parameter top_k: default 5, 1, 20, and out-of-range values are refused."""
    bus = fixture_images()["bus.jpg"]
    want = expected()["models"][MAIN]["images"]["bus.jpg"]
    ensemble, classes = CLASSIFIERS[MAIN][0], _classes(MAIN)
    default = _classify(ctx, ensemble, [bus])
    assert default["CLASS_IDS"].shape == (1, min(5, classes)), f"default top_k gave {default['CLASS_IDS'].shape}"
    one = _classify(ctx, ensemble, [bus], parameters={"top_k": 1})
    assert one["CLASS_IDS"].tolist() == [want["top5_ids"][:1]], one["CLASS_IDS"]
    many = _classify(ctx, ensemble, [bus], protocol=_second_protocol(ctx), parameters={"top_k": min(20, classes)})
    assert many["CLASS_IDS"].shape == (1, min(20, classes)) and many["CLASS_IDS"][0, :5].tolist() == want["top5_ids"]
    assert np.all(np.diff(many["PROBABILITIES"][0]) <= 0), "probabilities are not sorted"
    for bad in (0, classes + 1, "five"):
        ctx.expect_error(ensemble, {"IMAGE_BYTES": _bytes_tensor([bus])}, "top_k", parameters={"top_k": bad})
    ctx.assert_healthy()


# -- bad input ---------------------------------------------------------------------------
def check_bad_images_are_refused(ctx):
    """Empty, truncated, non-image and decompression-bomb inputs: a clear error each, server fine."""
    jpeg = fixture_images()["bus.jpg"]
    cases = {
        "empty": (b"", ("empty",)),
        "truncated": (jpeg[: len(jpeg) // 3], ("cannot decode", "truncated")),
        "not an image": (b"this is plain text, not a picture" * 4, ("cannot decode", "not a known image")),
        "bomb": (png_header_bomb(), ("over the limit",)),
    }
    for ensemble, _ in CLASSIFIERS.values():
        for label, (data, fragments) in cases.items():
            message = ctx.expect_error(ensemble, {"IMAGE_BYTES": _bytes_tensor([data])}, *fragments)
            assert "internal error" not in message, f"{label}: reported as an internal error: {message}"
    # an empty tensor (zero items) is refused before any model runs
    ctx.expect_error("classify_resnet50", {"IMAGE_BYTES": np.empty((0, 1), dtype=object)}, "empty", "elements", "shape")
    ctx.assert_healthy()
    _assert_ok(ctx)


def check_bare_model_wrong_dtype_and_shape(ctx):
    """The bare model refuses FP64, INT32, a wrong image size and a wrong rank; server fine."""
    for model, (_, transform) in CLASSIFIERS.items():
        side = transform.crop
        good = np.zeros((1, 3, side, side), np.float32)
        for tensor in (
            good.astype(np.float64),
            good.astype(np.int32),
            np.zeros((1, 3, 100, 100), np.float32),
            np.zeros((1, side, side, 3), np.float32),
            np.zeros((3, side, side), np.float32),
        ):
            ctx.expect_error(
                model, {"IMAGE": tensor}, "data-type", "datatype", "shape", "dims", "expected", outputs=["LOGITS"]
            )
    ctx.assert_healthy()
    _assert_ok(ctx)


def check_mixed_good_and_bad_requests(ctx):
    """Good and bad requests sent together (dynamically batched): only the bad ones fail."""
    import tritonclient.http as httpclient

    images = fixture_images()
    bad = {"empty": b"", "text": b"no image here", "bomb": png_header_bomb()}
    plan = [("good", n, d) for n, d in images.items()] + [("bad", n, d) for n, d in bad.items()]
    plan = plan[::2] + plan[1::2]  # interleave
    client = httpclient.InferenceServerClient(ctx.server.http_url, concurrency=len(plan))
    try:
        pending = []
        for kind, name, data in plan:
            arr = _bytes_tensor([data])
            tensor = httpclient.InferInput("IMAGE_BYTES", arr.shape, "BYTES")
            tensor.set_data_from_numpy(arr)
            pending.append((kind, name, client.async_infer("classify_resnet50", [tensor])))
        for kind, name, request in pending:
            if kind == "good":
                result = request.get_result()
                _assert_matches("resnet50", name, result.as_numpy("CLASS_IDS")[0], result.as_numpy("PROBABILITIES")[0])
            else:
                try:
                    request.get_result()
                except InferenceServerException:
                    continue
                raise AssertionError(f"bad input {name!r} was answered with a result")
    finally:
        client.close()
    # one request holding a good and a bad image fails as a whole and names the bad item
    message = ctx.expect_error(
        "classify_resnet50", {"IMAGE_BYTES": _bytes_tensor([images["bus.jpg"], b"junk"])}, "IMAGE_BYTES[1]"
    )
    assert "cannot decode" in message, message
    ctx.assert_healthy()
    _assert_ok(ctx)


def _assert_ok(ctx) -> None:
    """A good request still gets the reference answer."""
    out = _classify(ctx, CLASSIFIERS[MAIN][0], [fixture_images()["bus.jpg"]])
    _assert_matches(MAIN, "bus.jpg", out["CLASS_IDS"][0], out["PROBABILITIES"][0])


# -- benchmark workloads -----------------------------------------------------------------
def _bus_tensor(model: str, batch: int) -> np.ndarray:
    import io

    from PIL import Image

    image = Image.open(io.BytesIO(fixture_images()["bus.jpg"])).convert("RGB")
    return np.repeat(CLASSIFIERS[model][1](image)[None], batch, axis=0)


def _tensor_workload(model: str, batch: int):
    from harness.measuring.loadgen import Workload

    return Workload(
        model=model,
        inputs={"IMAGE": _bus_tensor(model, batch)},
        outputs=["LOGITS"],
        items_per_request=batch,
        variant=f"{model} tensor b{batch}",
    )


def workload_resnet50_b1(ctx):
    """Bare ResNet-50, one client-made [1,3,224,224] tensor per request."""
    return _tensor_workload("resnet50", 1)


def workload_resnet50_b8(ctx):
    """Bare ResNet-50, [8,3,224,224] per request (8 images)."""
    return _tensor_workload("resnet50", 8)


def workload_efficientnet_lite0_b1(ctx):
    """Bare EfficientNet-Lite0, [1,3,224,224] per request."""
    return _tensor_workload("efficientnet_lite0", 1)


def _jpeg_workload(ensemble: str):
    from harness.measuring.loadgen import Workload

    return Workload(
        model=ensemble,
        inputs={"IMAGE_BYTES": _bytes_tensor([fixture_images()["bus.jpg"]])},
        outputs=["LABELS", "PROBABILITIES", "CLASS_IDS"],
        variant=f"{ensemble} jpeg",
    )


def workload_classify_resnet50_jpeg(ctx):
    """Ensemble: the client sends bus.jpg as it is (~137 kB) and gets top-5 back."""
    return _jpeg_workload("classify_resnet50")


def workload_classify_efficientnet_lite0_jpeg(ctx):
    """Ensemble with EfficientNet-Lite0: bus.jpg bytes in, top-5 out."""
    return _jpeg_workload("classify_efficientnet_lite0")


def workload_resnet50_client_preprocess(ctx):
    """The 'before' path: the client decodes/resizes bus.jpg itself and sends the tensor (~600 kB)."""
    import io

    from PIL import Image

    from harness.measuring.loadgen import Workload

    data = fixture_images()["bus.jpg"]
    transform = CLASSIFIERS["resnet50"][1]

    def prepare():
        return {"IMAGE": transform(Image.open(io.BytesIO(data)).convert("RGB"))[None]}

    def finish(outputs):
        return top_k(outputs["LOGITS"][0], 5)

    return Workload(
        model="resnet50", prepare=prepare, finish=finish, outputs=["LOGITS"], variant="resnet50 client-preprocess"
    )


def workload_efficientnet_lite0_b8(ctx):
    """Bare EfficientNet-Lite0, [8,3,224,224] per request (8 images)."""
    return _tensor_workload("efficientnet_lite0", 8)
