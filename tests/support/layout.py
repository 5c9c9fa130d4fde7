"""Wayland clients for layout tests, in the standard library: one that draws a solid colour,
and `capture_attempt`, which asks weston_capture_v1 for a frame as an ordinary client would.

It speaks just enough of the wire protocol to show an xdg_toplevel with a wl_shm buffer:
`wl_compositor`, `wl_shm` (the pool's memfd goes over SCM_RIGHTS), `xdg_wm_base` (answering
pings) and optionally `wl_output` (to ask for fullscreen on a chosen output, which the layout
shell must ignore). It runs on its own thread so a test can capture while it is connected;
`shown` is set once the compositor has processed the commit of its first buffer.
`outputs_offered` counts the wl_output globals the compositor offered it; with
`bind_outputs` it binds each of them and counts the events they send (`output_events`).
`roundtrip` asks for a `wl_display.sync` on the same connection and waits for its answer.
"""

from __future__ import annotations

import mmap
import os
import select
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from libdisplay.compositor.wayland import EventArgs

_HEADER = struct.Struct("<II")
_WORD = struct.Struct("<I")
_XRGB8888 = 1
_POLL_MS = 50

# wl_display requests and events.
_SYNC, _GET_REGISTRY = 0, 1
_EV_ERROR = 0
# Request opcodes of the interfaces used.
_REGISTRY_BIND = 0
_COMPOSITOR_CREATE_SURFACE = 0
_SHM_CREATE_POOL = 0
_POOL_CREATE_BUFFER = 0
_SURFACE_ATTACH, _SURFACE_DAMAGE, _SURFACE_COMMIT = 1, 2, 6
_WM_BASE_GET_XDG_SURFACE, _WM_BASE_PONG = 2, 3
_XDG_SURFACE_GET_TOPLEVEL, _XDG_SURFACE_ACK_CONFIGURE = 1, 4
_TOPLEVEL_SET_MAXIMIZED, _TOPLEVEL_SET_FULLSCREEN = 9, 11


class ClientError(Exception):
    """The client could not connect, or the compositor sent it a protocol error."""


@dataclass(frozen=True, slots=True)
class Wish:
    """What the client asks of the shell besides being shown: fullscreen elsewhere, maximize."""

    fullscreen_on_output_at_x: int | None = None
    maximize: bool = False


def _encode(*args: int | str) -> bytes:
    out = bytearray()
    for arg in args:
        if isinstance(arg, str):
            raw = arg.encode() + b"\0"
            out += _WORD.pack(len(raw)) + raw + b"\0" * (-len(raw) % 4)
        else:
            out += _WORD.pack(arg)
    return bytes(out)


def _message(object_id: int, opcode: int, body: bytes) -> bytes:
    return _HEADER.pack(object_id, (len(body) + _HEADER.size) << 16 | opcode) + body


class SolidClient:
    """One toplevel filled with `colour`; `size` is used when the configure leaves it to us.

    With `honour_configure=False` it always draws `size`, like weston-simple-shm, so the
    shell has to centre it. `configured` records every size the shell asked for.
    """

    def __init__(
        self,
        socket_path: Path,
        *,
        colour: tuple[int, int, int],
        size: tuple[int, int] = (64, 48),
        honour_configure: bool = True,
        wish: Wish | None = None,
        bind_outputs: bool = False,
    ) -> None:
        self.colour = colour
        self.bind_outputs = bind_outputs
        self.output_events = 0
        self._roundtrips: list[threading.Event] = []
        self._roundtrip_lock = threading.Lock()
        self.size = size
        self.honour_configure = honour_configure
        self.wish = wish or Wish()
        self.configured: list[tuple[int, int]] = []
        self.shown = threading.Event()
        self.closed = threading.Event()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            self._sock.connect(os.fspath(socket_path))
        except OSError as exc:
            self._sock.close()
            raise ClientError(f"cannot connect to {socket_path}: {exc}") from exc
        self._handlers: dict[int, Callable[[int, EventArgs], None]] = {1: self._on_display}
        self._next_id = 2
        self._globals: dict[str, list[int]] = {}
        self._output_x: dict[int, int] = {}
        self._ids: dict[str, int] = {}
        self._pending_size: tuple[int, int] = (0, 0)
        self._drawn: tuple[int, int] | None = None
        self._shown_callback = 0
        self._in = bytearray()
        self._thread = threading.Thread(target=self._run, name="solid-client", daemon=True)
        self._thread.start()

    @property
    def output_x(self) -> list[int]:
        """The x each bound wl_output last reported in its geometry event."""
        return list(self._output_x.values())

    @property
    def outputs_offered(self) -> int:
        return len(self._globals.get("wl_output", []))

    def roundtrip(self, timeout: float) -> bool:
        """True when a wl_display.sync sent now on this connection is answered in time."""
        done = threading.Event()
        with self._roundtrip_lock:
            self._roundtrips.append(done)
        return done.wait(timeout)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._sock.close()

    def __enter__(self) -> SolidClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # ---------- plumbing ----------

    def _new(self, handler: Callable[[int, EventArgs], None] | None = None) -> int:
        object_id = self._next_id
        self._next_id += 1
        if handler is not None:
            self._handlers[object_id] = handler
        return object_id

    def _send(self, object_id: int, opcode: int, *args: int | str, fd: int | None = None) -> None:
        data = _message(object_id, opcode, _encode(*args))
        if fd is None:
            self._sock.sendall(data)
        else:
            socket.send_fds(self._sock, [data], [fd])

    def _sync(self, on_done: Callable[[], None]) -> int:
        callback = self._new(lambda _opcode, _args: on_done())
        self._send(1, _SYNC, callback)
        return callback

    def _run(self) -> None:
        try:
            self._send(1, _GET_REGISTRY, self._new(self._on_registry))
            self._sync(self._bind_and_create)
            while not self._stop.is_set():
                with self._roundtrip_lock:
                    asked, self._roundtrips = self._roundtrips, []
                for done in asked:
                    self._sync(done.set)
                ready, _, _ = select.select([self._sock], [], [], _POLL_MS / 1000)
                if ready and not self._receive():
                    self.closed.set()
                    return
        except OSError:
            self.closed.set()
        except BaseException as exc:  # reported to the test through `error`
            self.error = exc
            self.closed.set()

    def _receive(self) -> bool:
        data = self._sock.recv(65536)
        if not data:
            return False
        self._in += data
        while len(self._in) >= _HEADER.size:
            object_id, word = _HEADER.unpack_from(self._in)
            size = word >> 16
            if len(self._in) < size:
                break
            payload = bytes(self._in[_HEADER.size : size])
            del self._in[:size]
            handler = self._handlers.get(object_id)
            if handler is not None:
                handler(word & 0xFFFF, EventArgs(payload, f"object {object_id}"))
        return True

    # ---------- events ----------

    def _on_display(self, opcode: int, args: EventArgs) -> None:
        if opcode == _EV_ERROR:
            object_id, code, message = args.uint(), args.uint(), args.string()
            raise ClientError(f"protocol error on object {object_id} code {code}: {message}")

    def _on_registry(self, opcode: int, args: EventArgs) -> None:
        if opcode == 0:
            name, interface, _version = args.uint(), args.string(), args.uint()
            self._globals.setdefault(interface, []).append(name)

    def _bind(
        self,
        interface: str,
        version: int,
        handler: Callable[[int, EventArgs], None] | None = None,
        *,
        index: int = 0,
    ) -> int:
        names = self._globals.get(interface)
        if not names:
            raise ClientError(f"the compositor has no {interface}")
        object_id = self._new(handler)
        self._send(2, _REGISTRY_BIND, names[index], interface, version, object_id)
        return object_id

    def _bind_and_create(self) -> None:
        ids = self._ids
        ids["compositor"] = self._bind("wl_compositor", 4)
        ids["shm"] = self._bind("wl_shm", 1)
        ids["wm_base"] = self._bind("xdg_wm_base", 1, self._on_wm_base)
        if self.wish.fullscreen_on_output_at_x is not None or self.bind_outputs:
            for index in range(len(self._globals.get("wl_output", []))):
                output = self._new()
                self._handlers[output] = self._output_handler(output)
                self._send(
                    2, _REGISTRY_BIND, self._globals["wl_output"][index], "wl_output", 2, output
                )
            self._sync(self._create_window)
        else:
            self._create_window()

    def _output_handler(self, output: int) -> Callable[[int, EventArgs], None]:
        def on_event(opcode: int, args: EventArgs) -> None:
            self.output_events += 1
            if opcode == 0:  # geometry: x, y, ...
                self._output_x[output] = args.sint()

        return on_event

    def _create_window(self) -> None:
        ids = self._ids
        ids["surface"] = self._new()
        self._send(ids["compositor"], _COMPOSITOR_CREATE_SURFACE, ids["surface"])
        ids["xdg_surface"] = self._new(self._on_xdg_surface)
        self._send(ids["wm_base"], _WM_BASE_GET_XDG_SURFACE, ids["xdg_surface"], ids["surface"])
        ids["toplevel"] = self._new(self._on_toplevel)
        self._send(ids["xdg_surface"], _XDG_SURFACE_GET_TOPLEVEL, ids["toplevel"])
        wanted_x = self.wish.fullscreen_on_output_at_x
        if wanted_x is not None:
            matches = [oid for oid, x in self._output_x.items() if x == wanted_x]
            if not matches:
                raise ClientError(f"no wl_output at x={wanted_x}: {self._output_x}")
            self._send(ids["toplevel"], _TOPLEVEL_SET_FULLSCREEN, matches[0])
        if self.wish.maximize:
            self._send(ids["toplevel"], _TOPLEVEL_SET_MAXIMIZED)
        self._send(ids["surface"], _SURFACE_COMMIT)

    def _on_wm_base(self, opcode: int, args: EventArgs) -> None:
        if opcode == 0:  # ping
            self._send(self._ids["wm_base"], _WM_BASE_PONG, args.uint())

    def _on_toplevel(self, opcode: int, args: EventArgs) -> None:
        if opcode == 0:  # configure: width, height, states
            self._pending_size = (args.sint(), args.sint())
            self.configured.append(self._pending_size)

    def _on_xdg_surface(self, opcode: int, args: EventArgs) -> None:
        if opcode != 0:
            return
        self._send(self._ids["xdg_surface"], _XDG_SURFACE_ACK_CONFIGURE, args.uint())
        width, height = self._pending_size
        if not self.honour_configure or width <= 0 or height <= 0:
            width, height = self.size
        if self._drawn != (width, height):
            self._attach(width, height)
        self._send(self._ids["surface"], _SURFACE_COMMIT)
        if not self._shown_callback:
            self._shown_callback = self._sync(self.shown.set)

    def _buffer(self, width: int, height: int) -> int:
        """A new wl_buffer of `width` x `height` pixels of this client's colour."""
        stride = width * 4
        size = stride * height
        red, green, blue = self.colour
        fd = os.memfd_create("solid", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            with mmap.mmap(fd, size) as pixels:
                pixels.write(bytes((blue, green, red, 0xFF)) * (width * height))
            pool = self._new()
            self._send(self._ids["shm"], _SHM_CREATE_POOL, pool, size, fd=fd)
        finally:
            os.close(fd)
        buffer = self._new()
        self._send(pool, _POOL_CREATE_BUFFER, buffer, 0, width, height, stride, _XRGB8888)
        return buffer

    def _attach(self, width: int, height: int) -> None:
        buffer = self._buffer(width, height)
        self._send(self._ids["surface"], _SURFACE_ATTACH, buffer, 0, 0)
        self._send(self._ids["surface"], _SURFACE_DAMAGE, 0, 0, width, height)
        self._drawn = (width, height)


_CAPTURE_CREATE, _SOURCE_CAPTURE = 1, 1
_SOURCE_FRAMEBUFFER = 1
_EV_FORMAT, _EV_SIZE, _EV_COMPLETE, _EV_RETRY, _EV_FAILED = 0, 1, 2, 3, 4
_WL_SHM_XRGB8888, _WL_SHM_ARGB8888 = 1, 0
_DRM_XRGB8888, _DRM_ARGB8888 = 0x34325258, 0x34325241


def capture_attempt(socket_path: Path, *, timeout: float = 10.0) -> str:
    """Ask weston for a frame of its first output over weston_capture_v1, as any client can.

    Returns "complete", or "failed: <message>" (e.g. "failed: unauthorized" when no
    screenshot authority admits this client). A shm buffer of the announced size and format
    is used, so that only the compositor's policy decides. Object ids are allocated in
    order, as libwayland requires: registry 2, syncs 3 and 8, wl_shm 4, wl_output 5,
    weston_capture_v1 6, its source 7, the pool 9 and the buffer 10.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    sock.settimeout(timeout)
    sock.connect(os.fspath(socket_path))
    globals_: dict[str, int] = {}
    source: dict[str, int] = {}
    outcome: list[str] = []
    buffer_in = bytearray()

    def send(object_id: int, opcode: int, *args: int | str, fd: int | None = None) -> None:
        data = _message(object_id, opcode, _encode(*args))
        if fd is None:
            sock.sendall(data)
        else:
            socket.send_fds(sock, [data], [fd])

    def pump(until: Callable[[], bool]) -> None:
        while not until():
            data = sock.recv(65536)
            if not data:
                raise ClientError("the compositor closed the connection")
            buffer_in.extend(data)
            while len(buffer_in) >= _HEADER.size:
                object_id, word = _HEADER.unpack_from(buffer_in)
                size = word >> 16
                if len(buffer_in) < size:
                    break
                args = EventArgs(bytes(buffer_in[_HEADER.size : size]), f"object {object_id}")
                del buffer_in[:size]
                on_event(object_id, word & 0xFFFF, args)

    def on_event(object_id: int, opcode: int, args: EventArgs) -> None:
        if object_id == 1 and opcode == _EV_ERROR:
            raise ClientError(f"protocol error {args.uint()} {args.uint()}: {args.string()}")
        if object_id == 2 and opcode == 0:  # wl_registry.global
            name, interface = args.uint(), args.string()
            globals_.setdefault(interface, name)
        elif object_id == 3:  # the sync after get_registry
            globals_["done"] = 1
        elif object_id == 7:  # the capture source
            if opcode == _EV_FORMAT:
                source["format"] = args.uint()
            elif opcode == _EV_SIZE:
                source["width"], source["height"] = args.sint(), args.sint()
            elif opcode == _EV_COMPLETE:
                outcome.append("complete")
            elif opcode == _EV_RETRY:
                outcome.append("retry")
            elif opcode == _EV_FAILED:
                outcome.append(f"failed: {args.string()}")
        elif object_id == 8:  # the sync after create
            source["synced"] = 1

    try:
        send(1, _GET_REGISTRY, 2)
        send(1, _SYNC, 3)
        pump(lambda: "done" in globals_)
        for interface in ("wl_shm", "wl_output", "weston_capture_v1"):
            if interface not in globals_:
                raise ClientError(f"the compositor has no {interface}")
        send(2, _REGISTRY_BIND, globals_["wl_shm"], "wl_shm", 1, 4)
        send(2, _REGISTRY_BIND, globals_["wl_output"], "wl_output", 1, 5)
        send(2, _REGISTRY_BIND, globals_["weston_capture_v1"], "weston_capture_v1", 1, 6)
        send(6, _CAPTURE_CREATE, 5, _SOURCE_FRAMEBUFFER, 7)
        send(1, _SYNC, 8)
        pump(lambda: "synced" in source)
        width, height = source.get("width", 1), source.get("height", 1)
        drm_format = source.get("format", _DRM_XRGB8888)
        shm_format = {_DRM_XRGB8888: _WL_SHM_XRGB8888, _DRM_ARGB8888: _WL_SHM_ARGB8888}.get(
            drm_format, drm_format
        )
        size = width * 4 * height
        fd = os.memfd_create("capture-attempt", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            send(4, _SHM_CREATE_POOL, 9, size, fd=fd)
        finally:
            os.close(fd)
        send(9, _POOL_CREATE_BUFFER, 10, 0, width, height, width * 4, shm_format)
        send(7, _SOURCE_CAPTURE, 10)
        pump(lambda: bool(outcome))
        return outcome[0]
    finally:
        sock.close()
