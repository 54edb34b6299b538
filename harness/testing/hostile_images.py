"""Images that attack a decoder: a PNG whose header declares a huge image, a valid PNG that inflates
to far more pixels than bytes."""

from __future__ import annotations

import struct
import zlib
from functools import lru_cache

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_chunk(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))


def png_header_bomb(width: int = 50_000, height: int = 50_000, pixel_rows: int = 1) -> bytes:
    """A PNG whose header declares ``width x height`` 8-bit gray pixels but carries a few rows."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    body = zlib.compress(b"\x00" * (1 + min(width, 1 << 16)) * pixel_rows, 9)
    return PNG_MAGIC + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", body) + png_chunk(b"IEND", b"")


@lru_cache(maxsize=4)
def png_zip_bomb(side: int = 8000) -> bytes:
    """A complete, valid 1-bit PNG of ``side x side`` pixels (8000: 64 M pixels in ~10 kB)."""
    row = b"\x00" * (1 + (side + 7) // 8)
    comp = zlib.compressobj(9)
    body = b"".join(comp.compress(row) for _ in range(side)) + comp.flush()
    ihdr = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)
    return PNG_MAGIC + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", body) + png_chunk(b"IEND", b"")
