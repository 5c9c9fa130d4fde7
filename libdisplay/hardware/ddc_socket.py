"""An I²C bus over a unix stream socket: a simulated monitor reachable from other processes.

Owns the wire format below, `MonitorServer` (one `SimulatedMonitor` served at one socket path
from a thread of its own) and `SocketI2c` (the `Transport` that talks to such a socket, raising
`TransportError` with the errno the I2C_RDWR ioctl would have given). The simulated node serves
one socket at each `<root>/dev/i2c-N`, so the operator runs the DDC/CI code it runs on a real
/dev/i2c-N; the EDID EEPROM at 0x50 and the segment pointer at 0x30 are the monitor's own.

Wire format, all integers big-endian. A frame is an 8-byte header, the magic `I2C\\x01` (its
last byte is the version) and a u32 body length, then the body.

- Request body, one I2C_RDWR transaction: u8 message count (1..42), then per message u8 kind
  (0 write, 1 read: I2C_M_RD), u8 7-bit address, u16 length (0..8192), and for a write that
  many data bytes.
- Reply body: u8 status, then for 0 (done) per read message, in order, u16 length and the
  bytes read; for 1 (bus error) u16 errno and a UTF-8 message; for 2 (bad frame) a UTF-8
  message, after which the server closes the connection.

The bounds are i2c-dev's (42 messages, 8192 bytes each), so no body is longer than `MAX_BODY`:
a longer length, a wrong magic or a body that does not parse is a `FrameError`, never an
allocation. The server answers one frame at a time, in one thread, so transactions from several
connections never interleave.

A monitor pulled out of its connector is not on the bus: the server asks its `present` callable
before each transaction, and while it says False every address NACKs (ENXIO, a bus error reply),
the EDID EEPROM included, as on a real bus with nothing plugged in.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import logging
import os
import selectors
import socket
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from libdisplay import fsutil
from libdisplay.hardware.ddc import (
    I2C_M_RD,
    I2C_RDWR_IOCTL_MAX_MSGS,
    I2cMessage,
    I2cRead,
    I2cWrite,
    InvalidArgumentError,
    TransportError,
)
from libdisplay.sim.ddc import SimulatedMonitor

log = logging.getLogger(__name__)

MAGIC: Final = b"I2C\x01"
HEADER: Final = struct.Struct(">4sI")
MAX_MESSAGES: Final = I2C_RDWR_IOCTL_MAX_MSGS
MAX_MESSAGE_LENGTH: Final = 8192  # i2c-dev refuses a longer message with EINVAL
_MESSAGE: Final = struct.Struct(">BBH")
_LENGTH: Final = struct.Struct(">H")
MAX_BODY: Final = 1 + MAX_MESSAGES * (_MESSAGE.size + MAX_MESSAGE_LENGTH)
MAX_TEXT: Final = 512  # error messages in replies are cut to this many bytes
DEFAULT_TIMEOUT: Final = 5.0
_RECV_SIZE: Final = 65536


class Status(enum.IntEnum):
    DONE = 0
    BUS_ERROR = 1
    BAD_FRAME = 2


class SocketBusError(TransportError):
    """Base of every error from this module: a TransportError, so DdcClient handles it as it
    handles a failing /dev/i2c-N; `errno` is set."""


class FrameError(SocketBusError):
    """A frame that breaks the wire format (errno EPROTO); the message says which part."""

    def __init__(self, message: str) -> None:
        super().__init__(message, errno=errno.EPROTO)


# --- Frames -----------------------------------------------------------------------------


def frame(body: bytes) -> bytes:
    """Header and body."""
    return HEADER.pack(MAGIC, len(body)) + body


def body_length(header: bytes) -> int:
    """The body length a header announces; FrameError for a wrong magic or an oversized body."""
    magic, length = HEADER.unpack(header)
    if magic != MAGIC:
        raise FrameError(f"frame starts with {magic!r}, not the magic {MAGIC!r}")
    if length > MAX_BODY:
        raise FrameError(f"frame body of {length} bytes is over the bound of {MAX_BODY}")
    return int(length)


def request_body(messages: Sequence[I2cMessage]) -> bytes:
    """The body of a request for one transaction."""
    parts = [bytes([len(messages)])]
    for message in messages:
        if isinstance(message, I2cWrite):
            parts += [_MESSAGE.pack(0, message.address, len(message.data)), message.data]
        else:
            parts.append(_MESSAGE.pack(I2C_M_RD, message.address, message.length))
    return b"".join(parts)


def parse_request(body: bytes) -> list[I2cMessage]:
    """The messages of a request body; FrameError names the first part that is wrong."""
    if not body:
        raise FrameError("request body is empty")
    count = body[0]
    if not 1 <= count <= MAX_MESSAGES:
        raise FrameError(f"request message count {count} is outside 1..{MAX_MESSAGES}")
    messages: list[I2cMessage] = []
    offset = 1
    for index in range(count):
        if offset + _MESSAGE.size > len(body):
            raise FrameError(f"request message {index} is cut off at byte {len(body)}")
        kind, address, length = _MESSAGE.unpack_from(body, offset)
        offset += _MESSAGE.size
        if kind not in (0, I2C_M_RD):
            raise FrameError(f"request message {index}: kind {kind} is neither 0 (write) nor "
                             f"1 (read)")
        if address > 0x7F or length > MAX_MESSAGE_LENGTH:
            raise FrameError(f"request message {index}: address 0x{address:02X} or length "
                             f"{length} is out of bounds (0x7F, {MAX_MESSAGE_LENGTH})")
        if kind == I2C_M_RD:
            messages.append(I2cRead(address, length))
            continue
        if offset + length > len(body):
            raise FrameError(f"request message {index}: {length} data bytes announced, "
                             f"{len(body) - offset} sent")
        messages.append(I2cWrite(address, body[offset : offset + length]))
        offset += length
    if offset != len(body):
        raise FrameError(f"request body has {len(body) - offset} bytes after its messages")
    return messages


def done_body(results: Sequence[bytes]) -> bytes:
    return bytes([Status.DONE]) + b"".join(_LENGTH.pack(len(r)) + r for r in results)


def bus_error_body(code: int, message: str) -> bytes:
    return bytes([Status.BUS_ERROR]) + _LENGTH.pack(code) + _text(message)


def bad_frame_body(message: str) -> bytes:
    return bytes([Status.BAD_FRAME]) + _text(message)


def parse_reply(body: bytes, messages: Sequence[I2cMessage]) -> list[bytes]:
    """The data of each read message; SocketBusError with the errno of a bus error, FrameError
    for a refused request or a reply that does not fit the request."""
    if not body:
        raise FrameError("reply body is empty")
    status, rest = body[0], body[1:]
    if status == Status.BUS_ERROR:
        if len(rest) < _LENGTH.size:
            raise FrameError(f"bus error reply of {len(body)} bytes has no errno")
        (code,) = _LENGTH.unpack_from(rest)
        raise SocketBusError(rest[_LENGTH.size :].decode("utf-8", "replace"), errno=code)
    if status == Status.BAD_FRAME:
        raise FrameError(f"the server refused the request: {rest.decode('utf-8', 'replace')}")
    if status != Status.DONE:
        raise FrameError(f"reply status {status} is not 0, 1 or 2")
    results: list[bytes] = []
    offset = 0
    for message in messages:
        if not isinstance(message, I2cRead):
            continue
        if offset + _LENGTH.size > len(rest):
            raise FrameError(f"reply is cut off before read {len(results)}")
        (length,) = _LENGTH.unpack_from(rest, offset)
        offset += _LENGTH.size
        if length != message.length or offset + length > len(rest):
            raise FrameError(f"reply read {len(results)} has {length} bytes announced and "
                             f"{len(rest) - offset} sent; {message.length} were asked for")
        results.append(rest[offset : offset + length])
        offset += length
    if offset != len(rest):
        raise FrameError(f"reply has {len(rest) - offset} bytes after its reads")
    return results


def _text(message: str) -> bytes:
    return message.encode("utf-8")[:MAX_TEXT]


# --- The host side ----------------------------------------------------------------------


class SocketI2c:
    """The `Transport` over a `MonitorServer`'s socket, one connection per instance.

    It connects at construction, as `LinuxI2c` opens its device, so a missing socket fails
    there (ENOENT, or ECONNREFUSED when nothing listens). A lost connection fails the transfer
    with EIO and is dropped; the next transfer connects again, as a server restarted at the
    same path serves the same bus. Each transfer ends within `timeout` seconds (ETIMEDOUT).
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.path = os.fspath(path)
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._connect()

    def __enter__(self) -> SocketI2c:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self._sock is not None:
            sock, self._sock = self._sock, None
            sock.close()

    def write(self, address: int, data: bytes) -> None:
        self.transfer([I2cWrite(address, data)])

    def read(self, address: int, length: int) -> bytes:
        return self.transfer([I2cRead(address, length)])[0]

    def transfer(self, messages: Sequence[I2cMessage]) -> list[bytes]:
        if not 1 <= len(messages) <= MAX_MESSAGES:
            raise InvalidArgumentError(f"I2C_RDWR takes 1..{MAX_MESSAGES} messages, "
                                       f"not {len(messages)}")
        for message in messages:
            length = message.length if isinstance(message, I2cRead) else len(message.data)
            if length > MAX_MESSAGE_LENGTH:
                raise SocketBusError(f"{self.path}: message of {length} bytes to "
                                     f"0x{message.address:02X} is over i2c-dev's "
                                     f"{MAX_MESSAGE_LENGTH}", errno=errno.EINVAL)
        sock = self._sock or self._connect()
        try:
            sock.sendall(frame(request_body(messages)))
            body = _receive_frame(sock)
            return parse_reply(body, messages)
        except FrameError as err:
            self.close()
            raise FrameError(f"{self.path}: {err}") from err
        except SocketBusError as err:
            raise SocketBusError(f"{self.path}: {err}", errno=err.errno) from err
        except TimeoutError as err:
            self.close()
            raise SocketBusError(f"{self.path}: no reply within {self.timeout} s",
                                 errno=errno.ETIMEDOUT) from err
        except OSError as err:
            self.close()
            raise SocketBusError(f"{self.path}: connection lost: {err.strerror or err}",
                                 errno=errno.EIO) from err

    def _connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.path)
        except OSError as err:
            sock.close()
            raise SocketBusError(f"cannot open {self.path}: {err.strerror or err}",
                                 errno=err.errno or errno.EIO) from err
        self._sock = sock
        return sock


def _receive_frame(sock: socket.socket) -> bytes:
    length = body_length(_receive_exactly(sock, HEADER.size))
    return _receive_exactly(sock, length)


def _receive_exactly(sock: socket.socket, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        chunk = sock.recv(min(count - len(data), _RECV_SIZE))
        if not chunk:
            raise ConnectionError(f"the server closed the connection ({len(data)} of {count} "
                                  f"bytes read)")
        data += chunk
    return bytes(data)


# --- The display side -------------------------------------------------------------------


@dataclass(slots=True)
class _Connection:
    sock: socket.socket
    buffer: bytearray = field(default_factory=bytearray)


class MonitorServer:
    """Serves one `SimulatedMonitor` at a unix socket path, from a daemon thread.

    `start` binds (SocketBusError with the errno when the path is taken) and returns once the
    socket accepts; `stop` ends the thread, closes every connection and removes the socket.
    A client that sends a bad frame gets a bad-frame reply and is disconnected; the others
    are served on. A reply the peer does not read within `timeout` seconds drops that peer.
    `present` (called from the server's thread, so it must not raise) says whether the monitor
    is plugged in; while it is not, every transaction fails with ENXIO.
    """

    def __init__(self, path: str | os.PathLike[str], monitor: SimulatedMonitor, *,
                 timeout: float = DEFAULT_TIMEOUT,
                 present: Callable[[], bool] = lambda: True) -> None:
        self.path = Path(path)
        self.monitor = monitor
        self.timeout = timeout
        self.present = present
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._wake_read, self._wake_write = socket.socketpair()

    def __enter__(self) -> MonitorServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            listener.bind(os.fspath(self.path))
            listener.listen()
        except OSError as err:
            listener.close()
            raise SocketBusError(f"cannot serve i2c at {self.path}: {err.strerror or err}",
                                 errno=err.errno or errno.EIO) from err
        self._listener = listener
        self._thread = threading.Thread(target=self._serve, name=f"i2c {self.path.name}",
                                        daemon=True)
        self._thread.start()
        log.info("serving a simulated monitor at %s", self.path)

    def stop(self, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Stop serving and remove the socket; a server never started only closes its pipe."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._wake_write.send(b"\0")
            thread.join(timeout)
            if thread.is_alive():
                log.warning("i2c server at %s did not stop in %s s", self.path, timeout)
        if self._listener is not None:
            self._listener.close()
            self._listener = None
            fsutil.remove(self.path)
        self._wake_read.close()
        self._wake_write.close()

    def _serve(self) -> None:
        assert self._listener is not None
        connections: dict[int, _Connection] = {}
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            selector.register(self._wake_read, selectors.EVENT_READ)
            try:
                while True:
                    for key, _ in selector.select():
                        if key.fileobj is self._wake_read:
                            return
                        if key.fileobj is self._listener:
                            self._accept(selector, connections)
                        elif not self._receive(connections[key.fd]):
                            selector.unregister(key.fileobj)
                            connections.pop(key.fd).sock.close()
            finally:
                for connection in connections.values():
                    connection.sock.close()

    def _accept(self, selector: selectors.BaseSelector,
                connections: dict[int, _Connection]) -> None:
        assert self._listener is not None
        sock, _ = self._listener.accept()
        # A timeout, not non-blocking: recv only follows select, and sendall must not spin.
        sock.settimeout(self.timeout)
        connections[sock.fileno()] = _Connection(sock)
        selector.register(sock, selectors.EVENT_READ)

    def _receive(self, connection: _Connection) -> bool:
        """Read what arrived and answer each whole frame; False when the connection ends."""
        try:
            chunk = connection.sock.recv(_RECV_SIZE)
            if not chunk:
                return False
            connection.buffer += chunk
            return self._answer_frames(connection)
        except OSError as err:
            log.info("i2c %s: dropping a client: %s", self.path, err)
            return False

    def _answer_frames(self, connection: _Connection) -> bool:
        buffer = connection.buffer
        while len(buffer) >= HEADER.size:
            try:
                length = body_length(bytes(buffer[: HEADER.size]))
            except FrameError as err:
                return self._refuse(connection, err)
            if len(buffer) < HEADER.size + length:
                return True
            body = bytes(buffer[HEADER.size : HEADER.size + length])
            del buffer[: HEADER.size + length]
            try:
                messages = parse_request(body)
            except FrameError as err:
                return self._refuse(connection, err)
            connection.sock.sendall(frame(self._transact(messages)))
        return True

    def _transact(self, messages: list[I2cMessage]) -> bytes:
        if not self.present():
            # The first message's address is the one i2c-dev reports as not acknowledged.
            return bus_error_body(errno.ENXIO, f"no device at 0x{messages[0].address:02X}: "
                                               "the monitor is unplugged")
        try:
            return done_body(self.monitor.transfer(messages))
        except TransportError as err:
            return bus_error_body(err.errno or errno.EIO, str(err))

    def _refuse(self, connection: _Connection, err: FrameError) -> bool:
        log.warning("i2c %s: bad frame from a client, disconnecting it: %s", self.path, err)
        with contextlib.suppress(OSError):
            connection.sock.sendall(frame(bad_frame_body(str(err))))
        return False
