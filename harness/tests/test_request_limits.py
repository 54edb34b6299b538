"""Per-request limits of the Python models (triton_helpers, embedding_cpu_processing): what one request may cost.

Why: limits were once per element or per file, so one request of 64 texts of 1 MiB held an
instance for over a minute and grew the stub by 1.6 GiB (the tokenizer encoded whole texts
before truncating), a 20 MiB text file was refused only after 35 s, and a small PDF whose
page stream inflates 1000:1 was inflated by pdfium inside the stub.
"""

from __future__ import annotations

import random
import time
import zlib

import numpy as np
import pytest
from embedding_cpu_processing.document_requests import check_request_size, limits_from_config
from embedding_cpu_processing.documents import DocumentLimits, chunk_text, extract_text, pdf_inflated_bytes
from embedding_cpu_processing.text_batches import TextLimits, request_texts
from embedding_cpu_processing.text_embedding import cut_for_truncation, default_model_dir, load_tokenizer, tokenize

from triton_helpers.errors import InputError


def test_text_limits_per_request_are_named_in_the_error():
    limits = TextLimits(max_text_bytes=1 << 20, max_request_bytes=2 << 20, max_texts=64)
    assert request_texts(np.array([[b"a"], [b"b"]], dtype=object), "TEXT", limits) == ["a", "b"]
    with pytest.raises(InputError, match=r"65 TEXT elements, over the limit of 64 \(max_texts\)"):
        request_texts(np.array([b"a"] * 65, dtype=object), "TEXT", limits)
    many = np.array([b"x" * (1 << 20)] * 3, dtype=object)
    began = time.monotonic()
    with pytest.raises(InputError, match=r"3145728 bytes of TEXT, over the limit of 2097152 \(max_request_bytes\)"):
        request_texts(many, "TEXT", limits)
    assert time.monotonic() - began < 0.5
    config = {"parameters": {"max_request_bytes": {"string_value": "10"}, "max_texts": {"string_value": "2"}}}
    assert TextLimits.from_config(config) == TextLimits(1 << 20, 10, 2)


WORDS = (
    "the quick brown fox jumps over lazy dogs while Ünïcödé 中文 text, punctuation! and numbers 12345 "
    "supercalifragilisticexpialidocious"
).split()


@pytest.mark.parametrize("kind", ["words", "newlines", "cjk", "long_words", "only_spaces", "one_word", "short"])
def test_long_texts_are_cut_before_tokenizing_with_the_same_tokens(kind):
    random.seed(kind)
    text = {
        "words": " ".join(random.choice(WORDS) for _ in range(60000)),
        "newlines": "\n".join(random.choice(WORDS) for _ in range(60000)),
        "cjk": "中文字符" * 50000,
        "long_words": " ".join("x" * random.randint(90, 150) for _ in range(2000)),
        "only_spaces": " " * 200000 + " ".join(WORDS * 30),
        "one_word": "a" * 200000,
        "short": "hello world",
    }[kind]
    tokenizer = load_tokenizer(None)
    cut = cut_for_truncation(text, tokenizer)
    assert tokenizer.encode(cut).ids == tokenizer.encode(text).ids
    if kind in ("words", "newlines", "cjk"):
        assert len(cut) < 20000, "a long ordinary text should be cut to a few KiB"


def test_tokenize_of_a_1_mib_text_is_fast_and_exact():
    text = " ".join(random.Random(1).choice(WORDS) for _ in range(180000))[: 1 << 20]
    began = time.monotonic()
    ids = tokenize([text] * 8)["input_ids"]
    assert time.monotonic() - began < 1.0
    reference = load_tokenizer(None).encode(text).ids
    assert all(list(row) == reference for row in ids)


def test_document_requests_are_bounded_in_files_and_bytes():
    limits = DocumentLimits(max_request_bytes=100, max_files=2)
    check_request_size([b"a" * 50, b"b" * 50], limits)
    with pytest.raises(InputError, match=r"3 files, over the limit of 2 \(max_files\)"):
        check_request_size([b"a"] * 3, limits)
    with pytest.raises(InputError, match=r"101 bytes of files, over the limit of 100 \(max_request_bytes\)"):
        check_request_size([b"a" * 51, b"b" * 50], limits)
    parsed = limits_from_config(
        {"parameters": {"max_files": {"string_value": "3"}, "max_pdf_inflated_bytes": {"string_value": "1000"}}}
    )
    assert parsed.max_files == 3 and parsed.max_pdf_inflated_bytes == 1000


def pdf_with_stream(content: bytes) -> bytes:
    stream = zlib.compress(content, 9)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>",
        b"<< /Length " + str(len(stream)).encode() + b" /Filter /FlateDecode >>\nstream\n" + stream + b"\nendstream",
    ]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += str(number).encode() + b" 0 obj\n" + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 5\n0000000000 65535 f \n" + b"".join(str(o).zfill(10).encode() + b" 00000 n \n" for o in offsets)
    out += b"trailer\n<< /Size 5 /Root 1 0 R >>\nstartxref\n" + str(xref).encode() + b"\n%%EOF\n"
    return bytes(out)


def test_a_pdf_bomb_is_refused_before_pdfium_inflates_it():
    bomb = pdf_with_stream(b"q " + b" " * (300 << 20) + b" Q")  # ~300 KB that inflates to 300 MiB
    assert len(bomb) < 1 << 20
    began = time.monotonic()
    with pytest.raises(InputError, match="max_pdf_inflated_bytes"):
        extract_text(bomb, DocumentLimits())
    assert time.monotonic() - began < 2.0
    text_pdf = pdf_with_stream(b"BT /F1 12 Tf 72 720 Td (hello) Tj ET")
    assert pdf_inflated_bytes(text_pdf, 1 << 20) == len(b"BT /F1 12 Tf 72 720 Td (hello) Tj ET")


def test_an_over_long_text_file_is_refused_quickly():
    tokenizer_file = str(default_model_dir() / "tokenizer.json")
    began = time.monotonic()
    with pytest.raises(InputError, match=r"max_chunks"):
        chunk_text("word " * (4 << 20), tokenizer_file, 256, 4096)  # 20 MiB, ~4 M tokens
    assert time.monotonic() - began < 1.0


def test_image_requests_are_bounded_in_total_bytes():
    from triton_helpers.errors import check_request_bytes

    check_request_bytes([b"a" * 10, b"b" * 10], "IMAGE_BYTES", 20)
    with pytest.raises(InputError, match=r"21 bytes of IMAGE_BYTES, over the limit of 20 \(max_request_bytes\)"):
        check_request_bytes([b"a" * 11, b"b" * 10], "IMAGE_BYTES", 20)


# -- served: every over-limit request of the issue gets a 4xx within 1 s, the stubs stay small -----
@pytest.fixture(scope="module")
def embedding_limits_server():
    from harness.testing.servers import deployment_server, stop_server

    server = deployment_server("embedding_cpu", ["embedding_onnx_text", "pipeline_orchestrator"])
    server.start()
    try:
        server.wait_ready(300)
        yield server
    finally:
        stop_server(server)


def _binary_request(server, model: str, name: str, items: list[bytes]):
    """One binary-HTTP request of BYTES ``items`` ([n, 1]); returns (status, error text, seconds)."""
    import requests
    import tritonclient.http as httpclient

    tensor = httpclient.InferInput(name, [len(items), 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[item] for item in items], dtype=object), binary_data=True)
    body, header_length = httpclient.InferenceServerClient.generate_request_body([tensor])
    began = time.monotonic()
    response = requests.post(
        f"http://{server.http_url}/v2/models/{model}/infer",
        data=body,
        timeout=120,
        headers={"Inference-Header-Content-Length": str(header_length)},
    )
    elapsed = time.monotonic() - began
    return response.status_code, response.text[:300], elapsed


OVER_LIMIT = {  # case -> (model, input, items, what the error names)
    "64 texts of 1 MiB (the issue's case)": (
        "embedding_onnx_text",
        "TEXT",
        [b"x" * (1 << 20)] * 64,
        "byte limit of model",
    ),
    "3 texts of 1 MiB": ("embedding_onnx_text", "TEXT", [b"word " * (1 << 18)] * 3, "max_request_bytes"),
    "65 texts": ("embedding_onnx_text", "TEXT", [b"a short text"] * 65, "max_batch_size"),
    "a 20 MiB + 1 text file": ("pipeline_orchestrator", "RAW_FILE", [b"word " * (4 << 20) + b"!"], "max_file_bytes"),
    "a PDF inflating 1000:1": (
        "pipeline_orchestrator",
        "RAW_FILE",
        [pdf_with_stream(b"q " + b" " * (300 << 20) + b" Q")],
        "max_pdf_inflated_bytes",
    ),
    "17 files": ("pipeline_orchestrator", "RAW_FILE", [b"a file"] * 17, "max_batch_size"),
}


@pytest.mark.timeout(600)
def test_over_limit_requests_get_a_4xx_within_1_s_on_a_served_deployment(embedding_limits_server):
    """Over the documented limits, a 4xx within 1 s naming the limit; the
    stubs keep their memory and the server stays ready (embedding_cpu behind the gate)."""
    import requests

    from harness.testing.processes import process_memory

    server = embedding_limits_server
    assert _binary_request(server, "embedding_onnx_text", "TEXT", [b"warm up"])[0] == 200
    assert _binary_request(server, "pipeline_orchestrator", "RAW_FILE", [b"warm up the pipeline"])[0] == 200
    before = {k: v["rss_mib"] for k, v in process_memory(server.process.pid).items() if k.startswith("stub:")}
    seen = {}
    for case, (model, name, items, limit) in OVER_LIMIT.items():
        status, text, elapsed = _binary_request(server, model, name, items)
        seen[case] = (status, round(elapsed, 3))
        assert 400 <= status < 500, f"{case}: {status} {text}"
        assert limit in text, f"{case}: the error does not name {limit}: {text}"
        assert elapsed < 1.0, f"{case}: refused after {elapsed:.2f} s"
    after = {k: v["rss_mib"] for k, v in process_memory(server.process.pid).items() if k.startswith("stub:")}
    print("over-limit requests (status, s):", seen)
    print("stub RSS MiB before -> after:", {k: (before[k], after.get(k)) for k in before})
    assert set(after) == set(before), "a stub died or was replaced"
    for key, rss in before.items():
        assert after[key] - rss < 64, f"{key} grew {after[key] - rss:.0f} MiB on refused requests"
    assert requests.get(f"http://{server.http_url}/v2/health/ready", timeout=10).status_code == 200
