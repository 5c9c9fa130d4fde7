"""The layout shell in real weston 10: placement per claim, the control and capture sockets.

The module is compiled once per session from this directory's build.sh. Two outputs come
from weston's x11 backend on Xvfb (X1 320x240 at x=0, X2 400x300 at x=320); one from the
headless backend. Placement is checked through the module's own capture socket.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from libdisplay import layout as layout_module
from libdisplay.layout import (
    Frame,
    LayoutCapture,
    LayoutControl,
    LayoutReplyError,
)
from libdisplay.processes import running
from libdisplay.wayland import Liveness, probe
from tests.support import weston as weston_support
from tests.support.layout import SolidClient, Wish
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
    capture_path: Path, output: str, check: Callable[[Frame], bool], *, what: str
) -> Frame:
    """Capture `output` until `check` holds; the last frame's failure is reported on timeout."""
    deadline = time.monotonic() + WAIT_S
    with LayoutCapture(capture_path, timeout=WAIT_S) as capture:
        while True:
            frame = capture.frame(output)
            if check(frame):
                return frame
            if time.monotonic() > deadline:
                pytest.fail(f"{output}: {what} not seen within {WAIT_S:g} s")


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
    # X2 sits right of X1, at x = X1 width.
    wish = Wish(fullscreen_on_output_at_x=X1[0], maximize=True)
    with SolidClient(two_outputs.claim_socket("a"), colour=BLUE, wish=wish) as client:
        wait_frame(two_outputs.capture, "X1", all_one(BLUE), what="blue over all of X1")
        x2 = wait_frame(two_outputs.capture, "X2", lambda _f: True, what="a frame")
        assert non_black_bbox(x2) is None
        assert client.configured[-1] == X1


def test_simple_shm_is_centred_on_its_claims_output(
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
        # 250x250, centred on 400x300: (75, 25)-(324, 274), sampled on even columns.
        left, top, right, bottom = bbox
        assert 74 <= left <= 76 and 24 <= top <= 26, bbox
        assert 322 <= right <= 325 and 272 <= bottom <= 275, bbox
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
    assert probe(compositor.weston.socket, timeout=5.0).state is Liveness.ANSWERING
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
        assert probe(two_outputs.weston.socket, timeout=5.0).state is Liveness.ANSWERING
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
        (b"FRAME\n", b"bad-request"),
        (b"FRAME a b\n", b"bad-request"),
        (b"SNAP headless\n", b"bad-request"),
    ],
    ids=["unknown-output", "no-output-named", "two-outputs", "verb"],
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
    found = subprocess.run(
        ["cc", "-print-file-name=libasan.so"], check=True, capture_output=True, text=True
    ).stdout.strip()
    if not os.path.isabs(found):
        pytest.skip("no AddressSanitizer runtime for cc")
    return os.path.realpath(found)


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
            "--backend=headless-backend.so",
            "--use-pixman",
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
            with _raw(compositor.capture) as sleeper, _raw(compositor.control) as huge:
                sleeper.sendall(b"FRAME headless\n" * 20 + b"FRAME \x00\xff\n")
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    huge.sendall(os.urandom(64 * 1024))
                wait_frame(compositor.capture, "headless", lambda _f: True, what="a frame")
        _wait_clients(control, "claim-a", 0)
        assert control.remove_claim_socket("claim-a") is True
        # claim-b stays, with a client, so that shutdown tears both down.
        stays = SolidClient(compositor.claim_socket("b"), colour=GREEN)
        wait_frame(compositor.capture, "headless", all_one(GREEN), what="green over headless")
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
