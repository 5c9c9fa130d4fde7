"""PNG of a frame in the standard library: every still the server serves.

Starting ffmpeg alone costs ~100 ms on a loaded 2-core node; converting a 1080p frame to RGB
with slice assignment and deflating it at level 1 costs ~40 ms and no child process (nor its
~60 MiB). The server's frames are never larger than 1080p: the layout module shrinks larger
outputs before sending them (see capture/server.py).
"""

from __future__ import annotations

import struct
import zlib
from typing import Final

from libdisplay.compositor.layout import FrameHeader

SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"
_RED_FIRST: Final = ("XBGR8888", "ABGR8888")


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def rgb_rows(header: FrameHeader, pixels: bytes | bytearray) -> bytes:
    """Top-to-bottom RGB rows, each preceded by PNG filter type 0 (whole-frame slicing: a
    per-row loop is four times slower)."""
    width, height = header.width, header.height
    packed = width * 4
    if header.stride != packed:
        pixels = b"".join(
            pixels[row * header.stride : row * header.stride + packed] for row in range(height)
        )
    red, blue = (0, 2) if header.pixel_format in _RED_FIRST else (2, 0)
    rgb = bytearray(width * height * 3)
    rgb[0::3] = pixels[red : width * height * 4 : 4]
    rgb[1::3] = pixels[1 : width * height * 4 : 4]
    rgb[2::3] = pixels[blue : width * height * 4 : 4]
    row_bytes = width * 3
    rows = range(height - 1, -1, -1) if header.y_flip else range(height)
    view = memoryview(rgb)
    return b"".join(
        part for row in rows for part in (b"\0", view[row * row_bytes : (row + 1) * row_bytes])
    )


def encode_png(header: FrameHeader, pixels: bytes | bytearray) -> bytes:
    """An 8-bit RGB PNG of the frame (alpha, when the format has one, is dropped)."""
    ihdr = struct.pack(">IIBBBBB", header.width, header.height, 8, 2, 0, 0, 0)
    data = zlib.compress(rgb_rows(header, pixels), 1)
    return SIGNATURE + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", data) + _chunk(b"IEND", b"")
