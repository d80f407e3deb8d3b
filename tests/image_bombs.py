"""Crafted images whose truth is known: decompression bombs and a valid but huge PNG, made in
memory from their headers (the hostile-image tests and bench/image_memory.py share them)."""

from __future__ import annotations

import io
import struct
import zlib

from PIL import Image

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png(width: int, height: int, idat: bytes, *, color: int = 2, depth: int = 8, interlace: int = 0) -> bytes:
    header = struct.pack(">IIBBBBB", width, height, depth, color, 0, 0, interlace)
    return SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def png_bomb(side: int = 100_000) -> bytes:
    """A valid PNG header declaring side x side RGB pixels over a 4 KB zlib stream (a few bytes)."""
    return _png(side, side, zlib.compress(b"\0" * 4096))


def jpeg_bomb(side: int = 65_000) -> bytes:
    """A real 16 x 16 JPEG whose frame header (SOF0) says side x side."""
    out = io.BytesIO()
    Image.new("RGB", (16, 16), "red").save(out, format="JPEG")
    data = bytearray(out.getvalue())
    struct.pack_into(">HH", data, data.index(b"\xff\xc0") + 5, side, side)
    return bytes(data)


def large_png(side: int = 13_000) -> bytes:
    """A valid white RGB PNG of side x side (0.53 MB at 13000), written a hundred rows at a time."""
    row = b"\0" + b"\xff" * (3 * side)
    deflate = zlib.compressobj(6)
    parts = [deflate.compress(row * 100) for _ in range(side // 100)]
    return _png(side, side, b"".join([*parts, deflate.compress(row * (side % 100)), deflate.flush()]))
