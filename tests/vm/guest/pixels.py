"""Decoded pixels of a QMP screendump (binary PPM) or a capture still (8-bit RGB PNG), and the
two figures the VM tier judges them by: how much of an image is one colour, and how far two
images of one screen are apart. Standard library only: the guest's python3.13 and the host's
tests both use it.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class ImageError(ValueError):
    """A file that is not an image this module reads; the message names the file and why."""


@dataclass(frozen=True, slots=True)
class Image:
    width: int
    height: int
    rgb: bytes
    """Rows top to bottom, three bytes a pixel."""

    @property
    def size(self) -> tuple[int, int]:
        return self.width, self.height


def read_ppm(path: Path) -> Image:
    data = path.read_bytes()
    tokens: list[bytes] = []
    at = 0
    while len(tokens) < 4:  # magic, width, height, maxval
        end = data.find(b"\n", at)
        if end < 0:
            raise ImageError(f"{path}: PPM header ends early")
        tokens += data[at:end].split(b"#", 1)[0].split()
        at = end + 1
    magic, width, height, maxval = tokens[0], int(tokens[1]), int(tokens[2]), int(tokens[3])
    if magic != b"P6" or maxval != 255:
        raise ImageError(f"{path}: {magic!r} maxval {maxval}, not an 8-bit P6 PPM")
    rgb = data[at:at + width * height * 3]
    if len(rgb) != width * height * 3:
        raise ImageError(f"{path}: {len(rgb)} bytes of pixels for {width}x{height}")
    return Image(width, height, rgb)


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


def _unfilter(kind: int, row: bytearray, prev: bytes, bpp: int) -> None:
    """Undo one row's PNG filter in place (types 1-4; the capture server writes 0)."""
    for i in range(len(row)):
        left = row[i - bpp] if i >= bpp else 0
        up = prev[i]
        corner = prev[i - bpp] if i >= bpp else 0
        if kind == 1:
            row[i] = (row[i] + left) & 0xFF
        elif kind == 2:
            row[i] = (row[i] + up) & 0xFF
        elif kind == 3:
            row[i] = (row[i] + (left + up) // 2) & 0xFF
        elif kind == 4:
            row[i] = (row[i] + _paeth(left, up, corner)) & 0xFF


def read_png(path: Path) -> Image:
    """An 8-bit RGB, non-interlaced PNG (what capture/png.py writes)."""
    data = path.read_bytes()
    if not data.startswith(PNG_SIGNATURE):
        raise ImageError(f"{path}: no PNG signature")
    at, header, idat = len(PNG_SIGNATURE), b"", bytearray()
    while at + 8 <= len(data):
        length, kind = struct.unpack_from(">I4s", data, at)
        body = data[at + 8:at + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        at += 12 + length
    if len(header) != 13:
        raise ImageError(f"{path}: no IHDR")
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    if (depth, colour, interlace) != (8, 2, 0):
        raise ImageError(f"{path}: depth {depth} colour type {colour} interlace {interlace}, "
                         "not 8-bit RGB without interlace")
    raw = zlib.decompress(bytes(idat))
    stride = width * 3
    if len(raw) != (stride + 1) * height:
        raise ImageError(f"{path}: {len(raw)} bytes of rows for {width}x{height}")
    rows: list[bytes] = []
    prev = bytes(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, row = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        if kind > 4:
            raise ImageError(f"{path}: row {y} has filter type {kind}")
        if kind:
            _unfilter(kind, row, prev, 3)
        prev = bytes(row)
        rows.append(prev)
    return Image(width, height, b"".join(rows))


def coverage(image: Image, colour: tuple[int, int, int], *, tolerance: int = 8,
             step: int = 1) -> float:
    """The share of pixels within `tolerance` of `colour` on every channel, looking at every
    `step`th pixel (a sample is enough where emulated CPU time is dear)."""
    red, green, blue = image.rgb[0::3], image.rgb[1::3], image.rgb[2::3]
    r0, g0, b0 = colour
    seen = hits = 0
    for i in range(0, len(red), step):
        seen += 1
        if (abs(red[i] - r0) <= tolerance and abs(green[i] - g0) <= tolerance
                and abs(blue[i] - b0) <= tolerance):
            hits += 1
    return hits / seen if seen else 0.0


def mean_abs_diff(a: Image, b: Image) -> float:
    """The mean absolute difference per channel of two images of one size (0-255)."""
    if a.size != b.size:
        raise ImageError(f"sizes differ: {a.size} and {b.size}")
    return sum(abs(x - y) for x, y in zip(a.rgb, b.rgb, strict=True)) / len(a.rgb)
