"""Hostile text and documents, generated: request texts (UTF-8 checks), the CN-CLIP and sentence
tokenizers, document extraction and chunking, and request parameters end in a result or a clear
``InputError`` within the time bound; client bytes never name a file."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
from embedding_cpu_processing import documents
from hypothesis import given
from hypothesis import strategies as st

from harness import PROJECT_ROOT
from harness.testing.python_models import Request, load_model
from harness.tests.fuzz_tally import FUZZ, attempt, write_tally  # noqa: F401 - write_tally: autouse fixture
from harness.tests.hostile_inputs import hostile_documents, hostile_text_bytes, json_values, small_pdf
from triton_helpers import images
from triton_helpers.errors import InputError, decode_utf8, single_bytes_items, utf8_texts


@pytest.mark.timeout(300)
@FUZZ
@given(items=st.lists(hostile_text_bytes, max_size=4), limit=st.sampled_from([16, 1024, 1 << 20]))
def test_utf8_request_texts(items, limit):
    array = np.array([[i] for i in items], dtype=object).reshape(-1, 1) if items else np.zeros((0, 1), object)
    texts = attempt("errors.utf8_texts", utf8_texts, array, "TEXT", limit)
    if not isinstance(texts, InputError):
        assert len(texts) == len(items) and all(len(t.encode()) <= limit for t in texts)
    for item in items[:1]:
        attempt("errors.decode_utf8", decode_utf8, item, "TEXT")
        attempt("errors.single_bytes_items", single_bytes_items, np.array([item], dtype=object), "TEXT")


@pytest.mark.timeout(300)
@FUZZ
@given(data=hostile_text_bytes)
def test_cn_clip_tokenizer(data):
    tokenizer = _cn_clip_tokenizer()
    texts = attempt("errors.utf8_texts", utf8_texts, np.array([[data]], dtype=object), "TEXT", 16384)
    if isinstance(texts, InputError):
        return
    ids = attempt("cn_clip.CnClipTokenizer.encode_checked", tokenizer.encode_checked, texts)
    if not isinstance(ids, InputError):
        assert ids.shape == (1, 52) and ids[0, 0] == tokenizer.cls_id


@lru_cache(maxsize=1)
def _cn_clip_tokenizer():
    pytest.importorskip("cn_clip")
    from harness import PROJECT_ROOT
    from harness.deployments import load_module

    path = PROJECT_ROOT / "deployments/cn_clip/model_repository/tokenize/1/cn_clip_tokenizer.py"
    return load_module(path, "cn_clip_tokenize_cn_clip_tokenizer").CnClipTokenizer()


@pytest.mark.timeout(300)
@FUZZ
@given(data=hostile_text_bytes)
def test_sentence_tokenizer(data):
    from embedding_cpu_processing.text_embedding import tokenize

    texts = attempt("errors.utf8_texts", utf8_texts, np.array([[data]], dtype=object), "TEXT", 1 << 20)
    if isinstance(texts, InputError):
        return
    tokens = attempt("text_embedding.tokenize", tokenize, texts)
    assert tokens["input_ids"].shape[1] <= 256  # truncated to the model's max_seq_length


@pytest.mark.timeout(300)
@FUZZ
@given(data=hostile_documents(), chunk_tokens=st.sampled_from([8, 64, 254]))
def test_document_extract_and_chunk(data, chunk_tokens):
    from embedding_cpu_processing.text_embedding import default_model_dir

    limits = documents.DocumentLimits(max_file_bytes=4 << 20, max_pdf_pages=100, max_chunks=256)
    text = attempt("documents.extract_text", documents.extract_text, data, limits)
    if isinstance(text, InputError):
        return
    assert isinstance(text, str) and text.strip()
    tokenizer_file = str(default_model_dir() / "tokenizer.json")
    chunks = attempt(
        "documents.chunk_text", documents.chunk_text, text, tokenizer_file, chunk_tokens, limits.max_chunks
    )
    if not isinstance(chunks, InputError):
        assert 1 <= len(chunks) <= limits.max_chunks


@pytest.mark.timeout(120)
@FUZZ
@given(
    parameters=st.dictionaries(st.sampled_from(["chunk_tokens", "aggregation", "top_k", "x"]), json_values, max_size=3)
)
def test_request_parameters(parameters):
    attempt(
        "documents.PipelineOptions.from_parameters", documents.PipelineOptions.from_parameters, parameters, 254, 254
    )
    postprocess = _classification_postprocess()
    attempt("classification_postprocess.requested_k", postprocess.requested_k, Request({}, parameters), 1000)


@lru_cache(maxsize=1)
def _classification_postprocess():
    """resnet_npu's postprocess model (its top_k parameter parsing), without a stub around it."""
    path = PROJECT_ROOT / "deployments/resnet_npu/model_repository/classification_postprocess/1/model.py"
    model = load_model(path).TritonPythonModel()
    model.default_top_k = 5
    return model


def test_pdf_with_a_corrupt_page_tree_is_an_input_error():
    with pytest.raises(InputError):
        documents.extract_text(small_pdf().replace(b"/Count 2", b"/Count 9"))


@lru_cache(maxsize=1)
def _yolo_preprocess():
    return load_model(PROJECT_ROOT / "deployments/yolo11_ensemble/model_repository/preprocess/1/model.py")


def test_client_bytes_never_name_a_file():
    """A path sent as data is data: images, documents and texts never open it."""
    for path in (b"/etc/hostname", b"file:///etc/passwd", b"../../../../etc/passwd"):
        assert documents.extract_text(path) == path.decode()
        with pytest.raises(InputError):
            images.open_image(path)
        with pytest.raises(InputError):
            _yolo_preprocess().decode_bgr(path)
    assert utf8_texts(np.array([[b"/etc/passwd"]], dtype=object), "TEXT", 64) == ["/etc/passwd"]
