"""A small gRPC server over HTTP/2 on unix sockets, for the kubelet's few calls.

grpcio's core costs the operator about 10 MiB of RSS (its 17 MB library, mapped and relocated
at import) and six threads of its own, to answer a handful of calls an hour: GetInfo and
NotifyRegistrationStatus once per registration, a prepare and an unprepare per claim, and one
health stream. This server speaks the same wire (gRPC's length-prefixed messages on HTTP/2
streams, status in the trailers) with h2, the sans-IO HTTP/2 library that lightkube's HTTP
client already loads into the process; the messages are `draplugin.rpc.grpcmessages`' bytes.

One thread accepts on each socket, one reads each connection, and each call runs on a thread
of its own; at most `workers` handlers run at once across the server, as grpcio's thread pool
bounded them, the other calls wait their turn. Only what the kubelet uses is served: unary and
server-streaming methods, no compression. `grpc-timeout` is not read: a call runs to its end,
and a client that gave up has reset its stream, so the answer is dropped.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any, Final

import h2.config  # pants: no-infer-dep
import h2.connection  # pants: no-infer-dep
import h2.errors  # pants: no-infer-dep
import h2.events  # pants: no-infer-dep
import h2.exceptions  # pants: no-infer-dep
import h2.settings  # pants: no-infer-dep
import hyperframe.frame  # pants: no-infer-dep

log = logging.getLogger(__name__)

_READ_SIZE: Final = 65536
# After the last answer, how long a stop waits for the client to close its end.
_LINGER_S: Final = 1.0
PREFIX: Final = struct.Struct(">?I")
"""Each gRPC message's prefix: compressed or not, then its length."""
_MAX_MESSAGE: Final = 4 * 1024 * 1024
"""The largest request accepted (grpcio's default receive limit)."""
WAIT_SLICE_S: Final = 0.2
"""How long `Server.wait` blocks at once: a signal's Python handler runs at most this late."""
MAX_STREAMS: Final = 100
"""Streams a client may open at once on a connection: grpc-go's assumption until the
server's SETTINGS arrive, so a kubelet that starts many calls on a fresh connection is never
over it (h2 would end the whole connection); past `workers`, calls wait for a handler."""


class Status(IntEnum):
    """gRPC's status codes."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16

    @classmethod
    def of(cls, code: int) -> Status:
        """The status of a code; UNKNOWN for one gRPC does not define."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class Method:
    """One served method: `handler(request, context)` returns the answer's bytes, or yields
    them when `streaming`; `decode` makes the request of its bytes."""

    handler: Callable[[Any, CallContext], Any]
    decode: Callable[[bytes], Any]
    streaming: bool = False


def unary(handler: Callable[[Any, CallContext], bytes],
          decode: Callable[[bytes], Any]) -> Method:
    return Method(handler, decode)


def server_stream(handler: Callable[[Any, CallContext], Iterator[bytes]],
                  decode: Callable[[bytes], Any]) -> Method:
    return Method(handler, decode, streaming=True)


class CallContext:
    """What a handler may ask of its call: whether the client still waits for it."""

    def __init__(self, connection: _Connection, stream_id: int) -> None:
        self._connection = connection
        self._stream_id = stream_id

    def is_active(self) -> bool:
        return self._connection.stream_open(self._stream_id)


class _CallFailedError(Exception):
    """The call ends with this status (not OK) and message."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status


class Server:
    """Serves `methods` (by path, `/package.Service/Method`) on unix sockets until `stop`."""

    def __init__(self, methods: dict[str, Method], *, workers: int) -> None:
        self._methods = methods
        self._workers = threading.BoundedSemaphore(workers)
        self._listeners: list[socket.socket] = []
        self._connections: set[_Connection] = set()
        self._lock = threading.Lock()
        self._stopped = threading.Event()

    def add_unix_socket(self, path: Path) -> None:
        """Listen on `path` (which must not exist); served from `start`."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(path))
            listener.listen(16)
        except OSError:
            listener.close()
            raise
        self._listeners.append(listener)

    def start(self) -> None:
        for listener in self._listeners:
            threading.Thread(target=self._accept, args=(listener,), daemon=True,
                             name=f"grpc-accept-{listener.getsockname()}").start()

    def stop(self, grace_s: float) -> threading.Event:
        """Accept nothing new, give the calls running `grace_s` seconds, then cut them.
        Returns the event set once stopped (already set: the stop is over on return)."""
        if self._stopped.is_set():
            return self._stopped
        for listener in self._listeners:
            _shutdown(listener)  # wakes its accept()
            listener.close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            connection.refuse_new_calls()
        for connection in connections:
            connection.close(grace_s)
        self._stopped.set()
        return self._stopped

    def wait(self) -> None:
        """Until `stop` has run. In slices of WAIT_SLICE_S: the kernel hands a process's signal
        to any of its threads, and a main thread blocked in an untimed lock wait never wakes
        to run Python's handler for it (SIGHUP's re-read, SIGTERM's stop)."""
        while not self._stopped.wait(WAIT_SLICE_S):
            pass

    def _accept(self, listener: socket.socket) -> None:
        while not self._stopped.is_set():
            try:
                sock, _ = listener.accept()
            except OSError:
                return  # stop() shut the listener
            connection = _Connection(sock, self._methods, workers=self._workers,
                                     on_close=self._forget)
            with self._lock:
                if self._stopped.is_set():
                    sock.close()
                    return
                self._connections.add(connection)
            threading.Thread(target=connection.serve, daemon=True, name="grpc-connection").start()

    def _forget(self, connection: _Connection) -> None:
        with self._lock:
            self._connections.discard(connection)


class _Connection:
    """One client connection: reads frames on its thread, runs each call on a thread of its
    own. h2's state is guarded by one lock; a sender short of flow-control window waits on
    the condition that a WINDOW_UPDATE notifies."""

    def __init__(self, sock: socket.socket, methods: dict[str, Method], *,
                 workers: threading.BoundedSemaphore,
                 on_close: Callable[[_Connection], None]) -> None:
        self._sock = sock
        self._methods = methods
        self._workers = workers
        self._on_close = on_close
        self._h2 = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=False, header_encoding="utf-8"))
        # Sent in the connection's first SETTINGS; h2 refuses a client that opens more.
        self._h2.local_settings = h2.settings.Settings(client=False, initial_values={
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: MAX_STREAMS,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE:
                h2.connection.H2Connection.DEFAULT_MAX_HEADER_LIST_SIZE,
        })
        self._changed = threading.Condition()
        self._requests: dict[int, tuple[Method, bytearray]] = {}
        self._open: set[int] = set()
        self._calls: set[threading.Thread] = set()
        self._closed = False
        self._refusing = False
        self._ended = threading.Event()

    def serve(self) -> None:
        try:
            with self._changed:
                self._h2.initiate_connection()
                self._flush()
            while True:
                data = self._sock.recv(_READ_SIZE)
                if not data:
                    break
                with self._changed:
                    self._handle(self._h2.receive_data(data))
                    if not self._closed:  # closing: this side's sending has ended
                        self._flush()
        except (OSError, h2.exceptions.ProtocolError) as err:
            if not self._closed:
                log.debug("gRPC connection ended: %s", err)
        finally:
            with self._changed:
                self._closed = True
                self._open.clear()
                self._changed.notify_all()
            self._sock.close()
            self._ended.set()
            self._on_close(self)

    def stream_open(self, stream_id: int) -> bool:
        with self._changed:
            return stream_id in self._open

    def refuse_new_calls(self) -> None:
        """GOAWAY: the client opens no new stream here, the streams it names run on. Written
        beside h2, whose close_connection() would refuse every frame after it, the running
        calls' answers and WINDOW_UPDATEs too."""
        with self._changed:
            if self._closed or self._refusing:
                return
            self._refusing = True
            goaway = hyperframe.frame.GoAwayFrame(0)
            goaway.last_stream_id = self._h2.highest_inbound_stream_id
            self._flush_quietly()
            with contextlib.suppress(OSError):  # the reader sees the connection end
                self._sock.sendall(goaway.serialize())

    def close(self, grace_s: float) -> None:
        """Give the running calls `grace_s` seconds, then cut the connection. Once every call
        has answered, only this side's sending ends first: the client reads the last answers,
        and a frame it writes before reading them (a WINDOW_UPDATE, a PING's ack) does not
        find the socket shut (EPIPE, which fails the answered calls too)."""
        with self._changed:
            answered = self._changed.wait_for(lambda: not self._calls or self._closed,
                                              timeout=grace_s)
            self._closed = True
            self._open.clear()
            self._changed.notify_all()
        if answered:
            _shutdown(self._sock, socket.SHUT_WR)
            self._ended.wait(_LINGER_S)  # the reader sees the client close its end
        _shutdown(self._sock)  # ends the reader's recv()

    # --- on the reader's thread, holding the lock ---------------------------------------------

    def _handle(self, events: list[h2.events.Event]) -> None:
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                self._request(event.stream_id, dict(event.headers or ()))
            elif isinstance(event, h2.events.DataReceived):
                self._h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                self._data(event.stream_id, event.data or b"")
            elif isinstance(event, h2.events.StreamEnded):
                self._start_call(event.stream_id)
            elif isinstance(event, h2.events.StreamReset):
                self._requests.pop(event.stream_id, None)
                self._open.discard(event.stream_id)
                self._changed.notify_all()
            elif isinstance(event, h2.events.WindowUpdated | h2.events.RemoteSettingsChanged):
                self._changed.notify_all()
            elif isinstance(event, h2.events.ConnectionTerminated):
                self._open.clear()
                self._changed.notify_all()

    def _request(self, stream_id: int, headers: dict[Any, Any]) -> None:
        if self._refusing:  # opened before the client read the GOAWAY: it may retry elsewhere
            self._h2.reset_stream(stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
            return
        self._open.add(stream_id)
        method = self._methods.get(headers.get(":path", ""))
        if headers.get(":method") != "POST" or method is None:
            self._finish(stream_id, Status.UNIMPLEMENTED,
                         f"no method {headers.get(':path')!r}", headers_sent=False)
            return
        self._requests[stream_id] = (method, bytearray())

    def _data(self, stream_id: int, data: bytes) -> None:
        request = self._requests.get(stream_id)
        if request is None:
            return
        request[1].extend(data)
        if len(request[1]) > _MAX_MESSAGE + PREFIX.size:
            del self._requests[stream_id]
            self._finish(stream_id, Status.RESOURCE_EXHAUSTED,
                         f"request over {_MAX_MESSAGE} bytes", headers_sent=False)

    def _start_call(self, stream_id: int) -> None:
        request = self._requests.pop(stream_id, None)
        if request is None:
            return
        method, body = request
        call = threading.Thread(target=self._call, args=(stream_id, method, bytes(body)),
                                daemon=True, name=f"grpc-call-{stream_id}")
        self._calls.add(call)
        call.start()

    # --- on a call's thread --------------------------------------------------------------------

    def _call(self, stream_id: int, method: Method, body: bytes) -> None:
        headers_sent = False
        try:
            request = _decode(body, method.decode)
            with self._changed:
                self._send_headers(stream_id)
            headers_sent = True
            with self._workers:
                answers = method.handler(request, CallContext(self, stream_id))
                for message in answers if method.streaming else [answers]:
                    self._send_message(stream_id, PREFIX.pack(False, len(message)) + message)
            status, detail = Status.OK, ""
        except _CallFailedError as failed:
            status, detail = failed.status, str(failed)
        except _StreamGoneError:
            status, detail = Status.UNAVAILABLE, ""
        except Exception as err:
            log.exception("gRPC call on stream %d failed", stream_id)
            status, detail = Status.UNKNOWN, f"Exception calling application: {err}"
        with self._changed:
            self._finish(stream_id, status, detail, headers_sent=headers_sent)
            self._flush_quietly()
            self._calls.discard(threading.current_thread())
            self._changed.notify_all()

    def _send_message(self, stream_id: int, data: bytes) -> None:
        """Sends `data` on the stream as the flow-control windows allow; _StreamGoneError when the
        client or the connection is gone."""
        with self._changed:
            while data:
                self._changed.wait_for(lambda: stream_id not in self._open
                                       or self._h2.local_flow_control_window(stream_id) > 0)
                if stream_id not in self._open:
                    raise _StreamGoneError
                size = min(len(data), self._h2.local_flow_control_window(stream_id),
                           self._h2.max_outbound_frame_size)
                try:
                    self._h2.send_data(stream_id, data[:size])
                except h2.exceptions.StreamClosedError as err:  # a reset not yet read
                    raise _StreamGoneError from err
                data = data[size:]
                self._flush()

    # --- holding the lock ----------------------------------------------------------------------

    def _send_headers(self, stream_id: int) -> None:
        if stream_id not in self._open:
            raise _StreamGoneError
        self._h2.send_headers(stream_id, [(":status", "200"),
                                          ("content-type", "application/grpc")])
        self._flush()

    def _finish(self, stream_id: int, status: Status, detail: str, *,
                headers_sent: bool) -> None:
        """The trailers (or, before any header, a trailers-only answer) ending the call."""
        if stream_id not in self._open:
            return
        self._open.discard(stream_id)
        trailers = [("grpc-status", str(int(status)))]
        if detail:
            trailers.append(("grpc-message", urllib.parse.quote(detail, safe=" ")))
        if not headers_sent:
            trailers = [(":status", "200"), ("content-type", "application/grpc"), *trailers]
        with contextlib.suppress(h2.exceptions.StreamClosedError):  # reset by the client
            self._h2.send_headers(stream_id, trailers, end_stream=True)

    def _flush(self) -> None:
        data = self._h2.data_to_send()
        if data:
            self._sock.sendall(data)

    def _flush_quietly(self) -> None:
        with contextlib.suppress(OSError):  # the reader sees the connection end
            self._flush()


class _StreamGoneError(Exception):
    """The client reset the stream, or the connection ended, before the call answered."""


def _decode(body: bytes, decode: Callable[[bytes], Any]) -> Any:
    """The one request message in `body`."""
    if len(body) < PREFIX.size:
        raise _CallFailedError(Status.INTERNAL, "no request message")
    compressed, length = PREFIX.unpack_from(body)
    if compressed:
        raise _CallFailedError(Status.UNIMPLEMENTED, "compressed messages are not supported")
    if len(body) != PREFIX.size + length:
        raise _CallFailedError(Status.INTERNAL, "the request is not one whole message")
    try:
        return decode(body[PREFIX.size:])
    except Exception as err:
        raise _CallFailedError(Status.INTERNAL, f"cannot parse the request: {err}") from err


def _shutdown(sock: socket.socket, how: int = socket.SHUT_RDWR) -> None:
    with contextlib.suppress(OSError):  # not connected, or already shut
        sock.shutdown(how)
