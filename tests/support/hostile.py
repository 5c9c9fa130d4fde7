"""Hostile Wayland clients for the layout shell's tests, in the standard library.

`OverflowClient` accepts the fullscreen configure and then tries to put pixels outside its
output: a buffer wider than the window geometry it declares, a subsurface placed beside
its toplevel, or an xdg_popup offset beside it. `region_flood` sends a bounded flood of
`wl_compositor.create_region` requests on one connection, to exhaust the compositor's memory.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import Literal

from libdisplay.compositor.wayland import EventArgs
from tests.support.layout import SolidClient, _encode, _message

Overflow = Literal["wide-right", "wide-left", "subsurface", "popup"]

_SYNC, _GET_REGISTRY = 0, 1
_REGISTRY_BIND = 0
_COMPOSITOR_CREATE_SURFACE, _COMPOSITOR_CREATE_REGION = 0, 1
_SURFACE_ATTACH, _SURFACE_DAMAGE, _SURFACE_COMMIT = 1, 2, 6
_SUBCOMPOSITOR_GET_SUBSURFACE = 1
_SUBSURFACE_SET_POSITION = 1
_WM_BASE_CREATE_POSITIONER, _WM_BASE_GET_XDG_SURFACE = 1, 2
_XDG_SURFACE_GET_POPUP, _XDG_SURFACE_SET_WINDOW_GEOMETRY, _XDG_SURFACE_ACK_CONFIGURE = 2, 3, 4
_POSITIONER_SET_SIZE, _POSITIONER_SET_ANCHOR_RECT = 1, 2
_POSITIONER_SET_ANCHOR, _POSITIONER_SET_GRAVITY, _POSITIONER_SET_OFFSET = 3, 4, 6
_ANCHOR_TOP_LEFT, _GRAVITY_BOTTOM_RIGHT = 5, 8


def _signed(value: int) -> int:
    """An int argument as the wire's 32-bit word (two's complement)."""
    return value & 0xFFFFFFFF


class OverflowClient(SolidClient):
    """A claimed toplevel of `colour` that also draws outside its output, by `how`:

    - wide-right: a buffer three times the configured width, window geometry at its left
      third (the configured size), so two widths stick out to the right;
    - wide-left: the same buffer, geometry at its right third: two widths out to the left;
    - subsurface: a second surface, the configured size, at `offset` from the toplevel
      (wl_subsurface.set_position; may be negative);
    - popup: an xdg_popup the configured size, at `offset` from the toplevel's corner.

    `shown` is set once the compositor has processed the commit that shows the overflow.
    """

    def __init__(
        self,
        socket_path: Path,
        *,
        colour: tuple[int, int, int],
        how: Overflow,
        offset: tuple[int, int] = (0, 0),
    ) -> None:
        self.how = how
        self.offset = offset
        self._extra: dict[str, int] = {}
        self._popup_size = (0, 0)
        super().__init__(socket_path, colour=colour)

    def _bind_and_create(self) -> None:
        if self.how == "subsurface":
            self._ids["subcompositor"] = self._bind("wl_subcompositor", 1)
        super()._bind_and_create()

    def _show(self, surface: int, buffer: int, width: int, height: int) -> None:
        self._send(surface, _SURFACE_ATTACH, buffer, 0, 0)
        self._send(surface, _SURFACE_DAMAGE, 0, 0, width, height)
        self._send(surface, _SURFACE_COMMIT)

    def _on_xdg_surface(self, opcode: int, args: EventArgs) -> None:
        if opcode != 0:
            return
        self._send(self._ids["xdg_surface"], _XDG_SURFACE_ACK_CONFIGURE, args.uint())
        width, height = self._pending_size
        if width <= 0 or height <= 0:
            width, height = self.size
        if self._drawn == (width, height):
            self._send(self._ids["surface"], _SURFACE_COMMIT)
            return
        surface = self._ids["surface"]
        if self.how in ("wide-right", "wide-left"):
            buffer = self._buffer(3 * width, height)
            x = 0 if self.how == "wide-right" else 2 * width
            self._send(
                self._ids["xdg_surface"], _XDG_SURFACE_SET_WINDOW_GEOMETRY, x, 0, width, height
            )
            self._show(surface, buffer, 3 * width, height)
        else:
            self._send(
                self._ids["xdg_surface"], _XDG_SURFACE_SET_WINDOW_GEOMETRY, 0, 0, width, height
            )
            if self.how == "subsurface" and "child" not in self._extra:
                self._subsurface(width, height)
            self._show(surface, self._buffer(width, height), width, height)
        self._drawn = (width, height)
        if self.how == "popup" and "popup" not in self._extra:
            self._popup(width, height)
        elif not self._shown_callback:
            self._shown_callback = self._sync(self.shown.set)

    def _subsurface(self, width: int, height: int) -> None:
        child = self._extra["child"] = self._new()
        self._send(self._ids["compositor"], _COMPOSITOR_CREATE_SURFACE, child)
        sub = self._new()
        self._send(
            self._ids["subcompositor"],
            _SUBCOMPOSITOR_GET_SUBSURFACE,
            sub,
            child,
            self._ids["surface"],
        )
        self._send(sub, _SUBSURFACE_SET_POSITION, *map(_signed, self.offset))
        # Synchronised (the default): shown by the parent's next commit.
        self._show(child, self._buffer(width, height), width, height)

    def _popup(self, width: int, height: int) -> None:
        positioner = self._new()
        self._send(self._ids["wm_base"], _WM_BASE_CREATE_POSITIONER, positioner)
        self._send(positioner, _POSITIONER_SET_SIZE, width, height)
        self._send(positioner, _POSITIONER_SET_ANCHOR_RECT, 0, 0, 1, 1)
        self._send(positioner, _POSITIONER_SET_ANCHOR, _ANCHOR_TOP_LEFT)
        self._send(positioner, _POSITIONER_SET_GRAVITY, _GRAVITY_BOTTOM_RIGHT)
        self._send(positioner, _POSITIONER_SET_OFFSET, *map(_signed, self.offset))
        surface = self._extra["popup_surface"] = self._new()
        self._send(self._ids["compositor"], _COMPOSITOR_CREATE_SURFACE, surface)
        xdg_surface = self._extra["popup_xdg_surface"] = self._new(self._on_popup_xdg_surface)
        self._send(self._ids["wm_base"], _WM_BASE_GET_XDG_SURFACE, xdg_surface, surface)
        self._extra["popup"] = self._new(self._on_popup)
        self._send(
            xdg_surface,
            _XDG_SURFACE_GET_POPUP,
            self._extra["popup"],
            self._ids["xdg_surface"],
            positioner,
        )
        self._send(surface, _SURFACE_COMMIT)

    def _on_popup(self, opcode: int, args: EventArgs) -> None:
        if opcode == 0:  # configure: x, y, width, height
            args.sint()
            args.sint()
            self._popup_size = (args.sint(), args.sint())

    def _on_popup_xdg_surface(self, opcode: int, args: EventArgs) -> None:
        if opcode != 0:
            return
        self._send(self._extra["popup_xdg_surface"], _XDG_SURFACE_ACK_CONFIGURE, args.uint())
        width, height = self._popup_size
        if "popup_drawn" not in self._extra:
            self._extra["popup_drawn"] = 1
            self._show(
                self._extra["popup_surface"], self._buffer(width, height), width, height
            )
            self._shown_callback = self._sync(self.shown.set)
        else:
            self._send(self._extra["popup_surface"], _SURFACE_COMMIT)


def region_flood(socket_path: Path, *, count: int, timeout: float) -> tuple[int, bool]:
    """Send up to `count` wl_compositor.create_region requests on one new connection.

    Returns (requests sent, whether the compositor closed the connection) once all are
    sent, the peer closes, or `timeout` passes. Requests go in batches as fast as the socket
    takes them; the compositor's replies (errors) are drained so it never blocks on us.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    sock.connect(os.fspath(socket_path))
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    closed = threading.Event()
    try:
        # Registry 2, a sync 3, wl_compositor 4, regions from 5 on.
        sock.sendall(_message(1, _GET_REGISTRY, _encode(2)) + _message(1, _SYNC, _encode(3)))
        compositor_name = _find_global(sock, "wl_compositor", deadline)
        sock.sendall(
            _message(2, _REGISTRY_BIND, _encode(compositor_name, "wl_compositor", 4, 4))
        )
        sock.setblocking(False)
        sent = 0
        batch = 4096
        while sent < count and time.monotonic() < deadline:
            n = min(batch, count - sent)
            data = b"".join(
                _message(4, _COMPOSITOR_CREATE_REGION, _encode(5 + sent + i)) for i in range(n)
            )
            view = memoryview(data)
            while view and time.monotonic() < deadline:
                try:
                    written = sock.send(view)
                except BlockingIOError:
                    if _drain(sock):
                        closed.set()
                        break
                    time.sleep(0.001)
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    closed.set()
                    break
                view = view[written:]
            if closed.is_set():
                break
            sent += n
            if _drain(sock):
                closed.set()
                break
        while not closed.is_set() and time.monotonic() < deadline:
            if _drain(sock):
                closed.set()
            else:
                time.sleep(0.01)
        return sent, closed.is_set()
    finally:
        sock.close()


def _drain(sock: socket.socket) -> bool:
    """Read what is there without blocking; True when the peer has closed."""
    while True:
        try:
            data = sock.recv(65536)
        except BlockingIOError:
            return False
        except ConnectionResetError:
            return True
        if not data:
            return True


def _find_global(sock: socket.socket, interface: str, deadline: float) -> int:
    buffer = bytearray()
    found: int | None = None
    while time.monotonic() < deadline:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("the compositor closed the connection")
        buffer += data
        while len(buffer) >= 8:
            object_id = int.from_bytes(buffer[0:4], "little")
            word = int.from_bytes(buffer[4:8], "little")
            size = word >> 16
            if len(buffer) < size:
                break
            args = EventArgs(bytes(buffer[8:size]), f"object {object_id}")
            del buffer[:size]
            if object_id == 2 and word & 0xFFFF == 0:
                name, iface = args.uint(), args.string()
                if iface == interface:
                    found = name
            elif object_id == 3 and found is not None:
                return found
            elif object_id == 3:
                raise ConnectionError(f"the compositor has no {interface}")
    raise TimeoutError(f"no {interface} within the timeout")
