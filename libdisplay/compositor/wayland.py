"""A tiny Wayland client in the standard library: the compositor's liveness and its outputs.

It speaks the wire protocol itself over AF_UNIX (object ids, opcodes, little-endian 32-bit
words, strings and arrays padded to 4 bytes) and knows only what the operator needs:
`wl_display` (get_registry, sync, error, delete_id), `wl_registry`, `wl_callback`,
`wl_output` and `zxdg_output_manager_v1`/`zxdg_output_v1`. No file descriptors are passed.

`probe` classifies a socket as answering, hung, dead or absent and never blocks past its
deadline: the socket is non-blocking and every wait is a `poll` bounded by the deadline.
`list_outputs` describes each output: a v4 `wl_output.name` (weston 14 sends one) wins, and a
compositor that binds `wl_output` at v3 names its outputs through `xdg_output` only.
"""

from __future__ import annotations

import enum
import errno
import math
import os
import select
import socket
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from libdisplay.hardware.modes import Mode

_HEADER = struct.Struct("<II")
_WORD = struct.Struct("<I")
_SWORD = struct.Struct("<i")
_RECV_SIZE = 65536

# wl_display is object 1; client-side ids count up from 2.
_DISPLAY_ID = 1
_DISPLAY_SYNC = 0
_DISPLAY_GET_REGISTRY = 1
_DISPLAY_EV_ERROR = 0
_DISPLAY_EV_DELETE_ID = 1
_REGISTRY_BIND = 0
_REGISTRY_EV_GLOBAL = 0
_REGISTRY_EV_GLOBAL_REMOVE = 1
_XDG_MANAGER_GET_XDG_OUTPUT = 1

# Newest versions whose events this module decodes; a compositor's newer ones are not bound.
_WL_OUTPUT_VERSION = 4
_XDG_OUTPUT_MANAGER_VERSION = 3

_MODE_CURRENT = 0x1
_MODE_PREFERRED = 0x2


class WaylandError(Exception):
    """Base of every error this module raises."""


class WaylandUsageError(WaylandError, ValueError):
    """The caller's input cannot name a socket or a wait: unset variable, bad timeout, long path."""


class WaylandConnectError(WaylandError):
    """connect() to the socket failed; `errno` says why (ENOENT, ECONNREFUSED, EAGAIN, ...)."""

    def __init__(self, path: Path, err: int) -> None:
        super().__init__(
            f"cannot connect to {path}: {errno.errorcode.get(err, err)} ({os.strerror(err)})"
        )
        self.path = path
        self.errno = err


class WaylandTimeoutError(WaylandError):
    """The compositor did not answer before the deadline."""


class WaylandClosedError(WaylandError):
    """The compositor closed the connection."""


class WaylandProtocolError(WaylandError):
    """The compositor sent `wl_display.error`: the connection is unusable after it."""

    def __init__(self, *, object_id: int, interface: str, code: int, message: str) -> None:
        super().__init__(
            f"protocol error on object {object_id} ({interface}), code {code}: {message}"
        )
        self.object_id = object_id
        self.interface = interface
        self.code = code
        self.message = message


class WaylandMessageError(WaylandError):
    """Bytes from the compositor that do not decode as the expected Wayland message."""


class Liveness(enum.StrEnum):
    """What a probe found at the socket; exactly one holds."""

    ANSWERING = "answering"  # connect, registry and sync answered within the deadline
    HUNG = "hung"  # connected but no answer in time, or EAGAIN on connect (backlog full)
    DEAD = "dead"  # ECONNREFUSED (stale socket file), or closed without answering
    ABSENT = "absent"  # ENOENT: no socket file


class Transform(enum.IntEnum):
    """`wl_output.transform`: counter-clockwise rotation, optionally after a vertical-axis flip."""

    NORMAL = 0
    ROTATE_90 = 1
    ROTATE_180 = 2
    ROTATE_270 = 3
    FLIPPED = 4
    FLIPPED_90 = 5
    FLIPPED_180 = 6
    FLIPPED_270 = 7


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """One probe: the state, the round trip in seconds when answered, and what was seen."""

    path: Path
    state: Liveness
    round_trip_s: float | None
    detail: str


@dataclass(frozen=True, slots=True)
class Global:
    """One `wl_registry.global`: the numeric name to bind, the interface and its version."""

    name: int
    interface: str
    version: int


@dataclass(frozen=True, slots=True)
class Output:
    """One output as the compositor describes it.

    `mode` and `modes` are in hardware pixels (weston multiplies its configured size by the
    scale); `position` and `logical_size` are in compositor space. `name` is "" when the
    compositor offers neither `wl_output` v4 nor `xdg_output`.
    """

    name: str
    description: str
    make: str
    model: str
    physical_size_mm: tuple[int, int]
    mode: Mode
    preferred_mode: Mode | None
    modes: tuple[Mode, ...]
    transform: Transform
    scale: int
    position: tuple[int, int]
    logical_size: tuple[int, int] | None


class EventArgs:
    """The arguments of one event, read in order; every read checks the message's bounds."""

    __slots__ = ("_data", "_pos", "_what")

    def __init__(self, data: bytes, what: str) -> None:
        self._data = data
        self._pos = 0
        self._what = what

    def _take(self, size: int) -> bytes:
        end = self._pos + size
        if end > len(self._data):
            raise WaylandMessageError(f"{self._what}: message ends inside an argument")
        chunk = self._data[self._pos : end]
        self._pos = end
        return chunk

    def uint(self) -> int:
        value: int = _WORD.unpack(self._take(4))[0]
        return value

    def sint(self) -> int:
        value: int = _SWORD.unpack(self._take(4))[0]
        return value

    def array(self) -> bytes:
        size = self.uint()
        data = self._take(_padded(size))
        return data[:size]

    def string(self) -> str:
        """A string argument; the null string reads as ""."""
        raw = self.array()
        if not raw:
            return ""
        if raw[-1] != 0:
            raise WaylandMessageError(f"{self._what}: string is not NUL-terminated")
        return raw[:-1].decode("utf-8", errors="replace")


Handler = Callable[[int, EventArgs], None]
"""Receives (opcode, arguments) of each event sent to one object."""


def _padded(size: int) -> int:
    return (size + 3) & ~3


def _encode(args: tuple[int | str, ...]) -> bytes:
    """Request arguments: ints as uint/object/new_id words, str as a Wayland string."""
    out = bytearray()
    for arg in args:
        if isinstance(arg, str):
            raw = arg.encode() + b"\0"
            out += _WORD.pack(len(raw)) + raw + b"\0" * (_padded(len(raw)) - len(raw))
        else:
            out += _WORD.pack(arg)
    return bytes(out)


def _remaining_ms(deadline: float) -> int:
    return max(0, math.ceil((deadline - time.monotonic()) * 1000))


def socket_path(display: str | None = None, *, environ: Mapping[str, str] | None = None) -> Path:
    """The socket a client connects to, resolved the way libwayland does.

    `display` defaults to $WAYLAND_DISPLAY, then "wayland-0"; an absolute one is the path,
    a relative one lives in $XDG_RUNTIME_DIR.
    """
    env = os.environ if environ is None else environ
    name = display if display is not None else env.get("WAYLAND_DISPLAY", "wayland-0")
    if not name:
        raise WaylandUsageError("WAYLAND_DISPLAY is empty: no socket to connect to")
    if os.path.isabs(name):
        return Path(name)
    runtime_dir = env.get("XDG_RUNTIME_DIR")
    if not runtime_dir:
        raise WaylandUsageError(
            f"XDG_RUNTIME_DIR is not set: cannot resolve WAYLAND_DISPLAY={name!r}"
        )
    return Path(runtime_dir) / name


class Connection:
    """One client connection: allocates object ids, queues requests and dispatches events.

    Waits take an absolute `deadline` (a `time.monotonic()` value) so that several steps
    share one budget.
    """

    def __init__(self, sock: socket.socket, path: Path) -> None:
        self.path = path
        self._sock = sock
        self._out = bytearray()
        self._in = bytearray()
        self._objects: dict[int, tuple[str, Handler | None]] = {
            _DISPLAY_ID: ("wl_display", self._on_display)
        }
        self._next_id = _DISPLAY_ID + 1
        self._registry_id = 0
        self._globals: dict[int, Global] = {}

    @classmethod
    def connect(cls, path: str | os.PathLike[str]) -> Connection:
        """Connect without waiting: a Unix socket either queues the connection or fails now."""
        target = Path(path)
        sock = socket.socket(
            socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC
        )
        try:
            err = sock.connect_ex(os.fspath(target))
        except OSError as exc:  # the path does not fit sun_path
            sock.close()
            raise WaylandUsageError(f"cannot use socket path {str(target)!r}: {exc}") from exc
        if err:
            sock.close()
            raise WaylandConnectError(target, err)
        return cls(sock, target)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def new_object(self, interface: str, handler: Handler | None) -> int:
        """Allocate the id of a new object; `handler` gets its events (None ignores them)."""
        object_id = self._next_id
        self._next_id += 1
        self._objects[object_id] = (interface, handler)
        return object_id

    def request(self, object_id: int, opcode: int, *args: int | str) -> None:
        """Queue a request; it is sent by the next wait."""
        body = _encode(args)
        self._out += _HEADER.pack(object_id, (len(body) + _HEADER.size) << 16 | opcode) + body

    def sync(self) -> Callable[[], bool]:
        """Queue `wl_display.sync`; the check returned holds once its `done` arrived."""
        answered: list[bool] = []
        callback = self.new_object("wl_callback", lambda _opcode, _args: answered.append(True))
        self.request(_DISPLAY_ID, _DISPLAY_SYNC, callback)
        return lambda: bool(answered)

    def roundtrip(self, *, deadline: float) -> None:
        """Send what is queued plus `wl_display.sync`; dispatch events until its `done`."""
        self.dispatch_until(self.sync(), deadline=deadline, what="wl_display.sync")

    def ask_registry(self) -> None:
        """Queue the registry's creation (once); its globals arrive with the next round trip."""
        if not self._registry_id:
            self._registry_id = self.new_object("wl_registry", self._on_registry)
            self.request(_DISPLAY_ID, _DISPLAY_GET_REGISTRY, self._registry_id)

    @property
    def globals(self) -> tuple[Global, ...]:
        return tuple(self._globals.values())

    def get_registry(self, *, deadline: float) -> tuple[Global, ...]:
        """Create the registry (once) and return the globals known after a round trip."""
        self.ask_registry()
        self.roundtrip(deadline=deadline)
        return self.globals

    def bind(self, announced: Global, *, version: int, handler: Handler | None) -> int:
        """Queue `wl_registry.bind` of a global at `version`; returns the new object's id."""
        if not self._registry_id:
            raise WaylandUsageError("bind before get_registry: no registry to bind through")
        object_id = self.new_object(announced.interface, handler)
        self.request(
            self._registry_id,
            _REGISTRY_BIND,
            announced.name,
            announced.interface,
            version,
            object_id,
        )
        return object_id

    def dispatch_until(self, done: Callable[[], bool], *, deadline: float, what: str) -> None:
        """Flush requests, then read and dispatch events until `done()` or the deadline."""
        self._flush(deadline, what)
        while not done():
            self._receive(deadline, what)

    def _wait(self, events: int, deadline: float, what: str) -> None:
        poller = select.poll()
        poller.register(self._sock, events)
        while True:
            ready = poller.poll(_remaining_ms(deadline))
            if ready:
                return
            if time.monotonic() >= deadline:
                raise WaylandTimeoutError(f"{self.path}: no answer to {what} before the deadline")

    def _flush(self, deadline: float, what: str) -> None:
        while self._out:
            self._wait(select.POLLOUT, deadline, what)
            try:
                sent = self._sock.send(self._out, socket.MSG_NOSIGNAL)
            except BlockingIOError:
                continue
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise WaylandClosedError(f"{self.path}: compositor closed the connection") from exc
            del self._out[:sent]

    def _receive(self, deadline: float, what: str) -> None:
        self._wait(select.POLLIN, deadline, what)
        try:
            data = self._sock.recv(_RECV_SIZE)
        except BlockingIOError:
            return
        except ConnectionResetError as exc:
            raise WaylandClosedError(f"{self.path}: compositor reset the connection") from exc
        if not data:
            raise WaylandClosedError(f"{self.path}: compositor closed the connection during {what}")
        self._in += data
        while len(self._in) >= _HEADER.size:
            object_id, word = _HEADER.unpack_from(self._in)
            size, opcode = word >> 16, word & 0xFFFF
            if size < _HEADER.size or size % 4:
                raise WaylandMessageError(
                    f"{self.path}: message to object {object_id} has bad size {size}"
                )
            if len(self._in) < size:
                return
            payload = bytes(self._in[_HEADER.size : size])
            del self._in[:size]
            self._dispatch(object_id, opcode, payload)

    def _dispatch(self, object_id: int, opcode: int, payload: bytes) -> None:
        interface, handler = self._objects.get(object_id, ("", None))
        # Events to an unknown or already deleted id are dropped, as libwayland does.
        if handler is not None:
            handler(opcode, EventArgs(payload, f"{interface}@{object_id} event {opcode}"))

    def _on_display(self, opcode: int, args: EventArgs) -> None:
        if opcode == _DISPLAY_EV_ERROR:
            object_id, code, message = args.uint(), args.uint(), args.string()
            interface = self._objects.get(object_id, ("unknown object", None))[0]
            raise WaylandProtocolError(
                object_id=object_id, interface=interface, code=code, message=message
            )
        if opcode == _DISPLAY_EV_DELETE_ID:
            self._objects.pop(args.uint(), None)

    def _on_registry(self, opcode: int, args: EventArgs) -> None:
        if opcode == _REGISTRY_EV_GLOBAL:
            name, interface, version = args.uint(), args.string(), args.uint()
            self._globals[name] = Global(name=name, interface=interface, version=version)
        elif opcode == _REGISTRY_EV_GLOBAL_REMOVE:
            self._globals.pop(args.uint(), None)


class Probe:
    """One registry + sync round trip that can be waited for in parts.

    `wait(seconds)` returns the ProbeResult once the compositor answered, closed the
    connection or refused it, and None while it is silent: the request stays sent, so an
    answer that comes late is still seen as an answer, with its lateness (`round_trip_s`,
    counted from the connect). Close it (or use it as a context manager) when done.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.started = time.monotonic()
        self._conn: Connection | None = None
        self._done: Callable[[], bool] = lambda: False
        self.result: ProbeResult | None = None
        try:
            self._conn = Connection.connect(self.path)
        except WaylandConnectError as exc:
            self.result = _classify_connect_error(self.path, exc)
            return
        self._conn.ask_registry()
        self._done = self._conn.sync()

    def wait(self, seconds: float) -> ProbeResult | None:
        """Wait up to `seconds` for the answer; the result once there is one, else None."""
        if self.result is not None or self._conn is None:
            return self.result
        try:
            self._conn.dispatch_until(self._done, deadline=time.monotonic() + seconds,
                                      what="wl_display.sync")
        except WaylandTimeoutError:
            return None
        except WaylandClosedError as exc:
            self.result = ProbeResult(self.path, Liveness.DEAD, None,
                                      f"closed without answering: {exc}")
        except WaylandProtocolError as exc:
            # It read our requests and replied, so it is alive even if it disliked them.
            self.result = ProbeResult(self.path, Liveness.ANSWERING,
                                      time.monotonic() - self.started, str(exc))
        else:
            elapsed = time.monotonic() - self.started
            self.result = ProbeResult(
                self.path, Liveness.ANSWERING, elapsed,
                f"registry ({len(self._conn.globals)} globals) and sync answered in "
                f"{elapsed * 1000:.1f} ms")
        self.close()
        return self.result

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def probe(path: str | os.PathLike[str], *, timeout: float = 1.0) -> ProbeResult:
    """Classify the compositor at `path` with one registry + sync round trip.

    Returns within `timeout` seconds (plus scheduling noise); silent that long, it is HUNG.
    Connect errors other than ENOENT/ENOTDIR, ECONNREFUSED and EAGAIN (e.g. EACCES) are not
    a liveness state and raise WaylandConnectError; undecodable bytes raise
    WaylandMessageError.
    """
    if timeout <= 0:
        raise WaylandUsageError(f"probe timeout must be positive, got {timeout!r}")
    with Probe(path) as pending:
        found = pending.wait(timeout - (time.monotonic() - pending.started))
    if found is not None:
        return found
    return ProbeResult(pending.path, Liveness.HUNG, None,
                       f"connected, no answer to wl_display.sync within {timeout:g} s")


def _classify_connect_error(path: Path, exc: WaylandConnectError) -> ProbeResult:
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return ProbeResult(path, Liveness.ABSENT, None, f"no socket: {exc}")
    if exc.errno == errno.ECONNREFUSED:
        return ProbeResult(path, Liveness.DEAD, None, f"nobody listens on the socket file: {exc}")
    if exc.errno == errno.EAGAIN:
        return ProbeResult(
            path, Liveness.HUNG, None, f"listen backlog full, compositor not accepting: {exc}"
        )
    raise exc


@dataclass(slots=True)
class _OutputEvents:
    """What one output's events said so far; frozen into an Output after the round trip."""

    geometry_seen: bool = False
    make: str = ""
    model: str = ""
    physical_size_mm: tuple[int, int] = (0, 0)
    position: tuple[int, int] = (0, 0)
    transform: Transform = Transform.NORMAL
    scale: int = 1
    modes: list[Mode] = field(default_factory=list)
    current: Mode | None = None
    preferred: Mode | None = None
    output_name: str = ""
    output_description: str = ""
    xdg_name: str = ""
    xdg_description: str = ""
    logical_size: tuple[int, int] | None = None

    def on_output(self, opcode: int, args: EventArgs) -> None:
        if opcode == 0:  # geometry
            self.position = (args.sint(), args.sint())
            self.physical_size_mm = (args.sint(), args.sint())
            args.sint()  # subpixel layout: not part of the description
            self.make, self.model = args.string(), args.string()
            self.transform = _transform(args.sint())
            self.geometry_seen = True
        elif opcode == 1:  # mode
            flags = args.uint()
            mode = Mode(args.sint(), args.sint(), args.sint())
            self.modes.append(mode)
            if flags & _MODE_CURRENT:
                self.current = mode
            if flags & _MODE_PREFERRED:
                self.preferred = mode
        elif opcode == 3:  # scale
            self.scale = args.sint()
        elif opcode == 4:  # name, since v4
            self.output_name = args.string()
        elif opcode == 5:  # description, since v4
            self.output_description = args.string()

    def on_xdg_output(self, opcode: int, args: EventArgs) -> None:
        if opcode == 1:  # logical_size
            self.logical_size = (args.sint(), args.sint())
        elif opcode == 3:  # name
            self.xdg_name = args.string()
        elif opcode == 4:  # description
            self.xdg_description = args.string()

    def freeze(self, path: Path, object_id: int) -> Output:
        if not self.geometry_seen or self.current is None:
            raise WaylandMessageError(
                f"{path}: wl_output@{object_id} sent no geometry or no current mode"
            )
        return Output(
            name=self.output_name or self.xdg_name,
            description=self.output_description or self.xdg_description,
            make=self.make,
            model=self.model,
            physical_size_mm=self.physical_size_mm,
            mode=self.current,
            preferred_mode=self.preferred,
            modes=tuple(self.modes),
            transform=self.transform,
            scale=self.scale,
            position=self.position,
            logical_size=self.logical_size,
        )


def _transform(value: int) -> Transform:
    try:
        return Transform(value)
    except ValueError as exc:
        raise WaylandMessageError(f"wl_output.geometry: transform {value} is not 0..7") from exc


def list_outputs(path: str | os.PathLike[str], *, timeout: float = 5.0) -> tuple[Output, ...]:
    """Describe every output the compositor at `path` advertises, in registry order.

    Binds each `wl_output` and, when offered, asks `zxdg_output_manager_v1` for its
    `xdg_output`; one round trip after the binds collects all their initial events.
    """
    if timeout <= 0:
        raise WaylandUsageError(f"list_outputs timeout must be positive, got {timeout!r}")
    deadline = time.monotonic() + timeout
    with Connection.connect(path) as conn:
        announced = conn.get_registry(deadline=deadline)
        outputs: list[tuple[int, _OutputEvents]] = []
        for glob in announced:
            if glob.interface == "wl_output":
                events = _OutputEvents()
                version = min(glob.version, _WL_OUTPUT_VERSION)
                outputs.append((conn.bind(glob, version=version, handler=events.on_output), events))
        manager = next((g for g in announced if g.interface == "zxdg_output_manager_v1"), None)
        if manager is not None:
            manager_id = conn.bind(
                manager, version=min(manager.version, _XDG_OUTPUT_MANAGER_VERSION), handler=None
            )
            for output_id, events in outputs:
                xdg_id = conn.new_object("zxdg_output_v1", events.on_xdg_output)
                conn.request(manager_id, _XDG_MANAGER_GET_XDG_OUTPUT, xdg_id, output_id)
        conn.roundtrip(deadline=deadline)
        return tuple(events.freeze(conn.path, output_id) for output_id, events in outputs)
