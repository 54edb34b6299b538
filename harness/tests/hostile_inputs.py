"""Generated hostile inputs for the pre-processing fuzz: images of every common format valid,
truncated, bit-flipped, header bombs (small files whose headers declare huge images) and zip bombs;
UTF-8 text of every awkward kind; PDFs real, truncated, corrupted and claiming 10^6 pages; JSON values."""

from __future__ import annotations

import io
import struct
from functools import lru_cache

import numpy as np
import pypdfium2 as pdfium
from hypothesis import strategies as st
from PIL import Image

from harness.testing.hostile_images import PNG_MAGIC, png_header_bomb, png_zip_bomb

__all__ = ["PNG_MAGIC", "png_header_bomb", "png_zip_bomb"]

FORMATS = ["PNG", "JPEG", "GIF", "BMP", "TIFF", "WEBP", "ICO", "PPM"]


def encode(image: Image.Image, fmt: str) -> bytes:
    buffer = io.BytesIO()
    save = image if fmt in ("PNG", "TIFF", "WEBP", "GIF", "ICO") else image.convert("RGB")
    save.save(buffer, format=fmt)
    return buffer.getvalue()


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


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=5,
)
