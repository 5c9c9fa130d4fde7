"""The TCP listener in front of aiohttp: a bounded number of connections, and TLS state only for
clients that speak.

asyncio gives every TLS connection a 256 KiB buffer the moment it is accepted, and neither it
nor aiohttp bounds how many are accepted, so silent or idle connections alone could fill the
container's memory. This listener accepts itself and admits a connection only within
`max_connections` in all and `per_source` from one address. At the total bound the oldest
connection that is not inside a request is closed to make room (a flood then cycles through
its own connections, and a client that sends its request promptly is served); when every held
connection is inside a request the new one is refused. A connection is handed to TLS only once
it has sent its first bytes, within `handshake_timeout_s`, and the handshake must complete
within that time again. After the handshake aiohttp's keep-alive timeout closes a connection
that completes no request (its first or a next one) within the server's idle timeout, however
slowly it dribbles bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import socket
import ssl
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from capture.metrics import Metrics

log = logging.getLogger(__name__)

# Out of file descriptors or memory: wait a little rather than spin on accept.
_ACCEPT_BACKOFF_S: Final = 0.1
_RESOURCE_ERRNOS: Final = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    max_connections: int = 128
    per_source: int = 16
    handshake_timeout_s: float = 5.0


@dataclass(eq=False, slots=True)
class _Held:
    """One admitted connection: before TLS (`task` runs), or served (`transport` set)."""

    source: str
    since: float
    # Set while it waits for its first bytes; TLS owns the socket after that.
    conn: socket.socket | None = None
    task: asyncio.Task[None] | None = None
    transport: asyncio.Transport | None = None
    requests: int = 0
    released: bool = False


@dataclass(eq=False)
class Connections:
    """The held connections, by age, and the per-source counts; what the handlers mark busy."""

    limits: ConnectionLimits
    metrics: Metrics
    _held: dict[_Held, None] = field(default_factory=dict)  # insertion order is age
    _by_source: Tally[str] = field(default_factory=Tally)
    _by_transport: dict[int, _Held] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self._held)

    def admit(self, source: str) -> _Held | None:
        """A slot for a new connection from `source`, or None when it must be refused."""
        if self._by_source[source] >= self.limits.per_source:
            self.metrics.connections_refused.labels(reason="source").inc()
            return None
        if len(self._held) >= self.limits.max_connections and not self._evict_oldest_idle():
            self.metrics.connections_refused.labels(reason="capacity").inc()
            return None
        held = _Held(source=source, since=time.monotonic())
        self._held[held] = None
        self._by_source[source] += 1
        self.metrics.connections.set(len(self._held))
        return held

    def _evict_oldest_idle(self) -> bool:
        victim = next((held for held in self._held if held.requests == 0), None)
        if victim is None:
            return False
        self.metrics.connections_refused.labels(reason="evicted").inc()
        _drop(victim)
        self.release(victim)
        return True

    def served(self, held: _Held, transport: asyncio.Transport) -> None:
        held.transport = transport
        self._by_transport[id(transport)] = held

    def release(self, held: _Held) -> None:
        if held.released:
            return
        held.released = True
        del self._held[held]
        self._by_source[held.source] -= 1
        if not self._by_source[held.source]:
            del self._by_source[held.source]
        if held.transport is not None:
            self._by_transport.pop(id(held.transport), None)
        self.metrics.connections.set(len(self._held))

    @contextlib.contextmanager
    def in_request(self, transport: asyncio.BaseTransport | None) -> Iterator[None]:
        """Marks the connection as serving a request: never evicted meanwhile."""
        held = self._by_transport.get(id(transport)) if transport is not None else None
        if held is None:
            yield
            return
        held.requests += 1
        try:
            yield
        finally:
            held.requests -= 1

    def close_all(self) -> None:
        for held in list(self._held):
            _drop(held)
            self.release(held)


def _drop(held: _Held) -> None:
    """Ends a held connection. One still waiting for its first bytes is closed now, not when
    its task next runs: a flood of accepts must not outrun the closing of what it evicts."""
    if held.transport is not None:
        held.transport.abort()
        return
    if held.task is not None:
        held.task.cancel()
    if held.conn is not None:
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(held.conn)
        held.conn.close()


class _Tracked(asyncio.Protocol):
    """aiohttp's protocol, with the slot released when the connection ends."""

    def __init__(self, inner: asyncio.Protocol, on_lost: Callable[[], None]) -> None:
        self._inner = inner
        self._on_lost = on_lost

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            self._inner.connection_lost(exc)
        finally:
            self._on_lost()


async def _readable(sock: socket.socket) -> None:
    """Returns once `sock` has bytes (or its end) to read, reading none of them."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(sock.fileno(), wake)
    try:
        await ready
    finally:
        if sock.fileno() != -1:  # closed by an eviction, which removed the reader first
            loop.remove_reader(sock.fileno())


class Listener:
    """Accepts on `sock` and hands admitted connections, once TLS is up, to `factory`'s
    protocols (aiohttp's `runner.server`)."""

    def __init__(self, sock: socket.socket, factory: Callable[[], Any],
                 context: ssl.SSLContext, connections: Connections) -> None:
        self._sock = sock
        self._factory = factory
        self._context = context
        self._connections = connections

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    conn, address = await loop.sock_accept(self._sock)
                except OSError as exc:
                    if exc.errno not in _RESOURCE_ERRNOS:
                        log.debug("accept failed: %s", exc)
                        continue
                    log.warning("accept failed, pausing %g s: %s", _ACCEPT_BACKOFF_S, exc)
                    await asyncio.sleep(_ACCEPT_BACKOFF_S)
                    continue
                held = self._connections.admit(str(address[0]))
                if held is None:
                    conn.close()
                else:
                    held.conn = conn
                    held.task = asyncio.create_task(self._start(conn, held))
                    held.task.add_done_callback(functools.partial(self._ended, conn, held))
                # An accept that is ready completes without yielding: let evictions' closes
                # and handshakes run between accepts.
                await asyncio.sleep(0)
        finally:
            self._connections.close_all()
            self._sock.close()

    async def _start(self, conn: socket.socket, held: _Held) -> None:
        loop = asyncio.get_running_loop()
        timeout = self._connections.limits.handshake_timeout_s
        metrics = self._connections.metrics
        try:
            await asyncio.wait_for(_readable(conn), timeout)
        except TimeoutError:
            metrics.connections_refused.labels(reason="silent").inc()
            return
        held.conn = None
        try:
            transport, _protocol = await loop.connect_accepted_socket(
                lambda: _Tracked(self._factory(), lambda: self._connections.release(held)),
                conn, ssl=self._context, ssl_handshake_timeout=timeout,
            )
        except (OSError, ssl.SSLError, TimeoutError) as exc:
            metrics.connections_refused.labels(reason="handshake").inc()
            log.debug("TLS handshake from %s failed: %r", held.source, exc)
            return
        if held.released:  # evicted during the handshake's last step
            transport.abort()
        else:
            self._connections.served(held, transport)

    def _ended(self, conn: socket.socket, held: _Held, _task: asyncio.Task[None]) -> None:
        """The admission task is done, or was cancelled (evicted) perhaps before it ran: a
        connection not handed to TLS is closed here, so none outlives its slot."""
        held.task = None
        if held.transport is None:
            conn.close()
            self._connections.release(held)
