"""Correctness, bad-input and benchmark workloads for cn_clip (run by the harness).

Expected values come from fixtures/ (make_fixtures.py: the cn_clip torch model), never from
the deployment itself. With the seeded weights, embeddings of different inputs are already
~0.98-0.99 cosine-similar, so besides cosine >= 0.999 the embedding checks require a max
absolute difference <= 1e-4 per component (onnxruntime and torch agree to ~1e-7).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import numpy as np
from tritonclient.utils import InferenceServerException

from harness import provenance
from harness.deployments import load_module
from harness.measuring.engines import cpu_session

HERE = Path(__file__).resolve().parent
REGENERATE = "python deployments/cn_clip/export.py && python deployments/cn_clip/make_fixtures.py"
COSINE_MIN = 0.999
EMBEDDING_ATOL = 1e-4
PROBABILITY_ATOL = 1e-3
PIXEL_ATOL = 1e-5


@cache
def _reference(fixtures: str) -> dict:
    return json.loads((Path(fixtures) / "reference.json").read_text())


@cache
def _embeddings(fixtures: str) -> dict:
    with np.load(Path(fixtures) / "reference.npz") as data:
        return {key: data[key] for key in data.files}


def _ref(ctx) -> dict:
    return _reference(str(ctx.deployment.fixtures_path))


def _image_bytes(ctx, entry: dict) -> bytes:
    return (ctx.deployment.fixtures_path / entry["file"]).read_bytes()


def _bytes_column(items) -> np.ndarray:
    return np.array([[item if isinstance(item, bytes) else item.encode("utf-8")] for item in items], dtype=np.object_)


def _infer_internal(ctx, model: str, inputs: dict) -> dict:
    """One HTTP inference on an internal ensemble step (``gate_internal``): the front gate lets it
    through only with the server's admin header (servers without a gate have none and need none)."""
    from harness.tensors import make_inputs, result_arrays

    headers = dict(getattr(ctx.server, "admin_headers", None) or {})
    client = ctx.http_client()
    try:
        return result_arrays(client.infer(model, make_inputs("http", inputs), headers=headers or None), None)
    finally:
        client.close()


def _beside_model(ctx, model: str, module: str):
    """A module of a model's version folder (``tokenize/1/cn_clip_tokenizer.py``), imported by path."""
    return load_module(
        ctx.deployment.model_repository / model / "1" / f"{module}.py", f"{ctx.deployment.name}_{module}"
    )


def _compare_embeddings(got: np.ndarray, want: np.ndarray, what: list[str]) -> None:
    cosine = np.sum(got * want, axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    diff = np.abs(got - want).max(axis=1)
    for i, name in enumerate(what):
        assert cosine[i] >= COSINE_MIN, f"{name}: cosine {cosine[i]:.6f} < {COSINE_MIN}"
        assert diff[i] <= EMBEDDING_ATOL, f"{name}: max |served - reference| = {diff[i]:.2e} > {EMBEDDING_ATOL}"


# --- checks -------------------------------------------------------------------------------


def check_fixtures_match_exported_weights(ctx):
    """The ONNX towers and zero_shot's logit_scale belong to the weights the fixtures were made with."""
    ref = _ref(ctx)
    repo = ctx.deployment.model_repository
    for tower in ("image_encoder", "text_encoder"):
        provenance.assert_served_weights(ctx, tower, provenance.fixtures_identity(ref, tower))
    config = (repo / "zero_shot" / "config.pbtxt").read_text()
    assert f'string_value: "{ref["logit_scale"]:.6f}"' in config, (
        f"zero_shot/config.pbtxt logit_scale is not the fixtures' {ref['logit_scale']:.6f}; run {REGENERATE}"
    )


def check_token_ids_match_cn_clip(ctx):
    """tokenize gives exactly cn_clip.clip.tokenize's ids (Chinese, English, mixed, emoji, over-long)."""
    texts = [t for t in _ref(ctx)["texts"] if t["text"].strip()]  # "" is refused: see check_bad_text
    got = _infer_internal(ctx, "tokenize", {"TEXT": _bytes_column(t["text"] for t in texts)})["INPUT_IDS"]
    for row, entry in zip(got, texts):
        assert row.tolist() == entry["token_ids"], (
            f"token ids differ for {entry['text'][:40]!r}:\n{row.tolist()}\n{entry['token_ids']}"
        )


def check_preprocessing_matches_cn_clip_transform(ctx):
    """preprocess_image gives cn_clip's image_transform tensor for JPEG, PNG, greyscale and WebP."""
    for entry in _ref(ctx)["images"]:
        want = entry["pixels"]
        got = _infer_internal(ctx, "preprocess_image", {"IMAGE_BYTES": _bytes_column([_image_bytes(ctx, entry)])})[
            "PIXEL_VALUES"
        ][0]
        assert list(got.shape) == want["shape"], f"{entry['file']}: shape {got.shape} != {want['shape']}"
        flat = got.astype(np.float64).reshape(-1)
        samples = flat[np.array(want["sample_index"])]
        err = float(np.abs(samples - np.array(want["sample_values"])).max())
        assert err <= PIXEL_ATOL, f"{entry['file']}: sampled pixels differ from cn_clip's transform by {err:.2e}"
        for key, value in (("sum", flat.sum()), ("abs_sum", np.abs(flat).sum()), ("sq_sum", (flat**2).sum())):
            assert abs(value - want[key]) <= 1e-4 * max(1.0, abs(want[key])), (
                f"{entry['file']}: {key} {value} != {want[key]}"
            )


def check_internal_steps_refused_to_clients(ctx):
    """Behind the front gate, tokenize and preprocess_image (gate_internal) answer 403 without the
    admin header; the entry models stay open."""
    if not getattr(ctx.server, "admin_headers", None):
        return  # no gate in front of this server (external URL): nothing refuses them
    for model, inputs in (
        ("tokenize", {"TEXT": _bytes_column(["猫"])}),
        ("preprocess_image", {"IMAGE_BYTES": _bytes_column([b"x"])}),
    ):
        try:
            ctx.infer(model, inputs)
        except InferenceServerException as exc:
            assert "internal" in str(exc) and exc.status() in ("403", "StatusCode.PERMISSION_DENIED"), str(exc)
        else:
            raise AssertionError(f"{model} answered a client without the admin header")
    assert ctx.infer("text_embedding", {"TEXT": _bytes_column(["猫"])})["EMBEDDING"].shape == (1, 1024)


def check_image_embeddings(ctx):
    """image_embedding (ensemble, one batch of all fixture images) matches the torch reference."""
    images = _ref(ctx)["images"]
    got = ctx.infer("image_embedding", {"IMAGE_BYTES": _bytes_column([_image_bytes(ctx, e) for e in images])})[
        "EMBEDDING"
    ]
    _compare_embeddings(
        got, _embeddings(str(ctx.deployment.fixtures_path))["image_embeddings"], [e["file"] for e in images]
    )
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5), "image embeddings are not L2-normalised"


def check_text_embeddings_http_and_grpc(ctx):
    """text_embedding matches the torch reference, over HTTP and gRPC."""
    texts = _ref(ctx)["texts"]
    keep = [i for i, t in enumerate(texts) if t["text"].strip()]
    want = _embeddings(str(ctx.deployment.fixtures_path))["text_embeddings"][keep]
    names = [texts[i]["text"][:30] for i in keep]
    for protocol in ("http", "grpc"):
        got = ctx.infer("text_embedding", {"TEXT": _bytes_column(texts[i]["text"] for i in keep)}, protocol=protocol)[
            "EMBEDDING"
        ]
        _compare_embeddings(got, want, names)


def check_zero_shot_probabilities(ctx):
    """zero_shot (BLS) gives the reference's softmax(logit_scale * image . labels) within 1e-3."""
    ref = _ref(ctx)
    labels = ref["zero_shot"]["labels"]
    for entry in ref["images"]:
        name = entry["file"].split("/")[-1]
        want = np.array(ref["zero_shot"]["probabilities"][name])
        got = ctx.infer(
            "zero_shot",
            {
                "IMAGE_BYTES": np.array([_image_bytes(ctx, entry)], dtype=np.object_),
                "LABELS": np.array([l.encode() for l in labels], dtype=np.object_),
            },
        )["PROBABILITIES"]
        assert got.shape == want.shape, f"{name}: {got.shape} probabilities for {len(labels)} labels"
        err = float(np.abs(got - want).max())
        assert err <= PROBABILITY_ATOL, f"{name}: probabilities differ by {err:.2e}\n{got}\n{want}"


def check_bad_image(ctx):
    """Undecodable, empty and truncated images get clear errors; the server stays healthy."""
    scene = (ctx.deployment.fixtures_path / "images" / "scene.jpg").read_bytes()
    for data in (b"this is not an image", b"", scene[: len(scene) // 3]):
        ctx.expect_error(
            "image_embedding",
            {"IMAGE_BYTES": _bytes_column([data])},
            "cannot decode",
            "empty",
            "truncated",
            "image",
        )
    ctx.expect_error(
        "zero_shot",
        {
            "IMAGE_BYTES": np.array([b"\x89PNG broken"], dtype=np.object_),
            "LABELS": np.array([b"cat"], dtype=np.object_),
        },
        "cannot decode",
    )
    ctx.assert_healthy()


def check_bad_text(ctx):
    """Empty text, 1 MB text and non-UTF-8 bytes get clear errors, on text_embedding and zero_shot."""
    cases = [
        (b"", "empty"),
        (b" \t\n", "empty"),
        ("长".encode() * 350_000, "over the limit"),
        (b"caf\xe9 \xff\xfe", "not valid utf-8"),
    ]
    for data, fragment in cases:
        ctx.expect_error("text_embedding", {"TEXT": _bytes_column([data])}, fragment)
    scene = (ctx.deployment.fixtures_path / "images" / "scene.jpg").read_bytes()
    ctx.expect_error(
        "zero_shot",
        {"IMAGE_BYTES": np.array([scene], dtype=np.object_), "LABELS": np.array([b"cat", b"\xff"], dtype=np.object_)},
        "not valid utf-8",
    )
    ctx.assert_healthy()


def check_bad_labels(ctx):
    """zero_shot refuses no labels and more than max_labels labels with a 400 that says so."""
    scene = np.array([(ctx.deployment.fixtures_path / "images" / "scene.jpg").read_bytes()], dtype=np.object_)
    ctx.expect_error("zero_shot", {"IMAGE_BYTES": scene, "LABELS": np.array([], dtype=np.object_)}, "empty")
    many = np.array([b"cat"] * 100_000, dtype=np.object_)
    ctx.expect_error("zero_shot", {"IMAGE_BYTES": scene, "LABELS": many}, "over the limit")
    ctx.assert_healthy()


def check_good_requests_answered_beside_bad_ones(ctx):
    """Concurrent good and bad requests (sharing dynamic batches): every good one is answered correctly."""
    ref = _ref(ctx)
    want = _embeddings(str(ctx.deployment.fixtures_path))["text_embeddings"][0]
    good = ref["texts"][0]["text"].encode()
    payloads = [good if i % 2 == 0 else (b"\xff\xfe" if i % 4 == 1 else b"") for i in range(16)]

    def send(data):
        try:
            return ctx.infer("text_embedding", {"TEXT": _bytes_column([data])})["EMBEDDING"][0]
        except InferenceServerException as exc:
            return exc

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(send, payloads))
    for data, result in zip(payloads, results):
        if data == good:
            assert not isinstance(result, Exception), f"good request failed beside bad ones: {result}"
            assert float(np.abs(result - want).max()) <= EMBEDDING_ATOL, "good request got a wrong embedding"
        else:
            assert isinstance(result, Exception), f"bad request {data!r} was answered"
    ctx.assert_healthy()


# --- benchmark workloads --------------------------------------------------------------------


@cache
def _session(path: str):
    return cpu_session(path, threads=2)


def _text_ceiling(ctx, text: str):
    """The same work in this process: cn_clip tokenization + onnxruntime text tower, one batch."""

    def make(batch: int):
        session = _session(str(ctx.deployment.model_repository / "text_encoder" / "1" / "model.onnx"))
        tokenizer = _beside_model(ctx, "tokenize", "cn_clip_tokenizer").CnClipTokenizer()
        return lambda: session.run(None, {"INPUT_IDS": tokenizer.encode_checked([text] * batch)})

    return make


def _image_ceiling(ctx, data: bytes):
    """The same work in this process: decode + cn_clip transform + onnxruntime image tower, one batch."""

    def make(batch: int):
        preprocess_image = _beside_model(ctx, "preprocess_image", "cn_clip_transform").preprocess_image
        session = _session(str(ctx.deployment.model_repository / "image_encoder" / "1" / "model.onnx"))
        return lambda: session.run(None, {"PIXEL_VALUES": np.stack([preprocess_image(data) for _ in range(batch)])})

    return make


def _workload(**kwargs):
    from harness.measuring.loadgen import Workload

    return Workload(**kwargs)


def _embedding_workload(model: str, input_name: str, value, ceiling):
    """The same ``value`` (bytes or text) as ``input_name`` of every request -> ``model``'s EMBEDDING."""
    return _workload(model=model, inputs={input_name: _bytes_column([value])}, outputs=["EMBEDDING"], ceiling=ceiling)


def workload_image_embedding(ctx):
    """One JPEG (320x240, 7 kB) per request -> image embedding (ensemble: decode+transform, RN50)."""
    data = (ctx.deployment.fixtures_path / "images" / "scene.jpg").read_bytes()
    return _embedding_workload("image_embedding", "IMAGE_BYTES", data, _image_ceiling(ctx, data))


def workload_text_embedding(ctx):
    """One short Chinese sentence per request -> text embedding (ensemble: tokenize, RBT3)."""
    text = "一只狗在草地上奔跑"
    return _embedding_workload("text_embedding", "TEXT", text, _text_ceiling(ctx, text))


def workload_zero_shot(ctx):
    """One JPEG + 6 labels per request -> probabilities (BLS: image and text ensembles)."""
    ref = _ref(ctx)
    data = (ctx.deployment.fixtures_path / "images" / "scene.jpg").read_bytes()
    labels = np.array([l.encode() for l in ref["zero_shot"]["labels"]], dtype=np.object_)
    return _workload(
        model="zero_shot",
        inputs={"IMAGE_BYTES": np.array([data], dtype=np.object_), "LABELS": labels},
        outputs=["PROBABILITIES"],
    )
