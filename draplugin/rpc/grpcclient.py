"""One unary gRPC call on a unix socket, over h2: how the operator dials its own server.

/healthz asks the plugin's server on both of its sockets whether it answers. grpcio's client
would load the very core (and its threads) that `draplugin.rpc.grpcserver` exists to keep out of
the operator, for one small call every probe; this speaks the same wire with h2 on a blocking
socket, bounded by one deadline for the whole call.
"""

from __future__ import annotations

import socket
import time
import urllib.parse
from pathlib import Path
from typing import Final

import h2.config  # pants: no-infer-dep
import h2.connection  # pants: no-infer-dep
import h2.events  # pants: no-infer-dep
import h2.exceptions  # pants: no-infer-dep

from draplugin.rpc.grpcserver import PREFIX, Status

_READ_SIZE: Final = 65536


class CallError(Exception):
    """The call did not answer OK: its status (UNAVAILABLE when the server could not be
    reached or hung up, DEADLINE_EXCEEDED when the time ran out) and message."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(f"{status.name} ({message})")
        self.status = status
        self.message = message


def call(path: Path, method: str, request: bytes, *, timeout_s: float) -> bytes:
    """The answer's message bytes to `request` (a serialized message) on `method`
    (`/package.Service/Method`) of the server listening on `path`."""
    deadline = time.monotonic() + timeout_s
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            sock.settimeout(timeout_s)
            sock.connect(str(path))
            return _exchange(sock, method, request, deadline)
        except TimeoutError as err:
            raise CallError(Status.DEADLINE_EXCEEDED, f"no answer in {timeout_s:g} s") from err
        except (OSError, h2.exceptions.ProtocolError) as err:
            raise CallError(Status.UNAVAILABLE, str(err) or type(err).__name__) from err
    finally:
        sock.close()


def _exchange(sock: socket.socket, method: str, request: bytes, deadline: float) -> bytes:
    conn = h2.connection.H2Connection(h2.config.H2Configuration(
        client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    stream_id = conn.get_next_available_stream_id()
    conn.send_headers(stream_id, [
        (":method", "POST"), (":scheme", "http"), (":path", method),
        (":authority", "localhost"), ("content-type", "application/grpc"), ("te", "trailers"),
    ])
    # Small requests only (a probe's): they fit the initial 64 KiB window.
    conn.send_data(stream_id, PREFIX.pack(False, len(request)) + request, end_stream=True)
    sock.sendall(conn.data_to_send())
    body = bytearray()
    headers: dict[str, str] = {}
    while True:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        data = sock.recv(_READ_SIZE)
        if not data:
            raise CallError(Status.UNAVAILABLE, "the server closed the connection")
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
                headers.update((str(name), str(value)) for name, value in event.headers or ())
            elif isinstance(event, h2.events.DataReceived) and event.stream_id == stream_id:
                body.extend(event.data or b"")
                conn.acknowledge_received_data(event.flow_controlled_length, stream_id)
            elif isinstance(event, h2.events.StreamReset) and event.stream_id == stream_id:
                raise CallError(Status.UNAVAILABLE, f"stream reset ({event.error_code!r})")
            elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream_id:
                return _answer(headers, bytes(body))
            elif (isinstance(event, h2.events.ConnectionTerminated)
                  and (event.last_stream_id or 0) < stream_id):
                # A GOAWAY naming this stream lets it finish: read on.
                raise CallError(Status.UNAVAILABLE, "the server sent GOAWAY")
        sock.sendall(conn.data_to_send())


def _answer(headers: dict[str, str], body: bytes) -> bytes:
    code = headers.get("grpc-status")
    if code is None:
        raise CallError(Status.UNKNOWN, f"no grpc-status (HTTP {headers.get(':status')})")
    status = Status.of(int(code))
    if status is not Status.OK:
        raise CallError(status, urllib.parse.unquote(headers.get("grpc-message", "")))
    if len(body) < PREFIX.size:
        raise CallError(Status.INTERNAL, "no answer message")
    _compressed, length = PREFIX.unpack_from(body)
    if len(body) != PREFIX.size + length:
        raise CallError(Status.INTERNAL, "the answer is not one whole message")
    return body[PREFIX.size:]
