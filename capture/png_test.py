"""The standard-library PNG: colours land where the frame had them, whatever the format,
y-flip or stride padding."""

from __future__ import annotations

import pytest

from capture.png import encode_png
from capture.testing import png_rgb
from libdisplay.compositor.layout import FrameHeader, PixelFormat

WIDTH, HEIGHT = 6, 4
RED, BLUE = (255, 0, 0), (0, 0, 255)


def frame(pixel_format: PixelFormat, *, y_flip: bool, pad: int) -> tuple[FrameHeader, bytes]:
    """Red everywhere but a blue pixel at (4, 1) counted from the top."""
    red_first = pixel_format in ("XBGR8888", "ABGR8888")

    def pixel(rgb: tuple[int, int, int]) -> bytes:
        r, g, b = rgb
        return bytes((r, g, b, 255) if red_first else (b, g, r, 255))

    rows = []
    for y in range(HEIGHT):
        top_y = HEIGHT - 1 - y if y_flip else y
        row = b"".join(pixel(BLUE if (x, top_y) == (4, 1) else RED) for x in range(WIDTH))
        rows.append(row + b"\xee" * pad)
    stride = WIDTH * 4 + pad
    header = FrameHeader(width=WIDTH, height=HEIGHT, stride=stride, pixel_format=pixel_format,
                         y_flip=y_flip, size=stride * HEIGHT)
    return header, b"".join(rows)


@pytest.mark.parametrize("pixel_format", ["XRGB8888", "ARGB8888", "XBGR8888", "ABGR8888"])
@pytest.mark.parametrize("y_flip", [False, True], ids=["top-down", "y-flipped"])
@pytest.mark.parametrize("pad", [0, 8], ids=["packed", "padded"])
def test_colours_land_in_place(pixel_format: PixelFormat, y_flip: bool, pad: int) -> None:
    header, pixels = frame(pixel_format, y_flip=y_flip, pad=pad)
    png = encode_png(header, pixels)
    assert png_rgb(png, 4, 1) == ((WIDTH, HEIGHT), BLUE)
    assert png_rgb(png, 3, 1) == ((WIDTH, HEIGHT), RED)
    assert png_rgb(png, 4, 2) == ((WIDTH, HEIGHT), RED)
