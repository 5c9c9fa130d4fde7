"""Frames read from the pixman framebuffer (fbread.c): while a capture connection is open the
module keeps its buffers and copies into one only the rows repainted since it was last
filled, so a frame is right only if every repaint's rows are found, on a turned output too,
and a frame asked for after a commit shows it. A bounded frame is kept with its buffer and
only the blocks of the rows filled since are filtered again: it must equal the box filter of
the whole new content."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from libdisplay.compositor.layout import Frame, LayoutCapture, LayoutControl
from tests.support import i420
from tests.support import weston as weston_support
from tests.support.layout import SolidClient
from tests.support.layout_build import build_layout, layout_ini

RED = (255, 0, 0)
BLUE = (0, 0, 255)
# Odd sides, a rectangle off the middle row and column by one pixel: rows found by the wrong
# axis of a turned output miss it.
SIZE = (642, 482)
RECT = (64, 48)
WAIT_S = 20.0


@pytest.fixture(scope="module")
def layout_so(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_layout(tmp_path_factory.mktemp("layout"))


def _expected(upright: tuple[int, int], blue: bool) -> bytes:
    """The upright frame's blue, green and red bytes, plane by plane: red, with the blue
    client centred when `blue`."""
    width, height = upright
    x, y = (width - RECT[0]) // 2, (height - RECT[1]) // 2
    planes = []
    for channel in (2, 1, 0):  # XRGB8888 in memory: blue, green, red, unused
        red_byte, blue_byte = bytes([RED[channel]]), bytes([BLUE[channel]])
        plain = red_byte * width
        marked = red_byte * x + blue_byte * RECT[0] + red_byte * (width - x - RECT[0])
        rows = [marked if blue and y <= row < y + RECT[1] else plain for row in range(height)]
        planes.append(b"".join(rows))
    return b"".join(planes)


def _planes(frame: Frame) -> bytes:
    header = frame.header
    assert header.pixel_format == "XRGB8888"
    packed = b"".join(
        frame.pixels[row * header.stride : row * header.stride + header.width * 4]
        for row in range(header.height)
    )
    return packed[0::4] + packed[1::4] + packed[2::4]


def _wrong_bytes(frame: Frame, want: bytes) -> int:
    return sum(a != b for a, b in zip(_planes(frame), want, strict=True))


def _wait_for(capture: LayoutCapture, want: bytes, what: str,
              bound: tuple[int, int] | None = None) -> None:
    deadline = time.monotonic() + WAIT_S
    while _planes(capture.frame("headless", bound)) != want:
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not seen within {WAIT_S:g} s")


def _box_filtered(planes: bytes, size: tuple[int, int], bound: tuple[int, int]) -> bytes:
    """The planes the module's box filter makes of `planes` (width x height each) within
    `bound`: the smallest integer factor that fits, each pixel its block's mean rounded half up,
    the last blocks cut by the edge."""
    width, height = size
    factor = max(1, -(-width // bound[0]), -(-height // bound[1]))
    out_width, out_height = -(-width // factor), -(-height // factor)
    result = bytearray()
    for plane in range(len(planes) // (width * height)):
        base = plane * width * height
        for j in range(out_height):
            rows = range(j * factor, min(height, j * factor + factor))
            sums = [0] * out_width
            for row in rows:
                line = planes[base + row * width : base + (row + 1) * width]
                for i in range(out_width):
                    sums[i] += sum(line[i * factor : i * factor + factor])
            for i in range(out_width):
                count = len(rows) * (min(width, i * factor + factor) - i * factor)
                result.append((sums[i] + count // 2) // count)
    return bytes(result)


@pytest.fixture(params=["normal", "rotate-90", "flipped-rotate-270"])
def output(layout_so: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Path, Path, bool]]:
    """(claim socket, capture socket, turned) of a pixman headless output."""
    transform = request.param
    with tempfile.TemporaryDirectory(prefix="cap-") as tmp:
        sockets = Path(tmp)
        config = layout_ini(sockets) + f"\n[output]\nname=headless\ntransform={transform}\n"
        with weston_support.headless(
            size=SIZE, renderer="pixman", config=config, args=[f"--shell={layout_so}"]
        ):
            with LayoutControl(sockets / "control.sock") as control:
                control.create_claim_socket(sockets / "s.sock", "headless", "claim-s")
            yield sockets / "s.sock", sockets / "capture.sock", transform != "normal"


def test_each_frame_shows_the_rows_repainted_since_the_last(
    output: tuple[Path, Path, bool],
) -> None:
    claim, capture_path, turned = output
    upright = (SIZE[1], SIZE[0]) if turned else SIZE
    red, with_blue = _expected(upright, blue=False), _expected(upright, blue=True)
    # One connection throughout: its buffers, and what they hold, live as long as it.
    with (
        LayoutCapture(capture_path, timeout=WAIT_S) as capture,
        SolidClient(claim, colour=RED),
    ):
        _wait_for(capture, red, "the red client")
        with SolidClient(claim, colour=BLUE, size=RECT, honour_configure=False) as blue:
            assert blue.shown.wait(WAIT_S), blue.error
            # Asked after weston took the commit: the repaint it brings is waited for.
            wrong = _wrong_bytes(capture.frame("headless"), with_blue)
            assert wrong == 0, f"after the commit: {wrong} bytes differ"
            wrong = _wrong_bytes(capture.frame("headless"), with_blue)
            assert wrong == 0, f"with no repaint: {wrong} bytes differ"
        _wait_for(capture, red, "red where the blue client was")


def test_a_bounded_frame_refilters_the_rows_repainted(output: tuple[Path, Path, bool]) -> None:
    claim, capture_path, turned = output
    upright = (SIZE[1], SIZE[0]) if turned else SIZE
    # A factor of 3 (4 turned): blocks straddle the blue rectangle's edges.
    bound = (214, 161)
    red = _box_filtered(_expected(upright, blue=False), upright, bound)
    with_blue = _box_filtered(_expected(upright, blue=True), upright, bound)
    assert red != with_blue
    with (
        LayoutCapture(capture_path, timeout=WAIT_S) as capture,
        SolidClient(claim, colour=RED),
    ):
        _wait_for(capture, red, "the red client", bound)
        # Both buffers keep a red frame.
        for _ in range(2):
            assert _planes(capture.frame("headless", bound)) == red
        with SolidClient(claim, colour=BLUE, size=RECT, honour_configure=False) as blue:
            assert blue.shown.wait(WAIT_S), blue.error
            for when in ("after the commit", "with no repaint", "from the other buffer"):
                got = _planes(capture.frame("headless", bound))
                wrong = sum(a != b for a, b in zip(got, with_blue, strict=True))
                assert wrong == 0, f"{when}: {wrong} bytes differ"
        _wait_for(capture, red, "red where the blue client was", bound)
        for _ in range(2):
            assert _planes(capture.frame("headless", bound)) == red



@pytest.mark.parametrize("bound", [None, (214, 161)], ids=["whole", "factor-3"])
def test_an_i420_frame_is_the_packed_frame_converted(
    output: tuple[Path, Path, bool], bound: tuple[int, int] | None
) -> None:
    # Each I420 frame, kept with its buffer and converted again only in the row pairs
    # repainted, equals the plain conversion of the packed frame of the same screen.
    claim, capture_path, turned = output
    upright = (SIZE[1], SIZE[0]) if turned else SIZE
    red = _expected(upright, blue=False)
    if bound is not None:
        red = _box_filtered(red, upright, bound)

    def both(capture: LayoutCapture) -> tuple[bytes, bytes]:
        """The packed frame converted here, and the module's I420 frame after it."""
        frame = capture.frame("headless", bound)
        header = frame.header
        want = i420.from_packed(frame.pixels, header.width, header.height, header.stride, red=2)
        return want, bytes(capture.frame("headless", bound, i420=True).pixels)

    with (
        LayoutCapture(capture_path, timeout=WAIT_S) as capture,
        SolidClient(claim, colour=RED),
    ):
        _wait_for(capture, red, "the red client", bound)
        for when in ("red", "red from the other buffer"):
            want, got = both(capture)
            assert got == want, f"{when}: {_differing(got, want)} bytes differ"
        all_red = want
        with SolidClient(claim, colour=BLUE, size=RECT, honour_configure=False) as blue:
            assert blue.shown.wait(WAIT_S), blue.error
            for when in ("with blue", "with blue from the other buffer"):
                want, got = both(capture)
                assert want != all_red, f"{when}: the blue client is not in the frame"
                assert got == want, f"{when}: {_differing(got, want)} bytes differ"


def _differing(got: bytes, want: bytes) -> int:
    return sum(a != b for a, b in zip(got, want, strict=False)) + abs(len(got) - len(want))
