from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from libdisplay.compositor.wayland import (
    Connection,
    Global,
    Liveness,
    Output,
    Transform,
    WaylandConnectError,
    WaylandMessageError,
    WaylandProtocolError,
    WaylandUsageError,
    list_outputs,
    probe,
    socket_path,
)
from libdisplay.hardware.modes import Mode
from tests.support import weston
from tests.support.weston import Weston

# Bounds for waits on a real compositor: generous, CI is a noisy 2-core machine.
ANSWER_TIMEOUT_S = 10.0
HUNG_DEADLINE_S = 0.5
HUNG_RETURNS_WITHIN_S = 15.0  # returns by its deadline, not never; a loaded machine adds seconds


@pytest.fixture
def compositor(tmp_path: Path) -> Iterator[Weston]:
    with weston.headless(size=(1280, 720), log_dir=tmp_path) as running:
        yield running


@contextlib.contextmanager
def _stopped(process_pid: int) -> Iterator[None]:
    """SIGSTOP for the block; SIGCONT whatever happens in it."""
    os.kill(process_pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(process_pid, signal.SIGCONT)


@pytest.mark.parametrize(
    ("display", "environ", "expected"),
    [
        (None, {"XDG_RUNTIME_DIR": "/run/user/0"}, "/run/user/0/wayland-0"),
        (None, {"XDG_RUNTIME_DIR": "/rt", "WAYLAND_DISPLAY": "wl-1"}, "/rt/wl-1"),
        ("wl-2", {"XDG_RUNTIME_DIR": "/rt", "WAYLAND_DISPLAY": "wl-1"}, "/rt/wl-2"),
        ("/var/run/display.liken.sh/wayland-0", {}, "/var/run/display.liken.sh/wayland-0"),
    ],
    ids=["default-name", "from-env", "argument-wins", "absolute-needs-no-runtime-dir"],
)
def test_socket_path_resolves_like_libwayland(
    display: str | None, environ: dict[str, str], expected: str
) -> None:
    assert socket_path(display, environ=environ) == Path(expected)


@pytest.mark.parametrize(
    ("display", "environ", "message"),
    [
        ("wl-1", {}, "XDG_RUNTIME_DIR is not set: cannot resolve WAYLAND_DISPLAY='wl-1'"),
        (None, {"WAYLAND_DISPLAY": "", "XDG_RUNTIME_DIR": "/rt"}, "WAYLAND_DISPLAY is empty"),
    ],
    ids=["no-runtime-dir", "empty-display"],
)
def test_socket_path_rejects_unresolvable_names(
    display: str | None, environ: dict[str, str], message: str
) -> None:
    with pytest.raises(WaylandUsageError, match=message):
        socket_path(display, environ=environ)


@pytest.mark.parametrize(
    ("path", "timeout", "message"),
    [
        ("/tmp/wl", 0.0, "probe timeout must be positive, got 0.0"),
        ("/tmp/" + "x" * 200, 1.0, "cannot use socket path '/tmp/xxx"),
    ],
    ids=["zero-timeout", "path-longer-than-sun-path"],
)
def test_probe_rejects_bad_arguments(path: str, timeout: float, message: str) -> None:
    with pytest.raises(WaylandUsageError, match=message):
        probe(path, timeout=timeout)


def test_probe_answers_on_a_running_compositor(compositor: Weston) -> None:
    result = probe(compositor.socket, timeout=ANSWER_TIMEOUT_S)
    assert result.state is Liveness.ANSWERING, result.detail
    assert result.round_trip_s is not None
    assert 0 < result.round_trip_s < ANSWER_TIMEOUT_S
    assert "globals" in result.detail


def test_probe_says_hung_while_stopped_within_its_deadline(compositor: Weston) -> None:
    with _stopped(compositor.process.pid):
        before = time.monotonic()
        result = probe(compositor.socket, timeout=HUNG_DEADLINE_S)
        took = time.monotonic() - before
    assert result.state is Liveness.HUNG, result.detail
    assert result.round_trip_s is None
    assert "no answer to wl_display.sync" in result.detail
    assert took < HUNG_RETURNS_WITHIN_S
    # SIGCONT lets it serve the queued connection and then ours.
    assert probe(compositor.socket, timeout=ANSWER_TIMEOUT_S).state is Liveness.ANSWERING


def test_probe_says_hung_when_a_stopped_compositor_backlog_is_full(compositor: Weston) -> None:
    pending: list[socket.socket] = []
    try:
        with _stopped(compositor.process.pid):
            for _ in range(10000):  # libwayland listens with a backlog of 128
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
                pending.append(sock)
                if sock.connect_ex(os.fspath(compositor.socket)) == errno.EAGAIN:
                    break
            before = time.monotonic()
            result = probe(compositor.socket, timeout=HUNG_DEADLINE_S)
            took = time.monotonic() - before
    finally:
        for sock in pending:
            sock.close()
    assert result.state is Liveness.HUNG, result.detail
    assert "EAGAIN" in result.detail
    assert took < HUNG_RETURNS_WITHIN_S


def test_probe_says_dead_on_the_socket_a_killed_compositor_left(compositor: Weston) -> None:
    compositor.process.send_signal(signal.SIGKILL)
    assert compositor.process.wait(timeout=ANSWER_TIMEOUT_S) == -signal.SIGKILL
    assert compositor.socket.is_socket()  # weston had no chance to remove it
    # A helper client weston forked but that has not exec'd yet (CLOEXEC) can hold the
    # listener a moment longer: seen under load as accepted-then-reset. That is dead too;
    # once the helper is gone the stale socket refuses.
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while True:
        result = probe(compositor.socket, timeout=ANSWER_TIMEOUT_S)
        assert result.state is Liveness.DEAD, result.detail
        if "ECONNREFUSED" in result.detail or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    assert "ECONNREFUSED" in result.detail


@pytest.mark.parametrize(
    ("relative", "code"),
    [("wayland-9", "ENOENT"), ("no-such-dir/wayland-0", "ENOENT"), ("a-file/wayland-0", "ENOTDIR")],
    ids=["no-socket-file", "no-directory", "parent-is-a-file"],
)
def test_probe_says_absent_where_no_socket_exists(tmp_path: Path, relative: str, code: str) -> None:
    (tmp_path / "a-file").write_text("")
    result = probe(tmp_path / relative, timeout=1.0)
    assert result.state is Liveness.ABSENT
    assert code in result.detail


@pytest.mark.parametrize(
    ("size", "config", "mode", "transform", "scale", "logical_size"),
    [
        ((1280, 720), None, Mode(1280, 720, 60000), Transform.NORMAL, 1, (1280, 720)),
        (
            None,
            "[output]\nname=headless\nmode=800x600\nscale=2\ntransform=rotate-90\n",
            Mode(1600, 1200, 60000),  # weston multiplies the configured size by the scale
            Transform.ROTATE_90,
            2,
            (600, 800),
        ),
    ],
    ids=["size-from-flags", "scaled-and-rotated-from-ini"],
)
def test_list_outputs_describes_the_headless_output(
    tmp_path: Path,
    size: tuple[int, int] | None,
    config: str | None,
    mode: Mode,
    transform: Transform,
    scale: int,
    logical_size: tuple[int, int],
) -> None:
    with weston.headless(size=size, config=config, log_dir=tmp_path) as running:
        outputs = list_outputs(running.socket, timeout=ANSWER_TIMEOUT_S)
    assert len(outputs) == 1
    (output,) = outputs
    assert (output.name, output.make, output.model) == ("headless", "weston", "headless")
    assert output.mode == mode
    assert output.preferred_mode == mode
    assert output.modes == (mode,)
    assert (output.transform, output.scale) == (transform, scale)
    assert output.position == (0, 0)
    assert output.logical_size == logical_size


def test_list_outputs_gives_each_x11_output_its_configured_mode(tmp_path: Path) -> None:
    sizes = [(640, 360), (1024, 768), (800, 600)]
    with weston.x11(sizes, log_dir=tmp_path) as running:
        outputs = list_outputs(running.socket, timeout=ANSWER_TIMEOUT_S)
    by_name = {output.name: output for output in outputs}
    assert sorted(by_name) == ["X1", "X2", "X3"]
    for index, (width, height) in enumerate(sizes, 1):
        output = by_name[f"X{index}"]
        assert output.mode == Mode(width, height, 60000)
        assert output.make == "weston-X11"
        assert output.logical_size == (width, height)
    # The backend lays the outputs out left to right in order.
    assert [by_name[name].position for name in ("X1", "X2", "X3")] == [(0, 0), (640, 0), (1664, 0)]


def test_a_protocol_error_from_the_compositor_is_typed(compositor: Weston) -> None:
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    with Connection.connect(compositor.socket) as conn:
        output = next(g for g in conn.get_registry(deadline=deadline) if g.interface == "wl_output")
        conn.bind(output, version=output.version + 1, handler=None)
        with pytest.raises(WaylandProtocolError) as failure:
            conn.roundtrip(deadline=deadline)
    error = failure.value
    assert (error.interface, error.code) == ("wl_registry", 0)  # WL_DISPLAY_ERROR_INVALID_OBJECT
    assert "invalid version for global wl_output" in error.message


# A scripted compositor for what a real weston does not show: a connection closed
# without an answer, and a malformed message. Its bytes are packed here, independently of
# the module's encoder.


def _message(object_id: int, opcode: int, body: bytes = b"") -> bytes:
    return struct.pack("<II", object_id, (8 + len(body)) << 16 | opcode) + body


def _uints(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}I", *values)


def _ints(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}i", *values)


def _string(text: str) -> bytes:
    raw = text.encode() + b"\0"
    return _uints(len(raw)) + raw + b"\0" * (-len(raw) % 4)


# The client's first flush: wl_display.get_registry(new id 2) then wl_display.sync(new id 3).
_REGISTRY_AND_SYNC = _message(1, 1, _uints(2)) + _message(1, 0, _uints(3))
_SYNC_DONE_3 = _message(3, 0, _uints(0)) + _message(1, 1, _uints(3))


@contextlib.contextmanager
def _scripted_compositor(path: Path, script: list[tuple[bytes, bytes]]) -> Iterator[list[bytes]]:
    """Accept one client; for each step read exactly the expected request bytes, then reply.

    Yields what the client sent, one entry per step, for the test to compare.
    """
    received: list[bytes] = []
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(os.fspath(path))
    listener.listen(1)
    listener.settimeout(ANSWER_TIMEOUT_S)

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(ANSWER_TIMEOUT_S)
            for expected, reply in script:
                got = b""
                while len(got) < len(expected):
                    chunk = conn.recv(len(expected) - len(got))
                    if not chunk:
                        return
                    got += chunk
                received.append(got)
                conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield received
    finally:
        thread.join(ANSWER_TIMEOUT_S)
        listener.close()
    assert not thread.is_alive()


def test_list_outputs_prefers_wl_output_v4_name_and_decodes_every_field(tmp_path: Path) -> None:
    globals_ = _message(2, 0, _uints(7) + _string("wl_output") + _uints(4)) + _message(
        2, 0, _uints(8) + _string("zxdg_output_manager_v1") + _uints(3)
    )
    # The client binds wl_output as 4 and the manager as 5, asks for xdg_output 6, syncs on 7.
    binds_and_sync = (
        _message(2, 0, _uints(7) + _string("wl_output") + _uints(4, 4))
        + _message(2, 0, _uints(8) + _string("zxdg_output_manager_v1") + _uints(3, 5))
        + _message(5, 1, _uints(6, 4))
        + _message(1, 0, _uints(7))
    )
    output_events = (
        _message(4, 0, _ints(10, 20, 600, 340, 0) + _string("ACME") + _string("M1") + _ints(3))
        + _message(4, 1, _uints(0x1) + _ints(1280, 720, 59940))
        + _message(4, 1, _uints(0x2) + _ints(1920, 1080, 60000))
        + _message(4, 1, _uints(0x0) + _ints(1024, 768, 75000))
        + _message(4, 3, _ints(2))
        + _message(4, 4, _string("DP-1"))
        + _message(4, 5, _string("ACME M1 (DP-1)"))
        + _message(4, 2)
    )
    xdg_events = (
        _message(6, 0, _ints(10, 20))
        + _message(6, 1, _ints(640, 360))
        + _message(6, 3, _string("xdg-name"))
        + _message(6, 4, _string("xdg description"))
        + _message(6, 2)
    )
    script = [
        (_REGISTRY_AND_SYNC, globals_ + _SYNC_DONE_3),
        (
            binds_and_sync,
            output_events + xdg_events + _message(7, 0, _uints(0)) + _message(1, 1, _uints(7)),
        ),
    ]
    with _scripted_compositor(tmp_path / "wl", script) as received:
        outputs = list_outputs(tmp_path / "wl", timeout=ANSWER_TIMEOUT_S)
    assert received == [expected for expected, _ in script]
    assert outputs == (
        Output(
            name="DP-1",
            description="ACME M1 (DP-1)",
            make="ACME",
            model="M1",
            physical_size_mm=(600, 340),
            mode=Mode(1280, 720, 59940),
            preferred_mode=Mode(1920, 1080, 60000),
            modes=(Mode(1280, 720, 59940), Mode(1920, 1080, 60000), Mode(1024, 768, 75000)),
            transform=Transform.ROTATE_270,
            scale=2,
            position=(10, 20),
            logical_size=(640, 360),
        ),
    )


_GEOMETRY_4 = _message(4, 0, _ints(0, 0, 0, 0, 0) + _string("ACME") + _string("M1") + _ints(0))
_CURRENT_MODE_4 = _message(4, 1, _uints(0x1) + _ints(640, 480, 60000))


@pytest.mark.parametrize(
    ("output_events", "message"),
    [
        (_GEOMETRY_4 + _message(4, 1, _uints(0x2) + _ints(640, 480, 60000)), "no current mode"),
        (_CURRENT_MODE_4, "no geometry"),
        (
            _message(4, 0, _ints(0, 0, 0, 0, 0) + _string("ACME") + _string("M1") + _ints(9))
            + _CURRENT_MODE_4,
            "wl_output.geometry: transform 9 is not 0..7",
        ),
    ],
    ids=["no-current-mode", "no-geometry", "unknown-transform"],
)
def test_list_outputs_rejects_an_output_it_cannot_describe(
    tmp_path: Path, output_events: bytes, message: str
) -> None:
    bind_and_sync = _message(2, 0, _uints(7) + _string("wl_output") + _uints(3, 4)) + _message(
        1, 0, _uints(5)
    )
    script = [
        (
            _REGISTRY_AND_SYNC,
            _message(2, 0, _uints(7) + _string("wl_output") + _uints(3)) + _SYNC_DONE_3,
        ),
        (bind_and_sync, output_events + _message(4, 2) + _message(5, 0, _uints(0))),
    ]
    with (
        _scripted_compositor(tmp_path / "wl", script),
        pytest.raises(WaylandMessageError, match=message),
    ):
        list_outputs(tmp_path / "wl", timeout=ANSWER_TIMEOUT_S)


def test_list_outputs_raises_the_connect_error_where_no_socket_exists(tmp_path: Path) -> None:
    with pytest.raises(WaylandConnectError, match="ENOENT") as failure:
        list_outputs(tmp_path / "wayland-9", timeout=1.0)
    assert failure.value.errno == errno.ENOENT


def test_bind_before_get_registry_is_a_usage_error(tmp_path: Path) -> None:
    with (
        _scripted_compositor(tmp_path / "wl", []),
        Connection.connect(tmp_path / "wl") as conn,
        pytest.raises(WaylandUsageError, match="bind before get_registry"),
    ):
        conn.bind(Global(name=7, interface="wl_output", version=3), version=3, handler=None)


def test_probe_says_dead_when_the_socket_closes_without_answering(tmp_path: Path) -> None:
    with _scripted_compositor(tmp_path / "wl", []):
        result = probe(tmp_path / "wl", timeout=ANSWER_TIMEOUT_S)
    assert result.state is Liveness.DEAD
    assert "closed" in result.detail


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (struct.pack("<II", 2, 4 << 16), "message to object 2 has bad size 4"),
        (
            _message(2, 0, _uints(7, 4) + b"wl_o"),
            "wl_registry@2 event 0: string is not NUL-terminated",
        ),
        (_message(2, 0, _uints(7, 99)), "wl_registry@2 event 0: message ends inside an argument"),
    ],
    ids=["size-below-header", "unterminated-string", "truncated-argument"],
)
def test_malformed_events_raise_a_typed_error(tmp_path: Path, reply: bytes, message: str) -> None:
    with (
        _scripted_compositor(tmp_path / "wl", [(_REGISTRY_AND_SYNC, reply)]),
        pytest.raises(WaylandMessageError, match=message),
    ):
        probe(tmp_path / "wl", timeout=ANSWER_TIMEOUT_S)
