"""The VM tier's image reading and figures (tests/vm/guest/pixels.py), against the capture
server's own PNG encoder and hand-made PPMs."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from capture.png import encode_png
from libdisplay.compositor.layout import FrameHeader
from tests.vm.guest import pixels


def _frame(width: int, height: int, xrgb: tuple[int, int, int]) -> tuple[FrameHeader, bytes]:
    red, green, blue = xrgb
    header = FrameHeader(width=width, height=height, stride=width * 4,
                         pixel_format="XRGB8888", y_flip=False, size=width * height * 4)
    return header, bytes((blue, green, red, 0)) * (width * height)


def test_a_capture_png_decodes_to_its_pixels(tmp_path: Path) -> None:
    header, frame = _frame(5, 3, (230, 20, 160))
    path = tmp_path / "still.png"
    path.write_bytes(encode_png(header, frame))
    image = pixels.read_png(path)
    assert image.size == (5, 3)
    assert image.rgb == bytes((230, 20, 160)) * 15
    assert pixels.coverage(image, (230, 20, 160)) == 1.0


def test_filtered_png_rows_are_undone(tmp_path: Path) -> None:
    rows = [bytes((10, 20, 30, 40, 50, 60)), bytes((1, 2, 3, 4, 5, 6))]
    # Row 0 with Sub (1), row 1 with Paeth (4), encoded by hand.
    sub = bytes((10, 20, 30, 30, 30, 30))
    # Paeth predicts up (10, 20, 30; 40) for the first four bytes, the corner (20, 30) after.
    paeth = bytes(((1 - 10) & 0xFF, (2 - 20) & 0xFF, (3 - 30) & 0xFF, (4 - 40) & 0xFF,
                   (5 - 20) & 0xFF, (6 - 30) & 0xFF))
    raw = b"\1" + sub + b"\4" + paeth
    ihdr = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + body))
        return struct.pack(">I", len(body)) + kind + body + crc

    path = tmp_path / "filtered.png"
    path.write_bytes(pixels.PNG_SIGNATURE + chunk(b"IHDR", ihdr)
                     + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    assert pixels.read_png(path).rgb[6:] == rows[1]
    assert pixels.read_png(path).rgb[:6] == rows[0]


def test_ppm_figures(tmp_path: Path) -> None:
    path = tmp_path / "dump.ppm"
    path.write_bytes(b"P6\n# qemu\n2 2\n255\n" + bytes((230, 20, 160)) * 3 + bytes(3))
    image = pixels.read_ppm(path)
    assert image.size == (2, 2)
    assert pixels.coverage(image, (230, 20, 160)) == 0.75
    black = pixels.Image(2, 2, bytes(12))
    assert pixels.mean_abs_diff(image, black) == (230 + 20 + 160) * 3 / 12
    with pytest.raises(pixels.ImageError, match="sizes differ"):
        pixels.mean_abs_diff(image, pixels.Image(1, 1, bytes(3)))


def test_bad_files_name_themselves(tmp_path: Path) -> None:
    path = tmp_path / "x.ppm"
    path.write_bytes(b"P5\n1 1\n255\n\0")
    with pytest.raises(pixels.ImageError, match="x.ppm"):
        pixels.read_ppm(path)
    with pytest.raises(pixels.ImageError, match="no PNG signature"):
        pixels.read_png(path)
