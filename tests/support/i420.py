"""The layout module's I420 frames computed the plain way, one sample at a time, to check its
conversion (westonctl/layout/i420.c) against and to answer as it would in fakes: BT.601
limited range, Y of each pixel, U and V of each 2 x 2 block's mean, rounded half up, an odd
last column or row dropped."""

from __future__ import annotations


def from_packed(pixels: bytes | bytearray, width: int, height: int, stride: int, *,
                red: int) -> bytes:
    """The I420 frame of width x height packed 32-bit pixels, red at byte `red` of each and
    blue at byte 2 - red."""
    blue = 2 - red
    width, height = width - width % 2, height - height % 2

    def channel(x: int, y: int, byte: int) -> int:
        return pixels[y * stride + x * 4 + byte]

    luma = bytearray()
    for y in range(height):
        for x in range(width):
            r, g, b = channel(x, y, red), channel(x, y, 1), channel(x, y, blue)
            luma.append(16 + (66 * r + 129 * g + 25 * b + 128) // 256)
    u, v = bytearray(), bytearray()
    for y in range(0, height, 2):
        for x in range(0, width, 2):
            block = [(x, y), (x + 1, y), (x, y + 1), (x + 1, y + 1)]
            # The means' formula times 4 (mean = sum / 4), floored as the means' would be.
            r = sum(channel(bx, by, red) for bx, by in block)
            g = sum(channel(bx, by, 1) for bx, by in block)
            b = sum(channel(bx, by, blue) for bx, by in block)
            u.append(128 + (-38 * r - 74 * g + 112 * b + 4 * 128) // 1024)
            v.append(128 + (112 * r - 94 * g - 18 * b + 4 * 128) // 1024)
    return bytes(luma + u + v)


def solid(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """The I420 frame of a width x height frame of one colour (even sides)."""
    y, _, _, _, u, v = from_packed(bytes([*rgb, 0]) * 4, 2, 2, 8, red=0)
    quarter = (width // 2) * (height // 2)
    return bytes([y]) * (width * height) + bytes([u]) * quarter + bytes([v]) * quarter
