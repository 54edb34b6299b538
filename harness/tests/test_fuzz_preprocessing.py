"""Hostile input, generated: every pre-processing function and every served entry model.

Property tests (hypothesis) feed each server-side pre-processing function of
``triton_helpers`` random bytes, valid images of every common format truncated or bit-flipped,
decompression bombs (small files whose headers declare huge images), huge and malformed
UTF-8 text and PDFs. Each case must end, within a time bound, in a result or a clear
``InputError`` (the message the client gets back): never another exception, a hang or a crash.

The end-to-end part sends a handful of generated hostile inputs to every entry model of every
deployment on its real server and checks that each request ends in a result or an error
response and that the server and its models are healthy afterwards (no stub died).

The counts (inputs tried, results, InputErrors, slowest case) are written to
``results/reliability/fuzz.json`` for docs/reliability.md (``make reliability``).
Bounded for the default suite: ``FUZZ_EXAMPLES`` (default 40) examples per property.
"""

from __future__ import annotations

import io
import json
import os
import random
import struct
import time
import zlib
from functools import lru_cache
from pathlib import Path

import numpy as np
import pypdfium2 as pdfium
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from triton_helpers import classification, detection, documents, images
from triton_helpers.errors import InputError, decode_utf8, single_bytes_items, utf8_texts

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "40"))
TIME_BOUND_S = float(os.environ.get("FUZZ_TIME_BOUND_S", "10"))
RESULTS = Path(__file__).resolve().parents[2] / "results" / "reliability" / "fuzz.json"
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)

TALLY: dict = {"per_function": {}, "results": 0, "input_errors": 0, "slowest_s": 0.0}
# Findings of this fuzzing, fixed in triton_helpers and kept as regression tests below:
# Image.open's OSError/ValueError on truncated headers, OpenCV's seconds-and-gigabytes on a
# forged 12-byte PNG, a PDF page that fails to load.
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def attempt(name: str, function, *args, **kwargs):
    """Run one case: a result or an InputError within the time bound; anything else fails."""
    began = time.perf_counter()
    try:
        outcome = function(*args, **kwargs)
        TALLY["results"] += 1
    except InputError as exc:
        assert str(exc), f"{name}: InputError without a message"
        outcome = exc
        TALLY["input_errors"] += 1
    finally:
        elapsed = time.perf_counter() - began
        TALLY["per_function"][name] = TALLY["per_function"].get(name, 0) + 1
        TALLY["slowest_s"] = round(max(TALLY["slowest_s"], elapsed), 3)
    if elapsed >= TIME_BOUND_S:
        saved = _save_case(name, args)
        raise AssertionError(
            f"{name} took {elapsed:.1f} s on one input (bound {TIME_BOUND_S} s); input saved to {saved}"
        )
    return outcome


def _save_case(name: str, args) -> str | None:
    """Keep a slow input for reproduction (results/reliability/fuzz-slow-<function>-<crc>.bin)."""
    data = next((a for a in args if isinstance(a, (bytes, bytearray))), None)
    if data is None:
        return None
    path = RESULTS.parent / f"fuzz-slow-{name}-{zlib.crc32(data):08x}.bin"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path)


@pytest.fixture(scope="module", autouse=True)
def write_tally():
    yield
    if not TALLY["per_function"] and not SERVED["requests"]:
        return
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    tally = TALLY if TALLY["per_function"] else {k: previous.get(k, TALLY[k]) for k in TALLY}
    record = {
        **tally,
        "total": sum(tally["per_function"].values()),
        "examples_per_property": EXAMPLES,
        "time_bound_s": TIME_BOUND_S,
        "served": previous.get("served"),
    }
    if SERVED["requests"]:
        record["served"] = {
            "requests": SERVED["requests"],
            "models": len(SERVED["models"]),
            "outcomes": SERVED["outcomes"],
        }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(record, indent=2) + "\n")


# -- generated hostile images ----------------------------------------------------------------
FORMATS = ["PNG", "JPEG", "GIF", "BMP", "TIFF", "WEBP", "ICO", "PPM"]


def encode(image: Image.Image, fmt: str) -> bytes:
    buffer = io.BytesIO()
    save = image if fmt in ("PNG", "TIFF", "WEBP", "GIF", "ICO") else image.convert("RGB")
    save.save(buffer, format=fmt)
    return buffer.getvalue()


def _chunk(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))


def png_header_bomb(width: int, height: int, pixel_rows: int = 1) -> bytes:
    """A PNG whose header declares width x height but which carries only a few rows of data."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    body = zlib.compress(b"\x00" * (1 + min(width, 1 << 16)) * pixel_rows, 9)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", body) + _chunk(b"IEND", b"")


@lru_cache(maxsize=1)
def png_zip_bomb() -> bytes:
    """A complete, valid 1-bit PNG of 8000 x 8000 (64 M pixels) that is ~10 kB on disk."""
    width = height = 8000
    row = b"\x00" * (1 + width // 8)
    comp = zlib.compressobj(9)
    body = b"".join(comp.compress(row) for _ in range(height)) + comp.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", body) + _chunk(b"IEND", b"")


def header_bomb(fmt: str, width: int, height: int) -> bytes:
    """A small real image of ``fmt`` with the size fields of its header patched to width x height."""
    if fmt == "PNG":
        return png_header_bomb(width, height)
    data = bytearray(encode(Image.new("RGB", (8, 8), (10, 200, 30)), fmt))
    if fmt == "JPEG":
        at = data.find(b"\xff\xc0")
        data[at + 5 : at + 9] = struct.pack(">HH", height & 0xFFFF, width & 0xFFFF)
    elif fmt == "GIF":
        data[6:10] = struct.pack("<HH", width & 0xFFFF, height & 0xFFFF)
    elif fmt == "BMP":
        data[18:26] = struct.pack("<ii", min(width, 2**31 - 1), min(height, 2**31 - 1))
    return bytes(data)


@st.composite
def hostile_images(draw) -> bytes:
    """Valid, truncated, bit-flipped, header-bomb and zip-bomb images, and plain random bytes."""
    kind = draw(st.sampled_from(["valid", "truncated", "flipped", "header_bomb", "zip_bomb", "random", "prefix"]))
    if kind == "random":
        return draw(st.binary(max_size=4096))
    if kind == "zip_bomb":
        return png_zip_bomb()
    fmt = draw(st.sampled_from(FORMATS))
    if kind == "header_bomb":
        side = st.integers(min_value=0, max_value=70000)
        return header_bomb(draw(st.sampled_from(["PNG", "JPEG", "GIF", "BMP"])), draw(side), draw(side))
    width, height = draw(st.integers(1, 48)), draw(st.integers(1, 48))
    mode = draw(st.sampled_from(["RGB", "L", "RGBA", "P", "1"]))
    seed = draw(st.integers(0, 2**16))
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    image = Image.fromarray(pixels).convert(mode)
    try:
        data = encode(image, fmt)
    except (OSError, ValueError, KeyError):
        data = encode(image.convert("RGB"), "PNG")
    if kind == "truncated":
        return data[: draw(st.integers(0, max(len(data) - 1, 0)))]
    if kind == "flipped":
        mutable = bytearray(data)
        for _ in range(draw(st.integers(1, 16))):
            position = draw(st.integers(0, len(mutable) - 1))
            mutable[position] = draw(st.integers(0, 255))
        return bytes(mutable)
    if kind == "prefix":  # a known magic number followed by garbage
        magic = draw(
            st.sampled_from(
                [
                    b"\x89PNG\r\n\x1a\n",
                    b"\xff\xd8\xff",
                    b"GIF89a",
                    b"BM",
                    b"II*\x00",
                    b"RIFF\x00\x00\x00\x00WEBP",
                    b"%PDF-1.7",
                ]
            )
        )
        return magic + draw(st.binary(max_size=512))
    return data


SMALL_LIMIT = {"max_pixels": 1_000_000, "max_bytes": 1 << 20}


@pytest.mark.timeout(300)
@FUZZ
@given(data=hostile_images(), small=st.booleans())
def test_open_image_and_decode_rgb(data, small):
    limits = SMALL_LIMIT if small else {}
    result = attempt("images.open_image", images.open_image, data, **limits)
    if not isinstance(result, InputError):
        assert result.mode == "RGB" and result.size[0] * result.size[1] <= limits.get("max_pixels", 40_000_000)
    attempt("images.decode_rgb", images.decode_rgb, data, **limits)


@pytest.mark.timeout(300)
@FUZZ
@given(data=hostile_images(), small=st.booleans())
def test_detection_decode_and_letterbox(data, small):
    limits = SMALL_LIMIT if small else {}
    result = attempt("detection.decode_bgr", detection.decode_bgr, data, **limits)
    if not isinstance(result, InputError):
        assert result.ndim == 3 and result.shape[2] == 3 and result.dtype == np.uint8
    tensor = attempt("detection.preprocess_image", detection.preprocess_image, data, (64, 64), **limits)
    if not isinstance(tensor, InputError):
        assert tensor[0].shape == (3, 64, 64) and np.isfinite(tensor[0]).all()


@pytest.mark.timeout(300)
@FUZZ
@given(data=hostile_images(), small=st.booleans())
def test_cn_clip_image_preprocess(data, small):
    from triton_helpers import cn_clip

    out = attempt("cn_clip.preprocess_image", cn_clip.preprocess_image, data, 32, **(SMALL_LIMIT if small else {}))
    if not isinstance(out, InputError):
        assert out.shape == (3, 32, 32) and np.isfinite(out).all()


class _Preprocess(classification.PreprocessModel):
    """The classification preprocess model's own code path, without a Triton stub around it."""

    def __init__(self, transform):
        self.transform = transform
        self.limits = {"max_pixels": 1_000_000, "max_bytes": 1 << 20}
        self.input_name = "IMAGE_BYTES"
        self.dtype = np.float32


@pytest.mark.timeout(300)
@FUZZ
@given(items=st.lists(hostile_images(), min_size=1, max_size=3), lite=st.booleans())
def test_classification_preprocess(items, lite):
    transform = (
        classification.ImageTransform.efficientnet_lite(32)
        if lite
        else classification.ImageTransform.torchvision_imagenet(40, 32)
    )
    out = attempt("classification.PreprocessModel.preprocess", _Preprocess(transform).preprocess, items)
    if not isinstance(out, InputError):
        assert out.shape == (len(items), 3, 32, 32) and np.isfinite(out).all()


# -- text --------------------------------------------------------------------------------------
hostile_text_bytes = st.one_of(
    st.binary(max_size=2048),
    st.text(max_size=512).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=256).map(lambda t: t.encode()),
    st.integers(1, 3 << 20).map(lambda n: b"a" * n),  # up to 3 MB
    st.sampled_from(
        [
            b"",
            b"\x00" * 64,
            b"\xef\xbb\xbf",
            b"\xff\xfe" + "hi".encode("utf-16-le"),
            b"\xc3\x28",
            b"\xed\xa0\x80",
            "🙂".encode() * 5000,
            ("中文" * 40000).encode(),
            b" \t\n" * 1000,
            b"\xe2\x80\x8b" * 3000,
            "\u202e\u0301".encode() * 2000,
        ]
    ),
)


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
    from triton_helpers.cn_clip import CnClipTokenizer

    return CnClipTokenizer()


@pytest.mark.timeout(300)
@FUZZ
@given(data=hostile_text_bytes)
def test_sentence_tokenizer(data):
    from triton_helpers.text_embedding import tokenize

    texts = attempt("errors.utf8_texts", utf8_texts, np.array([[data]], dtype=object), "TEXT", 1 << 20)
    if isinstance(texts, InputError):
        return
    tokens = attempt("text_embedding.tokenize", tokenize, texts)
    assert tokens["input_ids"].shape[1] <= 256  # truncated to the model's max_seq_length


# -- documents -------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def small_pdf() -> bytes:
    """A real two-page PDF with text, made with pypdfium2."""
    import pypdfium2.raw as raw

    document = pdfium.PdfDocument.new()
    font = raw.FPDFText_LoadStandardFont(document.raw, b"Helvetica")
    for number in range(2):
        page = document.new_page(200, 200)
        text = raw.FPDFPageObj_NewTextObj(document.raw, b"Helvetica", 12.0)
        content = f"Page {number} of a fuzz seed document.".encode("utf-16-le") + b"\x00\x00"
        raw.FPDFText_SetText(text, (raw.FPDF_WCHAR * (len(content) // 2)).from_buffer_copy(content))
        raw.FPDFPageObj_Transform(text, 1, 0, 0, 1, 20, 100)
        raw.FPDFPage_InsertObject(page.raw, text)
        raw.FPDFPage_GenerateContent(page.raw)
        page.close()
    del font
    buffer = io.BytesIO()
    document.save(buffer)
    document.close()
    return buffer.getvalue()


@st.composite
def hostile_documents(draw) -> bytes:
    kind = draw(
        st.sampled_from(
            ["pdf", "truncated_pdf", "flipped_pdf", "fake_pdf", "text", "huge_text", "binary", "many_pages"]
        )
    )
    if kind == "pdf":
        return small_pdf()
    if kind == "truncated_pdf":
        data = small_pdf()
        return data[: draw(st.integers(0, len(data) - 1))]
    if kind == "flipped_pdf":
        data = bytearray(small_pdf())
        for _ in range(draw(st.integers(1, 24))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        return bytes(data)
    if kind == "fake_pdf":
        return b"%PDF-" + draw(st.binary(max_size=2048))
    if kind == "many_pages":  # a page tree that claims 10^6 pages
        return (
            b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n2 0 obj<</Type/Pages/Count 1000000/Kids[3 0 R]>>"
            b"endobj\n3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 10 10]>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF"
        )
    if kind == "huge_text":
        return draw(st.sampled_from(["word ", "中文字符", "a", "\n\n", "🙂 "])).encode() * draw(st.integers(1, 400_000))
    if kind == "binary":
        return draw(st.binary(max_size=4096))
    return draw(hostile_text_bytes)


@pytest.mark.timeout(300)
@FUZZ
@given(data=hostile_documents(), chunk_tokens=st.sampled_from([8, 64, 254]))
def test_document_extract_and_chunk(data, chunk_tokens):
    from triton_helpers.text_embedding import default_model_dir

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


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=5,
)


@pytest.mark.timeout(120)
@FUZZ
@given(
    parameters=st.dictionaries(st.sampled_from(["chunk_tokens", "aggregation", "top_k", "x"]), json_values, max_size=3)
)
def test_request_parameters(parameters):
    attempt(
        "documents.PipelineOptions.from_parameters", documents.PipelineOptions.from_parameters, parameters, 254, 254
    )
    attempt("classification.parse_top_k", classification.parse_top_k, parameters.get("top_k"), 5, 1000)


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
        detection.decode_bgr(PNG_MAGIC + b"\x7f\xff\xff\xff")
    assert time.perf_counter() - began < 0.5


def test_pdf_with_a_corrupt_page_tree_is_an_input_error():
    with pytest.raises(InputError):
        documents.extract_text(small_pdf().replace(b"/Count 2", b"/Count 9"))


def test_client_bytes_never_name_a_file():
    """A path sent as data is data: images, documents and texts never open it."""
    for path in (b"/etc/hostname", b"file:///etc/passwd", b"../../../../etc/passwd"):
        assert documents.extract_text(path) == path.decode()
        with pytest.raises(InputError):
            images.open_image(path)
        with pytest.raises(InputError):
            detection.decode_bgr(path)
    assert utf8_texts(np.array([[b"/etc/passwd"]], dtype=object), "TEXT", 64) == ["/etc/passwd"]


# -- served entry models, end to end ------------------------------------------------------------
SERVED: dict = {"requests": 0, "models": set(), "outcomes": {}}


def _hostile_bytes_items(rng: random.Random) -> list[bytes]:
    jpeg = encode(Image.new("RGB", (64, 48), (200, 10, 10)), "JPEG")
    return [
        b"",
        rng.randbytes(512),
        jpeg[: len(jpeg) // 2],
        png_header_bomb(60000, 60000),
        png_zip_bomb(),
        b"\xff\xfe\xfa\x00" * 8,
        b"a" * (3 << 20),
        b"%PDF-1.7\n" + rng.randbytes(256),
        b"/etc/passwd",
    ]


def _hostile_numeric(dtype: str, shape: list[int], rng: np.random.Generator) -> list[np.ndarray]:
    np_dtype = {
        "FP32": np.float32,
        "FP16": np.float16,
        "FP64": np.float64,
        "INT64": np.int64,
        "INT32": np.int32,
        "INT8": np.int8,
        "UINT8": np.uint8,
        "BOOL": np.bool_,
    }.get(dtype, np.float32)
    if np.issubdtype(np_dtype, np.floating):
        return [
            np.full(shape, np.nan, np_dtype),
            np.full(shape, np.inf, np_dtype),
            rng.normal(0, 1e6, shape).astype(np_dtype),
        ]
    if np.issubdtype(np_dtype, np.integer):
        info = np.iinfo(np_dtype)
        return [
            np.full(shape, info.max, np_dtype),
            np.full(shape, info.min, np_dtype),
            rng.integers(info.min, info.max, shape, dtype=np_dtype, endpoint=True),
        ]
    return [np.ones(shape, np_dtype)]


def _served_cases(metadata: dict, max_batch: int, seed: int) -> list[dict]:
    """Up to 9 hostile input sets for a model, from its own metadata (no per-model knowledge)."""
    rng, nprng = random.Random(seed), np.random.default_rng(seed)
    columns = {}
    for spec in metadata["inputs"]:
        shape = [int(d) for d in spec["shape"]]
        if max_batch > 0:
            shape = [1] + shape[1:]
        shape = [d if d >= 0 else 8 for d in shape]
        if spec["datatype"] == "BYTES":
            columns[spec["name"]] = [np.full(shape, item, dtype=object) for item in _hostile_bytes_items(rng)]
        else:
            columns[spec["name"]] = _hostile_numeric(spec["datatype"], shape, nprng)
    count = max(len(v) for v in columns.values())
    return [{name: values[i % len(values)] for name, values in columns.items()} for i in range(count)]


def _deployments():
    from harness.deployments import discover

    return discover()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("deployment", _deployments(), ids=lambda d: d.name)
def test_served_entry_models_survive_hostile_input(server_pool, deployment, request):
    """Each entry model gets generated hostile inputs; every request is answered and no stub dies."""
    from tritonclient.utils import InferenceServerException

    target = request.config.getoption("--target")
    if target not in deployment.targets:
        pytest.skip(f"{deployment.name} does not support target {target}")
    ctx = server_pool.context(deployment)
    stubs_before = _children(ctx.server)
    with ctx.http_client(network_timeout=120, connection_timeout=120) as client:
        for model in deployment.entry_models:
            metadata = client.get_model_metadata(model)
            max_batch = int(client.get_model_config(model).get("max_batch_size", 0))
            for index, inputs in enumerate(_served_cases(metadata, max_batch, seed=index_seed(model))):
                began = time.monotonic()
                try:
                    ctx.infer(model, inputs)
                    outcome = "result"
                except InferenceServerException as exc:
                    message = exc.message() or str(exc)
                    assert "not healthy" not in message and "Stub" not in message, f"{model} case {index}: {message}"
                    outcome = f"error {exc.status()}"
                elapsed = time.monotonic() - began
                assert elapsed < 120, f"{model} case {index} took {elapsed:.0f} s"
                SERVED["requests"] += 1
                SERVED["models"].add(f"{deployment.name}/{model}")
                SERVED["outcomes"][outcome] = SERVED["outcomes"].get(outcome, 0) + 1
    ctx.assert_healthy()
    # A model stays READY after its stub died (docs/reliability.md): check the stub processes too.
    died = stubs_before - _children(ctx.server)
    assert not died, f"processes of the {deployment.name} server died during the fuzz: {sorted(died)}"


def _children(server) -> set[int]:
    import psutil

    process = getattr(server, "process", None)
    if process is None:
        return set()
    return {p.pid for p in psutil.Process(process.pid).children(recursive=True)}


def index_seed(model: str) -> int:
    return zlib.crc32(model.encode())
