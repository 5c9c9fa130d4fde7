from __future__ import annotations

import socket
from pathlib import Path

import pytest

from libdisplay.compositor import layout
from libdisplay.compositor.layout import (
    ClaimSocket,
    Frame,
    FrameHeader,
    LayoutClosedError,
    LayoutConnectError,
    LayoutControl,
    LayoutProtocolError,
    LayoutReplyError,
    LayoutTimeoutError,
    LayoutUsageError,
)
from tests.support.fake_layout import Script, control_script, reads, scripted


def test_encode_create() -> None:
    assert (
        layout.encode_create(Path("/run/d/c1/wayland"), "HDMI-A-1", "0f1e-2d.3c_4b")
        == b"CREATE 0f1e-2d.3c_4b HDMI-A-1 /run/d/c1/wayland\n"
    )


@pytest.mark.parametrize(
    ("path", "output", "claim", "field"),
    [
        ("/s", "X1", "", "claim_uid"),
        ("/s", "X1", "a/b", "claim_uid"),
        ("/s", "X1", "c" * 129, "claim_uid"),
        ("/s", "X1", "sp ace", "claim_uid"),
        ("/s", "", "c", "output"),
        ("/s", "X 1", "c", "output"),
        ("/s", "o" * 64, "c", "output"),
        ("/s", "é", "c", "output"),
        ("rel/s", "X1", "c", "path"),
        ("/a b", "X1", "c", "path"),
        ("/" + "p" * 107, "X1", "c", "path"),
    ],
    ids=[
        "claim-empty",
        "claim-slash",
        "claim-long",
        "claim-space",
        "output-empty",
        "output-space",
        "output-long",
        "output-non-ascii",
        "path-relative",
        "path-space",
        "path-long",
    ],
)
def test_encode_create_rejects_what_the_module_would(
    path: str, output: str, claim: str, field: str
) -> None:
    with pytest.raises(LayoutUsageError, match=field):
        layout.encode_create(Path(path), output, claim)


def test_encode_remove_list_frame() -> None:
    assert layout.encode_remove("c-1") == b"REMOVE c-1\n"
    assert layout.encode_list() == b"LIST\n"
    assert layout.encode_frame("X2") == b"FRAME X2\n"
    with pytest.raises(LayoutUsageError, match="output"):
        layout.encode_frame("X 2")


@pytest.mark.parametrize(
    ("max_size", "line"),
    [((1920, 1080), b"FRAME X2 1920x1080\n"), ((16, 16384), b"FRAME X2 16x16384\n")],
    ids=["1080p", "extremes"],
)
def test_encode_frame_with_a_bound(max_size: tuple[int, int], line: bytes) -> None:
    assert layout.encode_frame("X2", max_size) == line


def test_encode_frame_in_i420() -> None:
    assert layout.encode_frame("X2", (1920, 1080), i420=True) == b"FRAME X2 1920x1080 I420\n"
    assert layout.encode_frame("X2", i420=True) == b"FRAME X2 I420\n"


@pytest.mark.parametrize(
    "max_size",
    [(0, 1080), (1920, 15), (16385, 1080), (1920,), (1920, 1080, 1), (1920.0, 1080), (True, 16)],
    ids=["zero", "below-16", "above-16384", "one-side", "three-sides", "float", "bool"],
)
def test_encode_frame_rejects_a_bound_the_module_would(max_size: tuple[int, int]) -> None:
    with pytest.raises(LayoutUsageError, match="max_size"):
        layout.encode_frame("X2", max_size)


@pytest.mark.parametrize(
    ("line", "code", "text"),
    [
        ("ERR not-found no claim c", "not-found", "no claim c"),
        ("ERR busy", "busy", ""),
        ("ERR", "unknown", ""),
    ],
    ids=["with-text", "code-only", "bare"],
)
def test_parse_error(line: str, code: str, text: str) -> None:
    error = layout.parse_error(line)
    assert error is not None
    assert (error.code, error.text) == (code, text)


@pytest.mark.parametrize("line", ["OK", "OK 2", "ERROR x", "FRAME 1 1 4 XRGB8888 0 4"])
def test_parse_error_ignores_other_lines(line: str) -> None:
    assert layout.parse_error(line) is None


def test_parse_claim_line() -> None:
    assert layout.parse_claim_line("c1 X2 /run/c1.sock 3") == ClaimSocket(
        claim_uid="c1", output="X2", path=Path("/run/c1.sock"), clients=3
    )


@pytest.mark.parametrize(
    "line", ["c1 X2 /run/c1.sock", "c1 X2 /run/c1.sock -1", "a b c d e"], ids=str
)
def test_parse_claim_line_rejects(line: str) -> None:
    with pytest.raises(LayoutProtocolError, match="LIST"):
        layout.parse_claim_line(line)


def test_parse_frame_header() -> None:
    assert layout.parse_frame_header("FRAME 3 2 16 ABGR8888 1 32") == FrameHeader(
        width=3, height=2, stride=16, pixel_format="ABGR8888", y_flip=True, size=32
    )


def test_parse_i420_frame_header() -> None:
    # Y 1920 x 1080, U and V 960 x 540 each.
    assert layout.parse_frame_header("FRAME 1920 1080 1920 I420 0 3110400") == FrameHeader(
        width=1920, height=1080, stride=1920, pixel_format="I420", y_flip=False, size=3110400
    )


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("FRAME 3 2 12 XRGB8888 0", "bad frame header"),
        ("FRAMES 3 2 12 XRGB8888 0 24", "bad frame header"),
        ("FRAME 3 2 12 RGB565 0 24", "pixel format"),
        ("FRAME 3 2 12 XRGB8888 2 24", "y-flip"),
        ("FRAME 3 -2 12 XRGB8888 0 24", "bad number"),
        ("FRAME 0 2 12 XRGB8888 0 24", "out of range"),
        ("FRAME 16385 1 65540 XRGB8888 0 65540", "out of range"),
        ("FRAME 3 2 8 XRGB8888 0 16", "inconsistent"),
        ("FRAME 3 2 12 XRGB8888 0 25", "inconsistent"),
        ("FRAME 3 2 3 I420 0 9", "inconsistent"),
        ("FRAME 4 2 8 I420 0 12", "inconsistent"),
        ("FRAME 4 2 4 I420 0 16", "inconsistent"),
    ],
    ids=[
        "short",
        "verb",
        "format",
        "yflip",
        "negative",
        "zero",
        "huge",
        "stride",
        "size",
        "i420-odd-side",
        "i420-stride",
        "i420-size",
    ],
)
def test_parse_frame_header_rejects(line: str, why: str) -> None:
    with pytest.raises(LayoutProtocolError, match=why):
        layout.parse_frame_header(line)


def _frame(pixel_format: layout.PixelFormat, *, y_flip: bool) -> Frame:
    # 2x2: memory row 0 holds bytes 1..8, row 1 bytes 11..18.
    header = FrameHeader(
        width=2, height=2, stride=8, pixel_format=pixel_format, y_flip=y_flip, size=16
    )
    return Frame(
        header=header, pixels=bytes([1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 14, 15, 16, 17, 18])
    )


@pytest.mark.parametrize(
    ("pixel_format", "y_flip", "x", "y", "rgb"),
    [
        ("XRGB8888", False, 0, 0, (3, 2, 1)),
        ("ARGB8888", False, 1, 1, (17, 16, 15)),
        ("XBGR8888", False, 1, 0, (5, 6, 7)),
        ("ABGR8888", True, 0, 0, (11, 12, 13)),
        ("XRGB8888", True, 1, 1, (7, 6, 5)),
    ],
    ids=["xrgb", "argb", "xbgr", "abgr-flipped", "xrgb-flipped"],
)
def test_frame_rgb(
    pixel_format: layout.PixelFormat, y_flip: bool, x: int, y: int, rgb: tuple[int, int, int]
) -> None:
    assert _frame(pixel_format, y_flip=y_flip).rgb(x, y) == rgb


def test_frame_rgb_outside() -> None:
    with pytest.raises(LayoutUsageError, match=r"\(2, 0\)"):
        _frame("XRGB8888", y_flip=False).rgb(2, 0)


def test_an_i420_frame_has_no_rgb() -> None:
    header = FrameHeader(width=2, height=2, stride=2, pixel_format="I420", y_flip=False, size=6)
    with pytest.raises(LayoutUsageError, match="I420"):
        Frame(header=header, pixels=bytes(6)).rgb(0, 0)


# ---------- the clients against a scripted server ----------

def test_control_round_trips(tmp_path: Path) -> None:
    script = control_script(
        (b"CREATE c1 X1 /run/c1.sock\n", b"OK\n"),
        (b"LIST\n", b"OK 2\nc1 X1 /run/c1.sock 0\nc2 X2 /run/c2.sock 4\n"),
        (b"REMOVE c1\n", b"OK\n"),
        (b"REMOVE c1\n", b"ERR not-found no claim c1\n"),
        (b"REMOVE c2\n", b"ERR io boom\n"),
    )
    with scripted(tmp_path / "s.sock", script) as path, LayoutControl(path, timeout=5) as control:
        control.create_claim_socket("/run/c1.sock", "X1", "c1")
        assert [c.clients for c in control.list_claim_sockets()] == [0, 4]
        assert control.remove_claim_socket("c1") is True
        assert control.remove_claim_socket("c1") is False
        with pytest.raises(LayoutReplyError) as caught:
            control.remove_claim_socket("c2")
        assert (caught.value.code, caught.value.text) == ("io", "boom")


def test_capture_reads_header_and_pixels(tmp_path: Path) -> None:
    def script(conn: socket.socket) -> None:
        conn.sendall(b"LAYOUT-CAPTURE 1\n")
        reads(conn, b"FRAME X1\n")
        conn.sendall(b"FRAME 1 2 4 XRGB8888 0 8\n")
        conn.sendall(bytes([10, 20, 30, 0]))
        conn.sendall(bytes([40, 50, 60, 0]))
        reads(conn, b"FRAME X9\n")
        conn.sendall(b"ERR no-output no output named X9\n")
        reads(conn, b"FRAME X1 16x16\n")
        conn.sendall(b"FRAME 1 1 4 XRGB8888 0 4\n" + bytes([70, 80, 90, 0]))

    with (
        scripted(tmp_path / "s.sock", script) as path,
        layout.LayoutCapture(path, timeout=5) as capture,
    ):
        frame = capture.frame("X1")
        assert (frame.rgb(0, 0), frame.rgb(0, 1)) == ((30, 20, 10), (60, 50, 40))
        with pytest.raises(LayoutReplyError, match="no-output"):
            capture.frame("X9")
        assert capture.frame("X1", (16, 16)).rgb(0, 0) == (90, 80, 70)


@pytest.mark.parametrize(
    ("script", "error"),
    [
        (lambda conn: conn.sendall(b"HELLO 9\n"), LayoutProtocolError),
        (lambda conn: None, LayoutTimeoutError),
        (lambda conn: conn.close(), LayoutClosedError),
        (lambda conn: conn.sendall(b"\xff\n"), LayoutProtocolError),
        (lambda conn: conn.sendall(b"L" * 2000), LayoutProtocolError),
    ],
    ids=["wrong-greeting", "silent", "closed", "not-ascii", "endless-line"],
)
def test_control_greeting_failures(tmp_path: Path, script: Script, error: type[Exception]) -> None:
    with scripted(tmp_path / "s.sock", script) as path, pytest.raises(error):
        LayoutControl(path, timeout=0.3)


def test_reply_timeout(tmp_path: Path) -> None:
    script = control_script((b"LIST\n", b"OK 2\nc1 X1 /run/c1.sock 0\n"))
    with (
        scripted(tmp_path / "s.sock", script) as path,
        LayoutControl(path, timeout=0.3) as control,
        pytest.raises(LayoutTimeoutError),
    ):
        control.list_claim_sockets()


def test_connect_errors(tmp_path: Path) -> None:
    with pytest.raises(LayoutConnectError) as caught:
        LayoutControl(tmp_path / "absent.sock")
    assert caught.value.errno == 2
    with pytest.raises(LayoutUsageError, match="timeout"):
        LayoutControl(tmp_path / "absent.sock", timeout=0)


def test_encode_configure() -> None:
    assert (
        layout.encode_configure("DP-1", mode="1280x720@59.94", transform="rotate-90", scale=2)
        == b"CONFIGURE DP-1 mode=1280x720@59.94 transform=rotate-90 scale=2\n"
    )
    assert layout.encode_configure("DP-1", modeset=True) == b"CONFIGURE DP-1 modeset=1\n"
    assert layout.encode_configure("DP-1", power_off=True) == b"CONFIGURE DP-1 power=off\n"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"mode": "1280x"}, "mode"),
        ({"mode": "0x720"}, "mode"),
        ({"mode": "1280x720@60.0001"}, "mode"),
        ({"mode": "99999x720"}, "mode"),
        ({"transform": "90"}, "transform"),
        ({"scale": 0}, "scale"),
        ({"scale": 9}, "scale"),
        ({"scale": True}, "scale"),
        ({"modeset": 1}, "modeset"),
        ({"power_off": "yes"}, "power_off"),
        ({"modeset": True, "power_off": True}, "modeset"),
    ],
)
def test_encode_configure_refuses_bad_fields(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(LayoutUsageError, match=f"^{field} "):
        layout.encode_configure("DP-1", **kwargs)  # type: ignore[arg-type]


def test_configure_and_outputs_round_trip(tmp_path: Path) -> None:
    state = b"DP-1 mode=1280x720@60000 transform=rotate-90 scale=2 x=0 y=0 width=360 height=640"
    script = control_script(
        (b"CONFIGURE DP-1 mode=1280x720 transform=rotate-90 scale=2\n", b"OK " + state + b"\n"),
        (b"OUTPUTS\n", b"OK 1\n" + state + b" modes=1280x720@60000,1920x1080@74973\n"),
        (
            b"CONFIGURE DP-1 mode=800x600\n",
            b"ERR bad-mode mode 800x600 is not offered by DP-1: offered: "
            b"1280x720@60.000,1920x1080@74.973\n",
        ),
        (b"CONFIGURE DP-1 mode=1920x1080\n", b"ERR unsupported mode no switch_mode\n"),
        (b"CONFIGURE DP-1 scale=3\n", b"ERR failed scale put back\n"),
    )
    with scripted(tmp_path / "s.sock", script) as path, LayoutControl(path, timeout=5) as control:
        got = control.configure("DP-1", mode="1280x720", transform="rotate-90", scale=2)
        assert (got.logical_width, got.logical_height, got.modes) == (360, 640, ())
        (listed,) = control.outputs()
        assert [str(mode) for mode in listed.modes] == ["1280x720@60", "1920x1080@74.973"]
        with pytest.raises(layout.LayoutModeNotOffered) as not_offered:
            control.configure("DP-1", mode="800x600")
        assert not_offered.value.field == "mode"
        assert [str(m) for m in not_offered.value.offered] == ["1280x720@60", "1920x1080@74.973"]
        with pytest.raises(layout.LayoutUnsupported) as unsupported:
            control.configure("DP-1", mode="1920x1080")
        assert (unsupported.value.code, unsupported.value.field) == ("unsupported", "mode")
        with pytest.raises(layout.LayoutConfigureFailed):
            control.configure("DP-1", scale=3)


def test_probe_round_trips(tmp_path: Path) -> None:
    script = control_script(
        (b"PROBE\n", b"OK 2\nVirtual-1 status=connected edid=0123456789abcdef\n"
                     b"Virtual-2 status=disconnected edid=-\n"),
        (b"CONFIGURE Virtual-2 power=off\n",
         b"OK Virtual-2 mode=1280x800@60000 transform=normal scale=1 x=1920 y=0 width=1280 "
         b"height=800 power=off\n"),
        (b"PROBE\n", b"ERR unsupported probe only the DRM backend drives a card to probe\n"),
        (b"PROBE\n", b"OK 1\nVirtual-1 status=maybe edid=-\n"),
    )
    with scripted(tmp_path / "s.sock", script) as path, LayoutControl(path, timeout=5) as control:
        assert control.probe() == (
            layout.ConnectorProbe("Virtual-1", "connected", "0123456789abcdef"),
            layout.ConnectorProbe("Virtual-2", "disconnected", ""),
        )
        assert control.configure("Virtual-2", power_off=True).powered is False
        with pytest.raises(layout.LayoutUnsupported) as unsupported:
            control.probe()
        assert unsupported.value.field == "probe"
        with pytest.raises(layout.LayoutProtocolError, match="bad probe line"):
            control.probe()


@pytest.mark.parametrize(
    "line",
    ["Virtual-1 status=connected edid=0123", "Virtual-1 edid=-", " status=connected edid=-",
     "Virtual-1 status=connected edid=0123456789ABCDEF"],
)
def test_parse_probe_line_rejects(line: str) -> None:
    with pytest.raises(layout.LayoutProtocolError):
        layout.parse_probe_line(line)
