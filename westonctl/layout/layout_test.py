"""The layout shell in real weston 14: placement per claim, the control and capture sockets.

The module is compiled once per session from this directory's build.sh. Two outputs come
from weston's x11 backend on Xvfb (X1 320x240 at x=0, X2 400x300 at x=320); one from the
headless backend. Placement is checked through the module's own capture socket. Bounded
(downscaled) frames are checked pixel by pixel against a model of what the output shows,
with pixman and with gl, and at 4K. Weston's capture delivers both renderers' frames top row
first (gl's in ARGB8888).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import stat
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from libdisplay.compositor import layout as layout_module
from libdisplay.compositor import weston as weston_ini
from libdisplay.compositor.layout import (
    Frame,
    LayoutCapture,
    LayoutControl,
    LayoutReplyError,
)
from libdisplay.compositor.wayland import Liveness, probe
from libdisplay.processes import running
from libdisplay.sim.edid import EdidParams, build_edid
from tests.support import i420
from tests.support import weston as weston_support
from tests.support.hostile import Overflow, OverflowClient, region_flood
from tests.support.layout import SolidClient, Wish, capture_attempt
from tests.support.layout_build import build_layout, layout_ini

HERE = Path(__file__).resolve().parent
X1 = (320, 240)
X2 = (400, 300)
RED = (255, 0, 0)
GREEN = (0, 255, 0)
BLUE = (0, 0, 255)
BLACK = (0, 0, 0)
WAIT_S = 20.0


@dataclass(frozen=True, slots=True)
class Compositor:
    weston: weston_support.Weston
    sockets: Path

    @property
    def control(self) -> Path:
        return self.sockets / "control.sock"

    @property
    def capture(self) -> Path:
        return self.sockets / "capture.sock"

    def claim_socket(self, name: str) -> Path:
        return self.sockets / f"{name}.sock"


@pytest.fixture(scope="session")
def layout_so(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_layout(tmp_path_factory.mktemp("layout"))


@contextlib.contextmanager
def _sockets_dir() -> Iterator[Path]:
    # Short, so that every socket path fits sun_path.
    with tempfile.TemporaryDirectory(prefix="lay-") as tmp:
        yield Path(tmp)


@pytest.fixture(scope="module")
def two_outputs(layout_so: Path) -> Iterator[Compositor]:
    with (
        _sockets_dir() as sockets,
        weston_support.x11(
            [X1, X2], config=layout_ini(sockets), args=[f"--shell={layout_so}"]
        ) as w,
    ):
        yield Compositor(weston=w, sockets=sockets)


@pytest.fixture
def claims(two_outputs: Compositor) -> Iterator[LayoutControl]:
    """A control connection; every claim a test made is removed afterwards."""
    with LayoutControl(two_outputs.control) as control:
        yield control
        for claim in control.list_claim_sockets():
            control.remove_claim_socket(claim.claim_uid)


def wait_frame(
    capture_path: Path,
    output: str,
    check: Callable[[Frame], bool],
    *,
    what: str,
    max_size: tuple[int, int] | None = None,
    i420: bool = False,
) -> Frame:
    """Capture `output` until `check` holds; the last frame's failure is reported on timeout."""
    deadline = time.monotonic() + WAIT_S
    with LayoutCapture(capture_path, timeout=WAIT_S) as capture:
        while True:
            frame = capture.frame(output, max_size, i420=i420)
            if check(frame):
                return frame
            if time.monotonic() > deadline:
                pytest.fail(f"{output}: {what} not seen within {WAIT_S:g} s")


def all_one_i420(colour: tuple[int, int, int]) -> Callable[[Frame], bool]:
    def check(frame: Frame) -> bool:
        header = frame.header
        return (header.pixel_format == "I420"
                and frame.pixels == i420.solid(header.width, header.height, colour))

    return check


def all_one(colour: tuple[int, int, int]) -> Callable[[Frame], bool]:
    def check(frame: Frame) -> bool:
        header = frame.header
        points = [(0, 0), (header.width - 1, header.height - 1), (header.width // 2, 0)]
        points.append((header.width // 2, header.height // 2))
        return all(frame.rgb(x, y) == colour for x, y in points)

    return check


def non_black_bbox(frame: Frame) -> tuple[int, int, int, int] | None:
    """(left, top, right, bottom) of the non-black pixels, inclusive; None when all black."""
    header = frame.header
    xs: list[int] = []
    ys: list[int] = []
    for y in range(header.height):
        for x in range(0, header.width, 2):
            if frame.rgb(x, y) != BLACK:
                xs.append(x)
                ys.append(y)
    return (min(xs), min(ys), max(xs), max(ys)) if xs else None


def wait_shown(client: SolidClient) -> None:
    if not client.shown.wait(WAIT_S):
        pytest.fail(f"client never got its first buffer committed (error: {client.error})")


def test_claimed_client_fills_its_output_and_not_the_other(
    two_outputs: Compositor, claims: LayoutControl
) -> None:
    claims.create_claim_socket(two_outputs.claim_socket("a"), "X1", "claim-a")
    claims.create_claim_socket(two_outputs.claim_socket("b"), "X2", "claim-b")
    with (
        SolidClient(two_outputs.claim_socket("a"), colour=RED) as red,
        SolidClient(two_outputs.claim_socket("b"), colour=GREEN) as green,
    ):
        wait_frame(two_outputs.capture, "X1", all_one(RED), what="red over all of X1")
        wait_frame(two_outputs.capture, "X2", all_one(GREEN), what="green over all of X2")
        assert red.configured[-1] == X1
        assert green.configured[-1] == X2


def test_client_asking_for_another_output_or_maximize_stays_on_its_own(
    two_outputs: Compositor, claims: LayoutControl
) -> None:
    claims.create_claim_socket(two_outputs.claim_socket("a"), "X1", "claim-a")
    # A claim's client is offered no other wl_output to ask for (X2 sits right of X1, at
    # x = X1 width), so it asks for fullscreen on the only one it has, and to be maximized.
    wish = Wish(fullscreen_on_output_at_x=0, maximize=True)
    with SolidClient(two_outputs.claim_socket("a"), colour=BLUE, wish=wish) as client:
        wait_frame(two_outputs.capture, "X1", all_one(BLUE), what="blue over all of X1")
        x2 = wait_frame(two_outputs.capture, "X2", lambda _f: True, what="a frame")
        assert non_black_bbox(x2) is None
        assert client.configured[-1] == X1


def test_simple_shm_fills_its_claims_output_and_not_the_other(
    two_outputs: Compositor, claims: LayoutControl
) -> None:
    claims.create_claim_socket(two_outputs.claim_socket("b"), "X2", "claim-b")
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "XDG_RUNTIME_DIR": os.fspath(two_outputs.weston.runtime_dir),
        "WAYLAND_DISPLAY": os.fspath(two_outputs.claim_socket("b")),
    }
    with running(["weston-simple-shm"], log_path=two_outputs.sockets / "simple-shm.log", env=env):
        frame = wait_frame(
            two_outputs.capture,
            "X2",
            lambda f: non_black_bbox(f) is not None,
            what="simple-shm's pixels",
        )
        bbox = non_black_bbox(frame)
        assert bbox is not None
        # Weston 14's simple-shm takes the fullscreen size it is configured with: all of
        # 400x300, sampled on even columns. (Clients that keep their own size are centred:
        # test_bounded_frame_* and the scenes.)
        assert bbox == (0, 0, 398, 299)
        x1 = wait_frame(two_outputs.capture, "X1", lambda _f: True, what="a frame")
        assert non_black_bbox(x1) is None


def test_main_socket_clients_are_shown_on_no_output(
    two_outputs: Compositor, claims: LayoutControl
) -> None:
    with SolidClient(two_outputs.weston.socket, colour=RED) as client:
        wait_shown(client)
        for output in ("X1", "X2"):
            frame = wait_frame(two_outputs.capture, output, lambda _f: True, what="a frame")
            assert non_black_bbox(frame) is None, output


@pytest.mark.parametrize("where", ["main-socket", "claim-socket"])
def test_weston_capture_is_refused_to_every_client_but_the_modules_own(
    two_outputs: Compositor, claims: LayoutControl, where: str
) -> None:
    path = two_outputs.weston.socket
    if where == "claim-socket":
        path = two_outputs.claim_socket("a")
        claims.create_claim_socket(path, "X1", "claim-a")
    assert capture_attempt(path, timeout=WAIT_S) == "failed: unauthorized"
    frame = wait_frame(two_outputs.capture, "X1", lambda _f: True, what="a frame")
    assert (frame.header.width, frame.header.height) == X1


def test_remove_disconnects_clients_and_unlinks_the_socket(
    two_outputs: Compositor, claims: LayoutControl
) -> None:
    path = two_outputs.claim_socket("a")
    claims.create_claim_socket(path, "X1", "claim-a")
    assert path.stat().st_mode & 0o777 == 0o666
    with SolidClient(path, colour=RED) as client:
        wait_frame(two_outputs.capture, "X1", all_one(RED), what="red over all of X1")
        (listed,) = claims.list_claim_sockets()
        assert (listed.claim_uid, listed.output, listed.path, listed.clients) == (
            "claim-a",
            "X1",
            path,
            1,
        )
        assert claims.remove_claim_socket("claim-a") is True
        assert client.closed.wait(WAIT_S), "the claim's client was not disconnected"
    assert not path.exists()
    assert claims.list_claim_sockets() == ()
    assert claims.remove_claim_socket("claim-a") is False
    wait_frame(two_outputs.capture, "X1", all_one(BLACK), what="X1 black again")


def test_create_is_idempotent_and_conflicts_are_refused(
    two_outputs: Compositor, claims: LayoutControl
) -> None:
    path = two_outputs.claim_socket("a")
    claims.create_claim_socket(path, "X1", "claim-a")
    claims.create_claim_socket(path, "X1", "claim-a")
    conflicts = [
        (path, "X2", "claim-a"),
        (path, "X2", "claim-other"),
        (two_outputs.control, "X1", "claim-c"),
    ]
    for conflict in conflicts:
        with pytest.raises(LayoutReplyError) as caught:
            claims.create_claim_socket(*conflict)
        assert caught.value.code == "exists", conflict
    regular = two_outputs.sockets / "regular-file"
    regular.write_text("not a socket")
    with pytest.raises(LayoutReplyError) as caught:
        claims.create_claim_socket(regular, "X1", "claim-f")
    assert caught.value.code == "io"
    assert regular.read_text() == "not a socket"
    assert [c.claim_uid for c in claims.list_claim_sockets()] == ["claim-a"]


def _raw(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(WAIT_S)
    sock.connect(os.fspath(path))
    return sock


def _lines(sock: socket.socket, count: int) -> list[bytes]:
    """The next `count` lines (fewer if the peer closes); anything read past them is dropped."""
    data = b""
    while data.count(b"\n") < count:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.split(b"\n")[:count]


@pytest.mark.parametrize(
    ("request_line", "code"),
    [
        (b"HELLO\n", b"bad-request"),
        (b"CREATE a\n", b"bad-request"),
        (b"CREATE a b c d\n", b"bad-request"),
        (b"CREATE bad/claim X1 /tmp/x.sock\n", b"bad-claim"),
        (b"CREATE c X1 relative.sock\n", b"bad-path"),
        (b"CREATE c X1 /" + b"p" * 200 + b"\n", b"bad-path"),
        (b"CREATE c X\x01 /tmp/x.sock\n", b"bad-output"),
        (b"REMOVE \xff\xfe\n", b"bad-claim"),
        (b"LI\x00ST\n", b"bad-request"),
        (b"\n", b"bad-request"),
    ],
    ids=[
        "unknown-verb",
        "short",
        "long",
        "claim",
        "relative",
        "path-too-long",
        "control-byte",
        "binary",
        "nul",
        "empty",
    ],
)
def test_malformed_control_requests_get_error_replies(
    two_outputs: Compositor, request_line: bytes, code: bytes
) -> None:
    with _raw(two_outputs.control) as sock:
        assert _lines(sock, 1) == [b"LAYOUT 1"]
        sock.sendall(request_line + b"LIST\n")
        error, listed = _lines(sock, 2)
        assert error.split(b" ")[:2] == [b"ERR", code]
        assert listed.startswith(b"OK ")


def _closed(sock: socket.socket) -> bool:
    """True when the peer closed; a reset counts, as unread input makes close() send RST."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _answers(compositor: Compositor) -> None:
    # Returns at the answer; an ASan weston on a loaded machine may take seconds to give it.
    assert probe(compositor.weston.socket, timeout=30.0).state is Liveness.ANSWERING
    with LayoutControl(compositor.control) as control:
        control.list_claim_sockets()


def test_hostile_input_never_stalls_the_compositor(
    two_outputs: Compositor, claims: LayoutControl
) -> None:
    claims.create_claim_socket(two_outputs.claim_socket("a"), "X1", "claim-a")
    with contextlib.ExitStack() as stack:
        # A line far over the limit: an error, then the connection is closed.
        huge = stack.enter_context(_raw(two_outputs.control))
        _lines(huge, 1)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            huge.sendall(b"CREATE " + b"x" * (2 * 1024 * 1024))
        assert _lines(huge, 1)[0].startswith(b"ERR too-long")
        assert _closed(huge)
        _answers(two_outputs)

        # Half a request, held open; garbage on the capture socket and on a claim socket.
        half = stack.enter_context(_raw(two_outputs.control))
        half.sendall(b"CREATE claim-h X1 /tm")
        garbage = stack.enter_context(_raw(two_outputs.capture))
        garbage.sendall(os.urandom(4096) + b"\n")
        wayland_garbage = stack.enter_context(_raw(two_outputs.claim_socket("a")))
        wayland_garbage.sendall(b"\xff" * 64)
        _answers(two_outputs)

        # A capture reader that asks for frames and never reads them: others still get theirs.
        sleeper = stack.enter_context(_raw(two_outputs.capture))
        sleeper.sendall(b"FRAME X1\n" * 40)
        for output in ("X1", "X2"):
            wait_frame(two_outputs.capture, output, lambda _f: True, what="a frame")
        _answers(two_outputs)

        # Connections beyond the per-socket limit are closed without a greeting.
        flood = [stack.enter_context(_raw(two_outputs.control)) for _ in range(40)]
        greeted = sum(_lines(sock, 1) == [b"LAYOUT 1"] for sock in flood)
        assert 0 < greeted < len(flood)
        assert probe(two_outputs.weston.socket, timeout=30.0).state is Liveness.ANSWERING
    _answers(two_outputs)


# ---------- one output: headless ----------

HEADLESS = (640, 480)


@contextlib.contextmanager
def _headless(layout_so: Path, sockets: Path) -> Iterator[Compositor]:
    with weston_support.headless(
        size=HEADLESS, config=layout_ini(sockets), args=[f"--shell={layout_so}"]
    ) as w:
        yield Compositor(weston=w, sockets=sockets)


@pytest.fixture(scope="module")
def one_output(layout_so: Path) -> Iterator[Compositor]:
    with _sockets_dir() as sockets, _headless(layout_so, sockets) as compositor:
        yield compositor


def test_client_ignoring_the_size_is_centred_on_black(one_output: Compositor) -> None:
    path = one_output.claim_socket("c")
    with LayoutControl(one_output.control) as control:
        control.create_claim_socket(path, "headless", "claim-c")
        try:
            with SolidClient(path, colour=BLUE, size=(64, 48), honour_configure=False) as client:
                frame = wait_frame(
                    one_output.capture,
                    "headless",
                    lambda f: f.rgb(320, 240) == BLUE,
                    what="the blue client",
                )
                assert client.configured[-1] == HEADLESS
        finally:
            control.remove_claim_socket("claim-c")
    header = frame.header
    assert (header.width, header.height, header.stride) == (640, 480, 640 * 4)
    assert (header.pixel_format, header.y_flip) == ("XRGB8888", False)
    # 64x48 centred on 640x480 covers (288, 216)-(351, 263).
    inside = [(288, 216), (351, 216), (288, 263), (351, 263)]
    outside = [(287, 216), (352, 240), (320, 215), (320, 264), (0, 0), (639, 479)]
    assert [frame.rgb(x, y) for x, y in inside] == [BLUE] * 4
    assert [frame.rgb(x, y) for x, y in outside] == [BLACK] * 6


@pytest.mark.parametrize(
    ("request_line", "code"),
    [
        (b"FRAME nowhere\n", b"no-output"),
        (b"FRAME nowhere 320x240\n", b"no-output"),
        (b"FRAME\n", b"bad-request"),
        (b"FRAME a b\n", b"bad-request"),
        (b"SNAP headless\n", b"bad-request"),
        (b"FRAME headless 0x0\n", b"bad-request"),
        (b"FRAME headless 15x240\n", b"bad-request"),
        (b"FRAME headless 320x16385\n", b"bad-request"),
        (b"FRAME headless 99999999999x240\n", b"bad-request"),
        (b"FRAME headless 0320x240\n", b"bad-request"),
        (b"FRAME headless +320x240\n", b"bad-request"),
        (b"FRAME headless 320X240\n", b"bad-request"),
        (b"FRAME headless 320x\n", b"bad-request"),
        (b"FRAME headless x240\n", b"bad-request"),
        (b"FRAME headless 320x240x2\n", b"bad-request"),
        (b"FRAME headless 320x240 1\n", b"bad-request"),
        (b"FRAME headless \n", b"bad-request"),
    ],
    ids=[
        "unknown-output",
        "unknown-output-bounded",
        "no-output-named",
        "two-outputs",
        "verb",
        "bound-zero",
        "bound-below-16",
        "bound-above-16384",
        "bound-overflow",
        "bound-leading-zero",
        "bound-sign",
        "bound-capital-x",
        "bound-no-height",
        "bound-no-width",
        "bound-three-sides",
        "bound-then-more",
        "trailing-space",
    ],
)
def test_malformed_capture_requests_get_error_replies(
    one_output: Compositor, request_line: bytes, code: bytes
) -> None:
    with _raw(one_output.capture) as sock:
        assert _lines(sock, 1) == [b"LAYOUT-CAPTURE 1"]
        sock.sendall(request_line + b"FRAME headless\n")
        error, header = _lines(sock, 2)
        assert error.split(b" ")[:2] == [b"ERR", code]
        assert header.startswith(b"FRAME 640 480 ")


def test_outstanding_frames_share_one_bound(one_output: Compositor) -> None:
    with _raw(one_output.capture) as sock, sock.makefile("rb") as replies:
        assert replies.readline() == b"LAYOUT-CAPTURE 1\n"
        # One write: the second request is parsed while the first is outstanding.
        sock.sendall(b"FRAME headless 320x240\nFRAME headless\nFRAME headless 320x240\n")
        got: list[str] = []
        while len(got) < 3:
            line = replies.readline().decode().rstrip("\n")
            if line.startswith("ERR "):
                got.append(line.split(" ")[1])
                continue
            header = layout_module.parse_frame_header(line)
            assert len(replies.read(header.size)) == header.size
            got.append(f"{header.width}x{header.height}")
        assert sorted(got) == ["320x240", "320x240", "busy"]


# ---------- bounded frames: the module's box filter ----------

# A client of this size that ignores the size asked for is centred, at ((w - 65) // 2,
# (h - 49) // 2): on 642x482 its right and bottom edges cut blocks of 2 and 3 pixels, on
# 3840x2160 its left and top edges cut blocks of 2.
RECT_SIZE = (65, 49)
ODD = (642, 482)
UHD = (3840, 2160)
# Past this many pixels a frame is compared around the rectangle and along its edges only.
_COMPARE_ALL_MAX = 400_000


def _mean(inside: int, outside: int, count: int, within: int) -> int:
    """One byte's rounded-half-up mean over `count` pixels, `within` of them `inside`."""
    return (inside * within + outside * (count - within) + count // 2) // count


@dataclass(frozen=True, slots=True)
class Scene:
    """What an output shows: `background` everywhere, `colour` over `rect` (x, y, w, h)."""

    size: tuple[int, int]
    rect: tuple[int, int, int, int]
    background: tuple[int, int, int]
    colour: tuple[int, int, int]

    def block(self, i: int, j: int, factor: int) -> tuple[int, int, int]:
        """Pixel (i, j) of the frame shrunk by `factor`: its block's mean, the edges cut."""
        width, height = self.size
        left, top = i * factor, j * factor
        right, bottom = min(width, left + factor), min(height, top + factor)
        x, y, w, h = self.rect
        within = max(0, min(right, x + w) - max(left, x)) * max(0, min(bottom, y + h) - max(top, y))
        count = (right - left) * (bottom - top)
        red, green, blue = (
            _mean(c, b, count, within) for c, b in zip(self.colour, self.background, strict=True)
        )
        return red, green, blue

    def points(self, factor: int) -> list[tuple[int, int]]:
        """Frame pixels to compare: all of a small frame; else the blocks around the
        rectangle, and the frame's first and last rows and columns."""
        width = -(-self.size[0] // factor)
        height = -(-self.size[1] // factor)
        if width * height <= _COMPARE_ALL_MAX:
            return [(i, j) for j in range(height) for i in range(width)]
        x, y, w, h = self.rect
        window = [
            (i, j)
            for j in range(y // factor - 2, (y + h) // factor + 3)
            for i in range(x // factor - 2, (x + w) // factor + 3)
        ]
        rows = [(i, j) for j in (0, height - 1) for i in range(width)]
        columns = [(i, j) for i in (0, width - 1) for j in range(height)]
        return window + rows + columns

    def mismatches(self, frame: Frame, factor: int) -> list[str]:
        """Where `frame` differs from the scene shrunk by `factor` (the first ten)."""
        wrong = []
        for i, j in self.points(factor):
            got, want = frame.rgb(i, j), self.block(i, j, factor)
            if got != want:
                wrong.append(f"({i}, {j}): {got} != {want}")
        return wrong[:10]


@contextlib.contextmanager
def _scene(
    layout_so: Path,
    size: tuple[int, int],
    renderer: weston_support.Renderer,
    transform: str = "normal",
) -> Iterator[tuple[Compositor, Scene]]:
    """Headless weston of mode `size`, turned by weston.ini's `transform`: a red client fills
    it, a blue RECT_SIZE one is centred. The scene is what a person before the monitor sees
    (a quarter turn swaps its sides)."""
    upright = (size[1], size[0]) if transform.endswith(("90", "270")) else size
    with _sockets_dir() as sockets:
        config = layout_ini(sockets) + f"\n[output]\nname=headless\ntransform={transform}\n"
        with weston_support.headless(
            size=size, renderer=renderer, config=config, args=[f"--shell={layout_so}"]
        ) as w:
            compositor = Compositor(weston=w, sockets=sockets)
            path = compositor.claim_socket("s")
            with LayoutControl(compositor.control) as control:
                control.create_claim_socket(path, "headless", "claim-s")
            x, y = (upright[0] - RECT_SIZE[0]) // 2, (upright[1] - RECT_SIZE[1]) // 2
            scene = Scene(size=upright, rect=(x, y, *RECT_SIZE), background=RED, colour=BLUE)
            with SolidClient(path, colour=RED):
                wait_frame(compositor.capture, "headless", all_one(RED), what="red over headless")
                with SolidClient(path, colour=BLUE, size=RECT_SIZE, honour_configure=False):
                    wait_frame(
                        compositor.capture,
                        "headless",
                        lambda f: f.rgb(x, y) == BLUE and not scene.mismatches(f, 1),
                        what="the blue client centred on the red one",
                        max_size=None,
                    )
                    yield compositor, scene


@pytest.fixture(scope="module")
def odd_scene(layout_so: Path) -> Iterator[tuple[Compositor, Scene]]:
    with _scene(layout_so, ODD, "pixman") as scene:
        yield scene


@pytest.fixture(scope="module")
def gl_scene(layout_so: Path) -> Iterator[tuple[Compositor, Scene]]:
    with _scene(layout_so, ODD, "gl") as scene:
        yield scene


# (bound, factor, frame size) on 642x482.
BOUNDS = [
    ((642, 482), 1, (642, 482)),
    ((4000, 4000), 1, (642, 482)),
    ((321, 241), 2, (321, 241)),
    ((320, 241), 3, (214, 161)),
    ((321, 240), 3, (214, 161)),
    ((100, 1000), 7, (92, 69)),
    ((16, 16), 41, (16, 12)),
]
BOUND_IDS = ["exact", "larger", "half", "width-one-short", "height-one-short", "narrow", "smallest"]


@pytest.mark.parametrize(("max_size", "factor", "size"), BOUNDS, ids=BOUND_IDS)
def test_bounded_frame_is_the_block_mean_at_the_smallest_factor(
    odd_scene: tuple[Compositor, Scene],
    max_size: tuple[int, int],
    factor: int,
    size: tuple[int, int],
) -> None:
    compositor, scene = odd_scene
    with LayoutCapture(compositor.capture, timeout=WAIT_S) as capture:
        frame = capture.frame("headless", max_size)
    header = frame.header
    assert (header.width, header.height, header.stride) == (*size, size[0] * 4)
    assert (header.size, header.y_flip) == (size[0] * 4 * size[1], False)
    assert scene.mismatches(frame, factor) == []


@pytest.mark.parametrize(("max_size", "factor", "size"), BOUNDS, ids=BOUND_IDS)
def test_bounded_frame_from_gl_is_top_first_with_top_anchored_blocks(
    gl_scene: tuple[Compositor, Scene],
    max_size: tuple[int, int],
    factor: int,
    size: tuple[int, int],
) -> None:
    # 482 rows are not a multiple of 3, 7 or 41: blocks anchored at the bottom (where gl's
    # framebuffer starts) would straddle the blue rectangle's edges differently.
    compositor, scene = gl_scene
    with LayoutCapture(compositor.capture, timeout=WAIT_S) as capture:
        frame = capture.frame("headless", max_size)
    assert (frame.header.width, frame.header.height, frame.header.y_flip) == (*size, False)
    assert scene.mismatches(frame, factor) == []


def test_gl_on_the_cpu_is_said_with_the_pixman_overlay(
    gl_scene: tuple[Compositor, Scene], odd_scene: tuple[Compositor, Scene]
) -> None:
    # Headless GL here is Mesa's llvmpipe: the case of a card Mesa has no driver for.
    gl_log = gl_scene[0].weston.process.log_text()
    assert re.search(r"layout: GL renderer: .*llvmpipe", gl_log), gl_log[-2000:]
    assert "GL runs on the CPU" in gl_log and "deploy/overlays/pixman-renderer" in gl_log
    pixman_log = odd_scene[0].weston.process.log_text()
    assert "layout: GL renderer" not in pixman_log and "GL runs on the CPU" not in pixman_log


def test_4k_frame_bounded_to_1080p_is_the_2x2_mean(layout_so: Path) -> None:
    with (
        _scene(layout_so, UHD, "pixman") as (compositor, scene),
        LayoutCapture(compositor.capture, timeout=WAIT_S) as capture,
    ):
        frame = capture.frame("headless", (1920, 1080))
    header = frame.header
    assert (header.width, header.height, header.stride, header.size) == (
        1920,
        1080,
        1920 * 4,
        1920 * 4 * 1080,
    )
    # The rectangle's top-left block holds one blue pixel of four; its edges, two.
    assert frame.rgb(943, 527) == (_mean(0, 255, 4, 1), 0, _mean(255, 0, 4, 1)) == (191, 0, 64)
    assert scene.mismatches(frame, 2) == []


# The blue rectangle is one pixel nearer the top-left corner than the bottom-right one (642 -
# 65 and 482 - 49 are odd), so a frame turned the wrong way, or mirrored, misplaces it.
@pytest.mark.parametrize("transform", ["rotate-90", "rotate-270", "flipped-rotate-180"])
def test_frames_of_a_turned_output_are_upright(layout_so: Path, transform: str) -> None:
    with (
        _scene(layout_so, ODD, "pixman", transform) as (compositor, scene),
        LayoutCapture(compositor.capture, timeout=WAIT_S) as capture,
    ):
        for max_size in (None, (321, 321), (100, 1000)):
            frame = capture.frame("headless", max_size)
            bound = max_size or scene.size
            factor = max(-(-side // most) for side, most in zip(scene.size, bound, strict=True))
            width, height = (-(-side // factor) for side in scene.size)
            assert (frame.header.width, frame.header.height) == (width, height)
            assert scene.mismatches(frame, factor) == [], (max_size, factor)


def test_claims_come_back_after_a_killed_compositor(layout_so: Path) -> None:
    with _sockets_dir() as sockets:
        path = sockets / "c.sock"
        with _headless(layout_so, sockets) as compositor:
            with LayoutControl(compositor.control) as control:
                control.create_claim_socket(path, "headless", "claim-c")
            compositor.weston.process.send_signal(signal.SIGKILL)
            compositor.weston.process.wait(timeout=WAIT_S)
        assert path.is_socket(), "SIGKILL leaves the claim's socket file behind"
        with _headless(layout_so, sockets) as compositor:
            with LayoutControl(compositor.control) as control:
                assert control.list_claim_sockets() == ()
                control.create_claim_socket(path, "headless", "claim-c")
            with SolidClient(path, colour=GREEN):
                wait_frame(
                    compositor.capture, "headless", all_one(GREEN), what="green over headless"
                )


def _asan_runtime() -> str:
    """The ASan runtime of the trixie root's cc (which build.sh compiles with), as a path
    inside the root: weston runs there."""
    found = subprocess.run(
        ["trixie-run", "sh", "-c", 'realpath "$(cc -print-file-name=libasan.so)"'],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    if not os.path.isabs(found):
        pytest.skip("no AddressSanitizer runtime for cc")
    return found


def test_under_address_sanitizer(tmp_path: Path) -> None:
    """A whole session (claims, clients, captures, hostile input, exit) in an ASan build.

    weston itself is not instrumented, so the runtime is preloaded; leak checking is off
    because weston's own allocations at exit are not this module's.
    """
    asan_so = build_layout(tmp_path, asan=True)
    with _sockets_dir() as sockets, tempfile.TemporaryDirectory(prefix="wa-") as runtime:
        ini = sockets / "weston.ini"
        ini.write_text(layout_ini(sockets))
        wayland = Path(runtime) / "wl-asan"
        argv = [
            "weston",
            "--backend=headless",
            "--renderer=pixman",
            f"--width={HEADLESS[0]}",
            f"--height={HEADLESS[1]}",
            f"--socket={wayland.name}",
            f"--config={ini}",
            f"--shell={asan_so}",
        ]
        env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "XDG_RUNTIME_DIR": runtime,
            "LD_PRELOAD": _asan_runtime(),
            "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
        }
        with running(
            argv,
            log_path=tmp_path / "weston.log",
            env=env,
            ready=lambda _p: probe(wayland, timeout=1.0).state is Liveness.ANSWERING,
            what="weston with the ASan layout shell answers",
        ) as process:
            compositor = Compositor(
                weston=weston_support.Weston(
                    process=process, runtime_dir=Path(runtime), socket=wayland
                ),
                sockets=sockets,
            )
            stays = _asan_session(compositor)
            try:
                stopped = process.stop()
            finally:
                stays.stop()
        log = process.log_text()
    assert "AddressSanitizer" not in log, log[-4000:]
    assert stopped.returncode == 0, log[-4000:]


def _wait_clients(control: LayoutControl, claim_uid: str, count: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while True:
        listed = {c.claim_uid: c.clients for c in control.list_claim_sockets()}
        if listed.get(claim_uid) == count:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"{claim_uid}: {listed.get(claim_uid)} clients, expected {count}")
        time.sleep(0.05)


def _asan_session(compositor: Compositor) -> SolidClient:
    """Exercises the module; returns a client still connected, for shutdown to tear down."""
    with LayoutControl(compositor.control) as control:
        control.create_claim_socket(compositor.claim_socket("a"), "headless", "claim-a")
        control.create_claim_socket(compositor.claim_socket("b"), "headless", "claim-b")
        with SolidClient(compositor.claim_socket("a"), colour=RED):
            wait_frame(compositor.capture, "headless", all_one(RED), what="red over headless")
            # Bounded frames: the 2x2 path, and a factor of 7 whose edge blocks are cut.
            for bound in ((320, 240), (100, 100)):
                wait_frame(
                    compositor.capture,
                    "headless",
                    all_one(RED),
                    what=f"red over headless within {bound}",
                    max_size=bound,
                )
            # I420 frames, whole and at the factor above, kept beside the packed ones.
            for i420_bound in (None, (100, 100)):
                wait_frame(compositor.capture, "headless", all_one_i420(RED),
                           what=f"red I420 within {i420_bound}", max_size=i420_bound, i420=True)
            with _raw(compositor.capture) as sleeper, _raw(compositor.control) as huge:
                sleeper.sendall(b"FRAME headless\n" * 20 + b"FRAME \x00\xff\n")
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    huge.sendall(os.urandom(64 * 1024))
                wait_frame(compositor.capture, "headless", lambda _f: True, what="a frame")
            # Over the object limit: disconnected from inside request dispatch.
            _sent, closed = region_flood(compositor.claim_socket("a"), count=50_000, timeout=WAIT_S)
            assert closed
            # Past the connection cap, and a popup and a subsurface clipped by the layer.
            with contextlib.ExitStack() as stack:
                socks = [stack.enter_context(_raw(compositor.claim_socket("a"))) for _ in range(34)]
                assert sum(_wayland_answers(sock) for sock in socks) == 31
            blue_y = i420.solid(2, 2, BLUE)[0]
            for how in ("popup", "subsurface"):
                with OverflowClient(
                    compositor.claim_socket("a"), colour=BLUE, how=how, offset=(-20, -20)
                ) as hostile:
                    wait_shown(hostile)
                    wait_frame(compositor.capture, "headless", all_one(BLUE), what="blue")
                    # Converted again after the repaint, from the kept packed frame.
                    wait_frame(compositor.capture, "headless", lambda f: f.pixels[0] == blue_y,
                               what="blue I420", max_size=(100, 100), i420=True)
        _wait_clients(control, "claim-a", 0)
        assert control.remove_claim_socket("claim-a") is True
        # claim-b stays, with a client, so that shutdown tears both down.
        stays = SolidClient(compositor.claim_socket("b"), colour=GREEN)
        wait_frame(compositor.capture, "headless", all_one(GREEN), what="green over headless")
        # Live configuration: a turn and a scale with a client shown, refusals, the list.
        control.configure("headless", transform="rotate-90", scale=2)
        wait_frame(compositor.capture, "headless", all_one(GREEN), what="green, turned")
        control.configure("headless", transform="normal", scale=1)
        with _raw(compositor.control) as raw:
            raw.sendall(
                b"CONFIGURE headless mode=320x240@59.9 transform=x\n"
                b"CONFIGURE headless mode=1x1\nCONFIGURE headless modeset=1\n"
                b"CONFIGURE " + b"h" * 63 + b" scale=2 scale=2 scale=2 scale=2 scale=2\n"
            )
            assert len(_lines(raw, 4)) == 4
        assert len(control.outputs()) == 1
    _answers(compositor)
    return stays


def test_claim_on_an_absent_output_shows_nothing(
    two_outputs: Compositor, claims: LayoutControl
) -> None:
    path = two_outputs.claim_socket("x")
    claims.create_claim_socket(path, "X3", "claim-x")
    with SolidClient(path, colour=RED) as client:
        wait_shown(client)
        for output in ("X1", "X2"):
            frame = wait_frame(two_outputs.capture, output, lambda _f: True, what="a frame")
            assert non_black_bbox(frame) is None, output
    assert client.configured[0] == (0, 0), "no output, so no size to ask for"


def test_capture_requests_are_bounded_and_for_one_output_at_a_time(
    two_outputs: Compositor,
) -> None:
    with _raw(two_outputs.capture) as sock, sock.makefile("rb") as replies:
        assert replies.readline() == b"LAYOUT-CAPTURE 1\n"
        # One write, so the module parses all of it in one go, before any frame is read.
        sock.sendall(b"FRAME X1\n" * 17 + b"FRAME X2\n")
        frames = 0
        errors: list[bytes] = []
        while frames < 16:
            line = replies.readline()
            if line.startswith(b"ERR "):
                errors.append(line.split(b" ")[1])
                continue
            header = layout_module.parse_frame_header(line.decode().rstrip("\n"))
            assert len(replies.read(header.size)) == header.size
            frames += 1
        assert errors == [b"busy", b"busy"]


# ---------- confinement: a claim's client draws on its own output only ----------


def _every_pixel(colour: tuple[int, int, int]) -> Callable[[Frame], bool]:
    def check(frame: Frame) -> bool:
        return not _off_pixels(frame, colour)

    return check


def _off_pixels(frame: Frame, colour: tuple[int, int, int]) -> int:
    header = frame.header
    return sum(frame.rgb(x, y) != colour for y in range(header.height) for x in range(header.width))


@pytest.mark.parametrize(
    ("how", "output", "offset"),
    [
        ("wide-right", "X1", (0, 0)),
        ("wide-left", "X2", (0, 0)),
        ("subsurface", "X1", (X1[0], 0)),
        ("subsurface", "X2", (-X2[0], 0)),
        ("popup", "X1", (X1[0], 0)),
        ("popup", "X2", (-X2[0], 0)),
    ],
    ids=[
        "wide-buffer",
        "wide-buffer-left",
        "subsurface",
        "subsurface-negative",
        "popup",
        "popup-negative",
    ],
)
def test_a_client_cannot_draw_on_the_neighbouring_output(
    two_outputs: Compositor,
    claims: LayoutControl,
    how: Overflow,
    output: str,
    offset: tuple[int, int],
) -> None:
    neighbour = "X2" if output == "X1" else "X1"
    claims.create_claim_socket(two_outputs.claim_socket("h"), output, "claim-hostile")
    claims.create_claim_socket(two_outputs.claim_socket("n"), neighbour, "claim-neighbour")
    with SolidClient(two_outputs.claim_socket("n"), colour=GREEN) as green:
        wait_shown(green)
        wait_frame(two_outputs.capture, neighbour, _every_pixel(GREEN), what="all green")
        # Mapped last, the hostile client is on top: without clipping its excess would show.
        with OverflowClient(
            two_outputs.claim_socket("h"), colour=RED, how=how, offset=offset
        ) as hostile:
            wait_shown(hostile)
            wait_frame(two_outputs.capture, output, _every_pixel(RED), what="all red")
            with LayoutCapture(two_outputs.capture, timeout=WAIT_S) as capture:
                for _ in range(3):
                    frame = capture.frame(neighbour)
                    off = _off_pixels(frame, GREEN)
                    print(f"{how} on {output}: {off} of {neighbour}'s pixels not green")
                    assert off == 0, f"{off} pixels of {neighbour} were overdrawn"


# ---------- bounds: what one claim's client may cost the compositor ----------

FLOOD = 500_000


def _weston_pid(root: int) -> int:
    """The weston process at or under `root` (it may run under trixie-run's sandbox)."""
    todo = [root]
    while todo:
        pid = todo.pop()
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/comm").read_text().strip() == "weston":
                return pid
            for task in Path(f"/proc/{pid}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
    pytest.fail(f"no weston process under pid {root}")


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    pytest.fail(f"no VmRSS for pid {pid}")


def test_a_request_flood_disconnects_the_client_and_weston_stays_small(
    two_outputs: Compositor, claims: LayoutControl
) -> None:
    flood_path = two_outputs.claim_socket("f")
    claims.create_claim_socket(flood_path, "X1", "claim-flood")
    claims.create_claim_socket(two_outputs.claim_socket("n"), "X2", "claim-neighbour")
    with SolidClient(two_outputs.claim_socket("n"), colour=GREEN) as green:
        wait_shown(green)
        wait_frame(two_outputs.capture, "X2", _every_pixel(GREEN), what="all green")
        pid = _weston_pid(two_outputs.weston.process.pid)
        before = _rss_kib(pid)
        started = time.monotonic()
        sent, closed = region_flood(flood_path, count=FLOOD, timeout=WAIT_S)
        elapsed = time.monotonic() - started
        after = _rss_kib(pid)
        print(
            f"create_region flood: {sent} of {FLOOD} sent in {elapsed:.1f} s, "
            f"disconnected={closed}; weston RSS {before} KiB -> {after} KiB"
        )
        assert closed, f"the flooding client was not disconnected after {sent} requests"
        assert sent < FLOOD
        assert after - before < 32 * 1024, f"weston grew from {before} to {after} KiB"
        assert "layout: claim claim-flood: client pid" in two_outputs.weston.process.log_text()
        # The other claim still draws, and the flooded claim still takes well-behaved clients.
        wait_frame(two_outputs.capture, "X2", _every_pixel(GREEN), what="all green")
        with SolidClient(flood_path, colour=RED):
            wait_frame(two_outputs.capture, "X1", _every_pixel(RED), what="all red")
        wait_frame(two_outputs.capture, "X2", _every_pixel(GREEN), what="still all green")


def _wayland_answers(sock: socket.socket) -> bool:
    """Send wl_display.sync; True when the callback's done comes back, False on close."""
    try:
        sock.sendall(struct.pack("<III", 1, 12 << 16, 2))
        data = b""
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                return False
            data += chunk
            # Events: wl_callback(2).done, wl_display.delete_id(2); done is enough.
            for offset in range(0, len(data) - 7, 4):
                if data[offset : offset + 4] == struct.pack("<I", 2):
                    return True
    except (BrokenPipeError, ConnectionResetError):
        return False


def test_connections_past_the_cap_on_a_claim_socket_are_refused(
    two_outputs: Compositor, claims: LayoutControl
) -> None:
    path = two_outputs.claim_socket("c")
    claims.create_claim_socket(path, "X1", "claim-capped")
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(_raw(path)) for _ in range(40)]
        answered = sum(_wayland_answers(sock) for sock in socks)
        print(f"claim socket: {answered} of {len(socks)} connections held")
        assert answered == 32
        (listed,) = claims.list_claim_sockets()
        assert listed.clients == 32
        assert "layout: claim claim-capped: 32 clients connected" in (
            two_outputs.weston.process.log_text()
        )
    # Once they are gone, new clients are taken again.
    with SolidClient(path, colour=RED):
        wait_frame(two_outputs.capture, "X1", _every_pixel(RED), what="all red")


# ---------- the control socket: claim sockets only under the claims directory ----------


@pytest.fixture(scope="module")
def confined(layout_so: Path) -> Iterator[Compositor]:
    """One headless output; `[layout] claims-dir=` is `<sockets>/claims`."""
    with _sockets_dir() as sockets:
        (sockets / "claims").mkdir()
        config = layout_ini(sockets) + f"claims-dir={sockets / 'claims'}/\n"
        with weston_support.headless(
            size=HEADLESS, config=config, args=[f"--shell={layout_so}"]
        ) as w:
            yield Compositor(weston=w, sockets=sockets)


def _escapes(compositor: Compositor) -> dict[str, Path]:
    sockets = compositor.sockets
    outside = sockets / "outside"
    outside.mkdir(exist_ok=True)
    link = sockets / "claims" / "link"
    if not link.is_symlink():
        link.symlink_to(outside)
    return {
        "westons-own-socket": compositor.weston.socket,
        "control-socket": compositor.control,
        "sibling": sockets / "beside.sock",
        "dot-dot": sockets / "claims" / ".." / "outside" / "up.sock",
        "symlinked-dir": link / "through.sock",
    }


@pytest.mark.parametrize(
    "target", ["westons-own-socket", "control-socket", "sibling", "dot-dot", "symlinked-dir"]
)
def test_create_outside_the_claims_dir_is_refused(confined: Compositor, target: str) -> None:
    path = _escapes(confined)[target]
    before = path.lstat() if os.path.lexists(path) else None
    with LayoutControl(confined.control) as control:
        try:
            with pytest.raises(LayoutReplyError) as caught:
                control.create_claim_socket(path, "headless", "claim-escape")
            assert caught.value.code == "bad-path", caught.value
            assert control.list_claim_sockets() == ()
        finally:
            for listed in control.list_claim_sockets():
                control.remove_claim_socket(listed.claim_uid)
    after = path.lstat() if os.path.lexists(path) else None
    assert (before and (before.st_ino, before.st_mode)) == (after and (after.st_ino, after.st_mode))
    assert list((confined.sockets / "outside").iterdir()) == []
    _answers(confined)


def test_create_under_the_claims_dir_makes_a_world_connectable_socket(
    confined: Compositor,
) -> None:
    claim_dir = confined.sockets / "claims" / "uid-1"
    claim_dir.mkdir()
    path = claim_dir / "wayland-0"
    with LayoutControl(confined.control) as control:
        control.create_claim_socket(path, "headless", "uid-1.dev")
        try:
            assert stat.S_ISSOCK(path.lstat().st_mode)
            assert path.lstat().st_mode & 0o777 == 0o666
            assert confined.control.lstat().st_mode & 0o777 == 0o660
            with SolidClient(path, colour=RED):
                wait_frame(confined.capture, "headless", all_one(RED), what="red")
        finally:
            control.remove_claim_socket("uid-1.dev")
    assert not path.exists()
    assert "layout: claim sockets only under" in confined.weston.process.log_text()


def test_without_claims_dir_create_takes_any_path_and_says_so(two_outputs: Compositor) -> None:
    assert "no [layout] claims-dir=" in two_outputs.weston.process.log_text()


# ---------- live output configuration (CONFIGURE, OUTPUTS) and per-claim wl_output ----------
#
# Three x11 outputs side by side: the middle one, X2, changes while a client of another claim
# (on X3, right of it) and one of a third (on X1) keep their connection and their pixels.

L1, L2, L3 = (320, 240), (240, 180), (200, 150)


@dataclass
class Tenants:
    compositor: Compositor
    control: LayoutControl
    changed: SolidClient  # on X2, the output that changes
    left: SolidClient  # on X1
    right: SolidClient  # on X3, re-placed when X2's width changes


@pytest.fixture(scope="module")
def three_outputs(layout_so: Path) -> Iterator[Compositor]:
    with (
        _sockets_dir() as sockets,
        weston_support.x11(
            [L1, L2, L3], config=layout_ini(sockets), args=[f"--shell={layout_so}"]
        ) as w,
    ):
        yield Compositor(weston=w, sockets=sockets)


@pytest.fixture
def tenants(three_outputs: Compositor) -> Iterator[Tenants]:
    """A client on each output's claim, shown; every output back as it was afterwards."""
    c = three_outputs
    with LayoutControl(c.control, timeout=WAIT_S) as control:
        for name, output in (("left", "X1"), ("changed", "X2"), ("right", "X3")):
            control.create_claim_socket(c.claim_socket(name), output, name)
        with (
            SolidClient(c.claim_socket("left"), colour=RED, bind_outputs=True) as left,
            SolidClient(c.claim_socket("changed"), colour=BLUE) as changed,
            SolidClient(c.claim_socket("right"), colour=GREEN, bind_outputs=True) as right,
        ):
            for client in (left, changed, right):
                wait_shown(client)
            wait_frame(c.capture, "X1", all_one(RED), what="red over all of X1")
            wait_frame(c.capture, "X2", all_one(BLUE), what="blue over all of X2")
            wait_frame(c.capture, "X3", all_one(GREEN), what="green over all of X3")
            yield Tenants(c, control, changed, left, right)
            control.configure("X2", mode=f"{L2[0]}x{L2[1]}", transform="normal", scale=1)
        for claim in control.list_claim_sockets():
            control.remove_claim_socket(claim.claim_uid)


def _states(control: LayoutControl) -> dict[str, layout_module.OutputState]:
    return {state.name: state for state in control.outputs()}


def _configured(client: SolidClient, size: tuple[int, int]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not client.configured or client.configured[-1] != size:
        if time.monotonic() > deadline:
            pytest.fail(f"the client was never configured to {size}: {client.configured}")
        client.roundtrip(WAIT_S)


def _others_untouched(t: Tenants, left_events: int) -> None:
    """The other tenants' connections answer and their outputs still show only them; X1's
    tenant heard nothing of X2's change, X3's only that its own output moved."""
    for client in (t.left, t.right):
        assert client.roundtrip(WAIT_S), "another tenant's wl_display.sync went unanswered"
        assert not client.closed.is_set() and client.error is None
    wait_frame(t.compositor.capture, "X1", _every_pixel(RED), what="red over every pixel of X1")
    wait_frame(t.compositor.capture, "X3", _every_pixel(GREEN), what="green over every pixel of X3")
    assert t.left.output_events == left_events
    assert t.right.output_x == [_states(t.control)["X3"].x]


def test_outputs_reports_every_output_left_to_right(tenants: Tenants) -> None:
    states = _states(tenants.control)
    assert [(s.name, s.x, s.logical_width, s.logical_height) for s in states.values()] == [
        ("X1", 0, *L1),
        ("X2", L1[0], *L2),
        ("X3", L1[0] + L2[0], *L3),
    ]
    x2 = states["X2"]
    assert (x2.width, x2.height, x2.refresh_mhz, x2.transform, x2.scale) == (
        *L2,
        60000,
        "normal",
        1,
    )
    assert [(m.width, m.height) for m in x2.modes] == [L2]


@pytest.mark.parametrize(
    ("change", "logical", "pixels"),
    [
        ({"mode": "320x200"}, (320, 200), (320, 200)),
        ({"transform": "rotate-90"}, (L2[1], L2[0]), L2),
        ({"scale": 2}, (L2[0] // 2, L2[1] // 2), L2),
        ({"mode": "300x160@60", "transform": "rotate-270", "scale": 2}, (80, 150), (300, 160)),
    ],
    ids=["mode", "rotate-90", "scale-2", "all-three"],
)
def test_configure_changes_one_output_live(
    tenants: Tenants, change: dict[str, object], logical: tuple[int, int], pixels: tuple[int, int]
) -> None:
    t = tenants
    left_events = t.left.output_events
    state = t.control.configure("X2", **change)  # type: ignore[arg-type]
    assert (state.logical_width, state.logical_height) == logical
    assert (state.width, state.height) == pixels
    assert state.transform == change.get("transform", "normal")
    assert state.scale == change.get("scale", 1)
    assert _states(t.control)["X3"].x == L1[0] + logical[0], "X3 not re-placed right of X2"
    # The claim's client is configured to the output's new logical size (swapped after a
    # quarter turn) and fills every pixel of it; a frame comes at the framebuffer's new size,
    # turned upright as a person before the monitor sees it (sides swapped after a quarter
    # turn).
    _configured(t.changed, logical)
    frame = wait_frame(
        t.compositor.capture, "X2", _every_pixel(BLUE), what="blue over every pixel of X2"
    )
    quarter_turn = str(change.get("transform", "normal")).endswith(("90", "270"))
    upright = (pixels[1], pixels[0]) if quarter_turn else pixels
    assert (frame.header.width, frame.header.height) == upright
    _others_untouched(t, left_events)
    # And back: X3 returns to its place.
    t.control.configure("X2", mode=f"{L2[0]}x{L2[1]}", transform="normal", scale=1)
    assert _states(t.control)["X3"].x == L1[0] + L2[0]
    _configured(t.changed, L2)
    _others_untouched(t, left_events)


@pytest.mark.parametrize(
    ("line", "code", "field"),
    [
        (b"CONFIGURE X2 mode=320x\n", b"bad-mode", b"mode"),
        (b"CONFIGURE X2 mode=0x200\n", b"bad-mode", b"mode"),
        (b"CONFIGURE X2 mode=320x200@60.0001\n", b"bad-mode", b"mode"),
        (b"CONFIGURE X2 mode=320x200 transform=rotate-45\n", b"bad-transform", b"transform"),
        # The short name weston's protocol headers suggest: only weston.ini's names are taken.
        (b"CONFIGURE X2 transform=flipped-90\n", b"bad-transform", b"transform"),
        (b"CONFIGURE X2 transform=rotate-90 scale=9\n", b"bad-scale", b"scale"),
        (b"CONFIGURE X2 transform=rotate-90 scale=0\n", b"bad-scale", b"scale"),
        (b"CONFIGURE X2 transform=rotate-90 scale=02\n", b"bad-scale", b"scale"),
        (b"CONFIGURE X2 mode=320x200 colour=red\n", b"bad-request", b"request"),
        (b"CONFIGURE X2 scale=2 scale=3\n", b"bad-request", b"request"),
        (b"CONFIGURE X2 transform=rotate-90 modeset=2\n", b"bad-request", b"request"),
        (b"CONFIGURE X9 mode=320x200\n", b"not-found", b"output"),
        # Below the x11 backend's smallest window: the switch fails, the output is put back.
        (b"CONFIGURE X2 mode=100x100 transform=rotate-90\n", b"failed", b"mode"),
        # The x11 backend has no DPMS, so it cannot power-cycle an output.
        (b"CONFIGURE X2 modeset=1\n", b"unsupported", b"modeset"),
        (b"CONFIGURE X2 power=off\n", b"unsupported", b"power"),
        (b"CONFIGURE X2 power=on\n", b"bad-request", b"request"),
        (b"CONFIGURE X2 modeset=1 power=off\n", b"bad-request", b"request"),
    ],
    ids=[
        "mode-malformed",
        "mode-zero",
        "refresh-4-decimals",
        "transform",
        "transform-short-flipped",
        "scale-9",
        "scale-0",
        "scale-leading-zero",
        "unknown-key",
        "repeated-key",
        "modeset-2",
        "no-output",
        "switch-fails",
        "no-dpms",
        "power-off-no-dpms",
        "power-on",
        "modeset-and-power-off",
    ],
)
def test_bad_configure_names_the_field_and_changes_nothing(
    tenants: Tenants, line: bytes, code: bytes, field: bytes
) -> None:
    t = tenants
    left_events = t.left.output_events
    before = _states(t.control)
    with _raw(t.compositor.control) as sock:
        assert _lines(sock, 1) == [b"LAYOUT 1"]
        sock.sendall(line)
        (error,) = _lines(sock, 1)
    assert error.split(b" ")[:3] == [b"ERR", code, field], error
    assert _states(t.control) == before
    assert t.changed.configured[-1] == L2
    wait_frame(t.compositor.capture, "X2", _every_pixel(BLUE), what="blue over every pixel of X2")
    _others_untouched(t, left_events)


def test_configure_speaks_weston_ini_transform_names(tenants: Tenants) -> None:
    """Every transform weston.ini (and so a Display or a claim) names is taken and answered
    by that same name."""
    t = tenants
    assert layout_module.TRANSFORMS == weston_ini.TRANSFORMS
    for transform in weston_ini.TRANSFORMS:
        assert t.control.configure("X2", transform=transform).transform == transform
        assert _states(t.control)["X2"].transform == transform
    t.control.configure("X2", transform="normal")


def test_configure_errors_are_typed(tenants: Tenants) -> None:
    with pytest.raises(layout_module.LayoutUnsupported) as unsupported:
        tenants.control.configure("X2", modeset=True)
    assert unsupported.value.field == "modeset"
    with pytest.raises(layout_module.LayoutConfigureFailed) as failed:
        tenants.control.configure("X2", mode="100x100")
    assert (failed.value.code, failed.value.field) == ("failed", "mode")
    with pytest.raises(layout_module.LayoutOutputNotFound):
        tenants.control.configure("X9", scale=2)
    with pytest.raises(layout_module.LayoutUsageError, match="transform"):
        tenants.control.configure("X2", transform="sideways")


def test_a_claims_client_is_offered_only_its_outputs_wl_output(tenants: Tenants) -> None:
    t = tenants
    for client in (t.left, t.changed, t.right):
        assert client.outputs_offered == 1
    with SolidClient(t.compositor.weston.socket, colour=RED, bind_outputs=True) as main:
        wait_shown(main)
        assert main.outputs_offered == 3
    # A claim on an output that does not exist offers no wl_output at all.
    t.control.create_claim_socket(t.compositor.claim_socket("none"), "X9", "none")
    with SolidClient(t.compositor.claim_socket("none"), colour=RED) as nowhere:
        wait_shown(nowhere)
        assert nowhere.outputs_offered == 0


def test_headless_cannot_switch_modes_live(one_output: Compositor) -> None:
    with LayoutControl(one_output.control, timeout=WAIT_S) as control:
        with pytest.raises(layout_module.LayoutUnsupported) as caught:
            control.configure("headless", mode="320x240")
        assert caught.value.field == "mode"
        # The mode it runs needs no switch, and scale and transform need no backend support.
        state = control.configure("headless", mode=f"{HEADLESS[0]}x{HEADLESS[1]}", scale=2)
        assert (state.logical_width, state.logical_height, state.scale) == (320, 240, 2)
        state = control.configure("headless", scale=1)
        assert (state.logical_width, state.logical_height) == HEADLESS


def test_rotating_the_rightmost_output_resizes_its_client(tenants: Tenants) -> None:
    """No output moves then, so nothing but the module's own follow-up re-sizes the client."""
    t = tenants
    left_events = t.left.output_events
    try:
        state = t.control.configure("X3", transform="rotate-90")
        assert (state.logical_width, state.logical_height) == (L3[1], L3[0])
        _configured(t.right, (L3[1], L3[0]))
        wait_frame(
            t.compositor.capture, "X3", _every_pixel(GREEN), what="green over every pixel of X3"
        )
        assert t.changed.roundtrip(WAIT_S)
        assert t.left.output_events == left_events
    finally:
        t.control.configure("X3", transform="normal")
    _configured(t.right, L3)


# ---------- PROBE: the DRM master's re-detection ----------

def test_probe_is_unsupported_where_weston_drives_no_card(
    tenants: Tenants, one_output: Compositor
) -> None:
    """x11 and headless have no card to re-detect: a typed refusal the operator reads as
    "no re-probe here", and every output left as it was (its power state included)."""
    before = _states(tenants.control)
    assert all(state.powered for state in before.values())
    with pytest.raises(layout_module.LayoutUnsupported) as unsupported:
        tenants.control.probe()
    assert unsupported.value.field == "probe"
    assert "only the DRM backend drives a card" in unsupported.value.text
    assert _states(tenants.control) == before
    with LayoutControl(one_output.control, timeout=WAIT_S) as control, \
            pytest.raises(layout_module.LayoutUnsupported):
        control.probe()


SHA256_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include "sha256.h"
int main(void) {
    static unsigned char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, stdin);
    unsigned char out[SHA256_BYTES];
    sha256(buf, n, out);
    for (int i = 0; i < SHA256_BYTES; i++) printf("%02x", out[i]);
    return 0;
}
"""


def test_the_probes_edid_digest_is_the_operators(tmp_path: Path) -> None:
    """PROBE's digest is compared with the one the operator takes of sysfs's `edid`
    (hashlib's SHA-256): the module's own SHA-256 must agree on every length around the
    block and padding edges, and on EDIDs."""
    import hashlib

    main = tmp_path / "main.c"
    main.write_text(SHA256_MAIN)
    binary = tmp_path / "sha256"
    subprocess.run(["trixie-run", "cc", "-O2", "-Wall", "-Werror", f"-I{HERE}", "-o",
                    os.fspath(binary), os.fspath(main), os.fspath(HERE / "sha256.c")],
                   check=True, timeout=120)
    inputs = [bytes(range(256))[:n] for n in (0, 1, 55, 56, 63, 64, 65, 119, 120, 128)]
    inputs += [bytes(i % 251 for i in range(n)) for n in (256, 1000, 4096)]
    inputs += [build_edid(EdidParams(serial_number=n, name=f"M{n}")) for n in (1, 2)]
    for data in inputs:
        got = subprocess.run([os.fspath(binary)], input=data, capture_output=True, check=True,
                             timeout=30).stdout.decode()
        assert got == hashlib.sha256(data).hexdigest(), len(data)
