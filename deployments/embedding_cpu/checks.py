"""embedding_cpu checks (correctness against sentence-transformers, bad input) and workloads."""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from tritonclient.utils import InferenceServerException

from harness.deployments import load_module
from harness.loadgen import Workload
from triton_helpers.text_embedding import default_model_dir, tokenize

HERE = Path(__file__).resolve().parent
client = load_module(HERE / "client.py", "embedding_cpu_client")
REGENERATE = "python deployments/embedding_cpu/make_fixtures.py"
SHORT_SENTENCES = [
    "Triton batches requests on the server.",
    "A quick sentence about the weather today.",
    "How many instances should a CPU model run?",
    "今天的会议改到下午三点。",
    "Embeddings map text to vectors.",
    "The cat sat on the mat.",
    "Throughput grows with the batch size.",
    "Short text.",
]


def _fixture() -> dict:
    fixture = json.loads((HERE / "fixtures" / "expected_embeddings.json").read_text())
    weights = default_model_dir() / fixture["weights_file"]
    actual = hashlib.sha256(weights.read_bytes()).hexdigest()
    assert actual == fixture["weights_sha256"], (
        f"fixtures were made with weights {fixture['weights_sha256'][:12]}, installed are {actual[:12]}: "
        f"regenerate them with `{REGENERATE}`"
    )
    return fixture


def _cosines(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    actual = actual / np.linalg.norm(actual, axis=1, keepdims=True)
    expected = expected / np.linalg.norm(expected, axis=1, keepdims=True)
    return (actual * expected).sum(axis=1)


def _assert_close(name: str, sentences: list[str], actual: np.ndarray, expected: np.ndarray, minimum: float):
    assert actual.shape == expected.shape, f"{name}: shape {actual.shape}, expected {expected.shape}"
    cosines = _cosines(actual, expected)
    worst = int(np.argmin(cosines))
    assert cosines.min() >= minimum, (
        f"{name}: cosine {cosines[worst]:.6f} < {minimum} for {sentences[worst][:60]!r}"
    )


def check_embedding_py_matches_reference(ctx):
    fixture = _fixture()
    for protocol in ("http", "grpc"):
        with client.connect(ctx.server.http_url if protocol == "http" else ctx.server.grpc_url, protocol) as c:
            actual = client.embed_py(c, fixture["sentences"])
        _assert_close(f"embedding_py/{protocol}", fixture["sentences"], actual,
                      np.asarray(fixture["embeddings"], np.float32), 0.9999)


def check_embedding_onnx_matches_reference(ctx):
    fixture = _fixture()
    for protocol in ("http", "grpc"):
        with client.connect(ctx.server.http_url if protocol == "http" else ctx.server.grpc_url, protocol) as c:
            actual = client.embed_onnx(c, fixture["sentences"])
        _assert_close(f"embedding_onnx/{protocol}", fixture["sentences"], actual,
                      np.asarray(fixture["embeddings"], np.float32), 0.999)


def check_one_sentence_per_request_equals_batch(ctx):
    fixture = _fixture()
    expected = np.asarray(fixture["embeddings"], np.float32)
    with client.connect(ctx.server.http_url, "http") as c:
        singles = np.concatenate([client.embed_py(c, [s]) for s in fixture["sentences"]])
    _assert_close("embedding_py one per request", fixture["sentences"], singles, expected, 0.9999)


def _expect_error(ctx, model, inputs, *fragments):
    try:
        ctx.infer(model, inputs)
    except InferenceServerException as exc:
        message = str(exc)
        assert any(f.lower() in message.lower() for f in fragments), f"{model}: unclear error {message!r}"
        return message
    raise AssertionError(f"{model} accepted bad input {list(inputs)}")


def check_bad_input_is_rejected_clearly(ctx):
    _expect_error(ctx, "embedding_py", {"TEXT": np.ones((1, 1), np.float32)}, "data-type", "datatype", "expected")
    _expect_error(ctx, "embedding_py", {"TEXT": np.array([b"a", b"b"], dtype=object)}, "shape")
    _expect_error(ctx, "embedding_py", {"TEXT": np.array([[b"\xff\xfe bad"]], dtype=object)}, "UTF-8")
    _expect_error(ctx, "embedding_py", {"WRONG": np.array([[b"x"]], dtype=object)}, "unexpected inference input",
                  "expected", "TEXT")
    _expect_error(ctx, "embedding_py", {"TEXT": np.array([[b"x" * (1 << 20 + 1)]], dtype=object)}, "limit")
    _expect_error(ctx, "embedding_onnx", {"input_ids": np.ones((1, 4), np.float32),
                                          "attention_mask": np.ones((1, 4), np.int64)}, "data-type", "datatype")
    _expect_error(ctx, "embedding_onnx", {"input_ids": np.ones((1, 4), np.int64)}, "attention_mask", "expected")
    ctx.assert_healthy()


def check_bad_request_does_not_break_its_batch(ctx):
    good = [[s.encode()] for s in SHORT_SENTENCES]
    bad = [[b"\xc3\x28 invalid"]]
    jobs = [("good", np.array([g], dtype=object)) for g in good] + [("bad", np.array(bad, dtype=object))] * 4

    def send(job):
        kind, array = job
        try:
            return kind, ctx.infer("embedding_py", {"TEXT": array})["EMBEDDING"]
        except InferenceServerException as exc:
            return kind, exc

    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        outcomes = list(pool.map(send, jobs))
    for kind, outcome in outcomes:
        if kind == "good":
            assert isinstance(outcome, np.ndarray) and outcome.shape == (1, 384), f"good request failed: {outcome}"
        else:
            assert isinstance(outcome, InferenceServerException) and "UTF-8" in str(outcome), outcome
    ctx.assert_healthy()


def _texts(batch: int) -> np.ndarray:
    return np.array([[SHORT_SENTENCES[i % len(SHORT_SENTENCES)].encode()] for i in range(batch)], dtype=object)


def workload_embedding_py_sentence(ctx) -> Workload:
    return Workload(model="embedding_py", inputs={"TEXT": _texts(1)}, outputs=["EMBEDDING"],
                    variant="embedding_py (sentence-transformers, python backend)")


def workload_embedding_onnx_sentence(ctx) -> Workload:
    """Client tokenizes every request and pools the result: its time is in the latency."""
    from triton_helpers.text_embedding import EmbeddingModelInfo, pool

    normalize = EmbeddingModelInfo.read().normalize
    state = {"i": 0}

    def prepare():
        state["i"] += 1
        text = SHORT_SENTENCES[state["i"] % len(SHORT_SENTENCES)]
        tokens = tokenize([text])
        return tokens

    def finish(outputs):
        pool(outputs["last_hidden_state"], np.ones(outputs["last_hidden_state"].shape[:2], np.int64), normalize)

    return Workload(model="embedding_onnx", prepare=prepare, finish=finish, outputs=["last_hidden_state"],
                    variant="embedding_onnx fp32 (client tokenizes + pools)")
