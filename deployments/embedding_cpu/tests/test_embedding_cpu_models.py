"""The embedding_cpu models' own code without a server: each request of a batch is answered on
its own (bad input -> INVALID_ARG for that request, the others get their tensors), as the
checks prove on a real tritonserver."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from embedding_cpu_processing.text_embedding import EmbeddingModelInfo, tokenize

from harness.fixtures import read_fixture
from harness.testing.python_models import Request, TritonError, load_model, model_config

REPOSITORY = Path(__file__).resolve().parents[1] / "model_repository"


def _model(name: str, config: dict):
    model = load_model(REPOSITORY / name / "1" / "model.py").TritonPythonModel()
    model.initialize({"model_config": json.dumps(config), "model_repository": str(REPOSITORY / name)})
    return model


def _text(*items: bytes) -> Request:
    return Request({"TEXT": np.array([[item] for item in items], dtype=object)})


def test_tokenize_answers_each_request_and_refuses_bad_text_with_invalid_arg():
    config = model_config(
        [("TEXT", "TYPE_STRING", [1])],
        [("input_ids", "TYPE_INT64", [-1]), ("attention_mask", "TYPE_INT64", [-1])],
        {"max_text_bytes": 64},
    )
    model = _model("tokenize", config)
    good, long_one = _text(b"A sentence.", "另一句话".encode()), _text(b"y" * 65)
    responses = model.execute([good, _text(b"caf\xe9"), long_one, _text(b"last one")])
    assert [r.has_error() for r in responses] == [False, True, True, False]
    assert responses[1].error().code() == TritonError.INVALID_ARG and "UTF-8" in responses[1].error().message()
    assert "over the limit of 64" in responses[2].error().message()
    want = tokenize(["A sentence.", "另一句话", "last one"])
    ids = responses[0].output("input_ids")
    assert ids.dtype == np.int64 and ids.tolist() == want["input_ids"][:2, : ids.shape[1]].tolist()
    assert responses[3].output("attention_mask").sum() == want["attention_mask"][2].sum()


def test_pool_embedding_fails_only_the_request_that_breaks():
    dimension = EmbeddingModelInfo.read().dimension
    config = model_config(
        [("last_hidden_state", "TYPE_FP32", [-1, dimension]), ("attention_mask", "TYPE_INT64", [-1])],
        [("EMBEDDING", "TYPE_FP32", [dimension])],
    )
    model = _model("pool_embedding", config)
    hidden = np.random.default_rng(0).standard_normal((2, 5, dimension)).astype(np.float32)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=np.int64)
    good = Request({"last_hidden_state": hidden, "attention_mask": mask})
    broken = Request({"last_hidden_state": hidden, "attention_mask": mask[:, :3]})
    responses = model.execute([good, broken])
    assert not responses[0].has_error() and responses[1].has_error()
    assert responses[1].error().code() == TritonError.INTERNAL
    np.testing.assert_allclose(
        responses[0].output("EMBEDDING"), EmbeddingModelInfo.read().pool(hidden, mask), rtol=1e-6
    )


@pytest.mark.parametrize(
    "parameters, fragment",
    [({"chunk_tokens": 4}, "between 8 and"), ({"aggregation": "max"}, "aggregation must be"), ({"x": 1}, "unknown")],
)
def test_document_requests_refuse_bad_parameters_per_request(parameters, fragment):
    from embedding_cpu_processing.document_requests import parse_requests
    from embedding_cpu_processing.documents import DocumentLimits

    from harness.testing import python_models

    tokenizer_file = str(EmbeddingModelInfo.read().model_dir / "tokenizer.json")
    files = np.array([[b"A short document. It has two sentences."]], dtype=object)
    jobs = parse_requests(
        python_models.stand_in(),
        [Request({"RAW_FILE": files}, parameters), Request({"RAW_FILE": files})],
        limits=DocumentLimits(),
        tokenizer_file=tokenizer_file,
        default_chunk_tokens=254,
        max_chunk_tokens=254,
    )
    assert fragment in jobs[0].error and not jobs[0].server_error
    assert jobs[1].error is None and jobs[1].chunks_per_file == [["A short document. It has two sentences."]]


def test_nncf_calibration_sentences_are_fixed_and_never_a_fixture_sentence():
    from harness.deployments import load_module

    quantize = load_module(REPOSITORY.parent / "quantize_openvino.py", "embedding_cpu_quantize_openvino")
    fixture = read_fixture(REPOSITORY.parent / "fixtures" / "expected_embeddings.json")
    sentences = quantize.calibration_sentences(300, set(fixture["sentences"]))
    assert len(sentences) == len(set(sentences)) == 300
    assert not set(sentences) & set(fixture["sentences"])
    assert sentences == quantize.calibration_sentences(300, set(fixture["sentences"])), "the same set every run"
