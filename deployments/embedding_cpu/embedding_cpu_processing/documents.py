"""Documents for the embedding pipelines: file bytes -> text -> token-budgeted chunks.

Plain text must be UTF-8 (a UTF-8 or UTF-16 byte-order mark is honoured; anything else is a
clear error, never a silent guess). Markdown is text. PDF text is extracted with pypdfium2;
corrupt and password-protected PDFs are clear errors. Chunking is semchunk's (paragraphs,
then sentences, then words) with a token budget counted by the model's own tokenizer, so no
chunk is ever truncated by the model.
"""

from __future__ import annotations

import codecs
import re
import zlib
from dataclasses import dataclass
from functools import lru_cache

from triton_helpers.errors import InputError

PDF_MAGIC = b"%PDF-"


@dataclass(frozen=True)
class DocumentLimits:
    """Bounds that keep one request from holding an instance for long."""

    max_file_bytes: int = 20 * 1024 * 1024
    max_pdf_pages: int = 2000
    max_chunks: int = 4096
    #: All files of one request together, and how many files one request may carry.
    max_request_bytes: int = 32 * 1024 * 1024
    max_files: int = 16
    #: Sum of the inflated (FlateDecode) streams of one PDF, checked before pdfium parses it.
    max_pdf_inflated_bytes: int = 128 * 1024 * 1024


STREAM = re.compile(rb"stream\r?\n")
FLATE = re.compile(rb"/FlateDecode|/Fl\b")


def pdf_inflated_bytes(data: bytes, limit: int) -> int:
    """Bytes the FlateDecode streams of a PDF inflate to, counted with bounded memory; stops
    (``InputError``) as soon as the total passes ``limit`` (a PDF bomb: a few MB that inflate
    1000:1 would otherwise be inflated by pdfium inside the stub)."""
    total = 0
    position = 0
    while True:
        match = STREAM.search(data, position)
        if match is None:
            return total
        start = match.end()
        end = data.find(b"endstream", start)
        end = len(data) if end < 0 else end
        dictionary = data[max(0, match.start() - 512) : match.start()]
        position = end + len(b"endstream")
        if not FLATE.search(dictionary[dictionary.rfind(b"<<") :] if b"<<" in dictionary else dictionary):
            continue
        inflater = zlib.decompressobj()
        chunk = memoryview(data)[start:end]
        try:
            while chunk:
                out = inflater.decompress(chunk, 1 << 20)
                total += len(out)
                if total > limit:
                    raise InputError(
                        f"PDF streams inflate to more than {limit} bytes, over the limit (max_pdf_inflated_bytes)"
                    )
                chunk = inflater.unconsumed_tail
                if inflater.eof or not out:
                    break
        except zlib.error:
            continue  # pdfium reports a corrupt stream itself


def detect_kind(data: bytes) -> str:
    """``pdf`` or ``text`` from the leading bytes."""
    return "pdf" if data.lstrip()[:5] == PDF_MAGIC else "text"


def decode_text(data: bytes) -> str:
    """UTF-8 (BOM stripped) or BOM-marked UTF-16; else an error naming the offending byte."""
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    elif data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"file is neither a PDF nor UTF-8 text (invalid byte {data[exc.start : exc.start + 1]!r} at offset "
            f"{exc.start}); convert it to UTF-8"
        ) from None
    if "\x00" in text:
        raise InputError("file looks binary (it contains NUL characters); send UTF-8 text, Markdown or PDF")
    return text


def pdf_text(data: bytes, max_pages: int) -> str:
    """Text of every page, pages separated by blank lines."""
    import pypdfium2 as pdfium

    try:
        document = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        message = str(exc)
        if "password" in message.lower():
            raise InputError("PDF is encrypted (password protected): send an unencrypted PDF") from None
        raise InputError(f"cannot open PDF: {message}") from None
    try:
        if len(document) > max_pages:
            raise InputError(f"PDF has {len(document)} pages, over the limit of {max_pages} (max_pdf_pages)")
        pages = []
        for index in range(len(document)):
            try:
                page = document[index]
                text_page = page.get_textpage()
            except pdfium.PdfiumError as exc:
                raise InputError(f"PDF page {index + 1} cannot be read: {exc}") from None
            pages.append(text_page.get_text_range())
            text_page.close()
            page.close()
        return "\n\n".join(pages)
    finally:
        document.close()


def extract_text(data: bytes, limits: DocumentLimits = DocumentLimits()) -> str:
    """Text of a UTF-8 text / Markdown / PDF file, within ``limits``."""
    if not data:
        raise InputError("file is empty (0 bytes)")
    if len(data) > limits.max_file_bytes:
        raise InputError(f"file is {len(data)} bytes, over the limit of {limits.max_file_bytes} (max_file_bytes)")
    if detect_kind(data) == "pdf":
        pdf_inflated_bytes(data, limits.max_pdf_inflated_bytes)
        text = pdf_text(data, limits.max_pdf_pages)
    else:
        text = decode_text(data)
    if not text.strip():
        raise InputError("file has no text to embed")
    return text


@lru_cache(maxsize=4)
def token_counter(tokenizer_file: str):
    """Count tokens without special tokens, truncation or padding."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(tokenizer_file)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)


#: Characters counted per step by ``count_tokens_within`` (a step ends at whitespace).
COUNT_STEP_CHARS = 256 * 1024


def count_tokens_within(text: str, tokenizer_file: str, budget: int) -> int:
    """Tokens of ``text``, counted in whitespace-ended slices; stops as soon as the count passes
    ``budget`` (so an over-long file is refused after about ``budget`` tokens of work and
    memory, not after tokenizing all of it). Returns the count (> budget when stopped)."""
    # Every whitespace-separated word is at least one token: a cheap lower bound refuses most
    # over-long files at once, before the tokenizer runs.
    words = 0
    for offset in range(0, len(text), 1 << 20):
        words += len(text[offset : offset + (1 << 20)].split())
        if words > budget + (len(text) >> 20) + 1:  # + words split at slice borders
            return words
    count = token_counter(tokenizer_file)
    total, start = 0, 0
    while start < len(text):
        end = min(len(text), start + COUNT_STEP_CHARS)
        if end < len(text):
            space = max(text.rfind(" ", start, end), text.rfind("\n", start, end))
            end = space + 1 if space > start else end
        total += count(text[start:end])
        if total > budget:
            return total
        start = end
    return total


@lru_cache(maxsize=8)
def _chunker(tokenizer_file: str, chunk_tokens: int):
    import semchunk

    return semchunk.chunkerify(token_counter(tokenizer_file), chunk_tokens)


def chunk_text(text: str, tokenizer_file: str, chunk_tokens: int, max_chunks: int) -> list[str]:
    """Paragraph-first chunks of at most ``chunk_tokens`` tokens each, at most ``max_chunks``.

    The total token count is checked first, so a file that would exceed ``max_chunks`` is
    refused before the (slower) chunking runs.
    """
    if chunk_tokens < 8:
        raise InputError(f"chunk size {chunk_tokens} tokens is too small (minimum 8)")
    budget = max_chunks * chunk_tokens
    total = count_tokens_within(text, tokenizer_file, budget)
    if total > budget:
        raise InputError(
            f"file has more than {budget} tokens: more than {max_chunks} chunks of {chunk_tokens} tokens "
            "(the limit, max_chunks)"
        )
    chunks = [c for c in _chunker(tokenizer_file, chunk_tokens)(text) if c.strip()]
    if len(chunks) > max_chunks:
        raise InputError(f"file makes {len(chunks)} chunks, over the limit of {max_chunks} (max_chunks)")
    if not chunks:
        raise InputError("file has no text to embed")
    return chunks


AGGREGATIONS = ("mean", "none")


@dataclass(frozen=True)
class PipelineOptions:
    """Per-request options of the document pipelines (Triton request parameters)."""

    chunk_tokens: int
    aggregation: str = "mean"

    @classmethod
    def from_parameters(cls, parameters: dict, default_chunk_tokens: int, max_chunk_tokens: int) -> PipelineOptions:
        unknown = set(parameters) - {"chunk_tokens", "aggregation"}
        if unknown:
            raise InputError(f"unknown request parameters {sorted(unknown)}; known: chunk_tokens, aggregation")
        try:
            chunk_tokens = int(parameters.get("chunk_tokens", default_chunk_tokens))
        except (TypeError, ValueError):
            raise InputError(f"chunk_tokens must be an integer, got {parameters.get('chunk_tokens')!r}") from None
        if not 8 <= chunk_tokens <= max_chunk_tokens:
            raise InputError(
                f"chunk_tokens must be between 8 and {max_chunk_tokens} (the model's limit), got {chunk_tokens}"
            )
        aggregation = str(parameters.get("aggregation", "mean"))
        if aggregation not in AGGREGATIONS:
            raise InputError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
        return cls(chunk_tokens, aggregation)


def aggregate(chunk_vectors, normalize: bool = True):
    """One vector per document: the mean of its chunk vectors, L2-normalised."""
    import numpy as np

    mean = np.asarray(chunk_vectors, np.float32).mean(axis=0)
    if normalize:
        mean = mean / max(float(np.linalg.norm(mean)), 1e-12)
    return mean.astype(np.float32)
