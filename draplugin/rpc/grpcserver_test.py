"""The server wrapper against grpcio's client: socket files that appear only when served and go
at stop, a stop that cuts a call after its grace and refuses new ones, and the worker bound."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from draplugin.rpc import grpcserver

SERVICE = "test.Echo"
WAIT_S = 10.0


@pytest.fixture
def sock() -> Iterator[Path]:
    # unix socket paths are limited to 107 bytes: pytest's tmp_path can be longer.
    with tempfile.TemporaryDirectory(prefix="grpcserver-", dir="/tmp") as root:
        yield Path(root) / "plugin.sock"


def echo_server(handler: Callable[[bytes, Any], bytes], *, workers: int = 4) -> grpcserver.Server:
    """A server whose one method, Call, answers raw bytes."""
    return grpcserver.Server([grpc.method_handlers_generic_handler(SERVICE, {
        "Call": grpc.unary_unary_rpc_method_handler(handler)})], workers=workers)


def call(sock: Path, request: bytes = b"", *, timeout: float = WAIT_S) -> bytes:
    with grpc.insecure_channel(f"unix:{sock}") as channel:
        answer: bytes = channel.unary_unary(f"/{SERVICE}/Call")(request, timeout=timeout)
        return answer


def code_of(sock: Path) -> grpc.StatusCode | None:
    try:
        call(sock)
    except grpc.RpcError as err:
        code: grpc.StatusCode = err.code()
        return code
    return None


def test_the_socket_appears_only_once_served_and_replaces_a_stale_file(sock: Path) -> None:
    sock.write_text("stale")
    server = echo_server(lambda request, _context: request + b"!")
    server.add_unix_socket(sock)
    try:
        assert sock.read_text() == "stale"  # bound beside it, under a hidden name
        server.start()
        assert sock.is_socket()
        assert call(sock, b"ping") == b"ping!"
        assert [p.name for p in sock.parent.iterdir()] == [sock.name]
    finally:
        server.stop(0.1)


def test_stop_removes_the_sockets_and_refuses_new_calls(sock: Path) -> None:
    server = echo_server(lambda request, _context: request)
    server.add_unix_socket(sock)
    server.start()
    assert call(sock, b"x") == b"x"
    assert server.stop(0.1).wait(WAIT_S)
    assert list(sock.parent.iterdir()) == []
    assert code_of(sock) is grpc.StatusCode.UNAVAILABLE


def test_stop_cuts_a_call_after_the_grace(sock: Path) -> None:
    entered, release = threading.Event(), threading.Event()

    def stuck(request: bytes, context: Any) -> bytes:
        entered.set()
        release.wait(WAIT_S)
        return b""

    server = echo_server(stuck)
    server.add_unix_socket(sock)
    server.start()
    outcome: list[grpc.StatusCode | None] = []
    caller = threading.Thread(target=lambda: outcome.append(code_of(sock)))
    caller.start()
    try:
        assert entered.wait(WAIT_S)
        assert server.stop(0.2).wait(WAIT_S)
        caller.join(WAIT_S)
    finally:
        release.set()
    assert outcome == [grpc.StatusCode.UNAVAILABLE]


def test_wait_returns_once_the_call_running_at_stop_has_answered(sock: Path) -> None:
    # The operator's main thread returns from wait and exits: a call still running then
    # would die with the process before its grace.
    entered, release = threading.Event(), threading.Event()

    def slow(request: bytes, context: Any) -> bytes:
        entered.set()
        release.wait(WAIT_S)
        return b"done"

    server = echo_server(slow)
    server.add_unix_socket(sock)
    server.start()
    answers: list[bytes] = []
    caller = threading.Thread(target=lambda: answers.append(call(sock)))
    waiter = threading.Thread(target=server.wait)
    caller.start()
    try:
        assert entered.wait(WAIT_S)
        server.stop(WAIT_S)
        waiter.start()
        waiter.join(grpcserver.WAIT_SLICE_S * 3)
        assert waiter.is_alive(), "wait returned while a call was running"
    finally:
        release.set()
    waiter.join(WAIT_S)
    caller.join(WAIT_S)
    assert not waiter.is_alive() and answers == [b"done"]


def test_at_most_the_workers_run_at_once_and_every_call_answers(sock: Path) -> None:
    gate, lock = threading.Event(), threading.Lock()
    running = [0, 0]  # now, most

    def held(request: bytes, context: Any) -> bytes:
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
        gate.wait(WAIT_S)
        with lock:
            running[0] -= 1
        return request

    server = echo_server(held, workers=3)
    server.add_unix_socket(sock)
    server.start()
    try:
        with grpc.insecure_channel(f"unix:{sock}") as channel:
            method = channel.unary_unary(f"/{SERVICE}/Call")
            calls = [method.future(bytes([n]), timeout=WAIT_S) for n in range(12)]
            _wait_until(lambda: running[0] == 3)
            gate.set()
            assert [c.result() for c in calls] == [bytes([n]) for n in range(12)]
    finally:
        gate.set()
        server.stop(0.1)
    assert running[1] == 3


def test_the_pool_hands_a_handlers_exception_to_its_future() -> None:
    pool = grpcserver.DaemonPool(1, name="t")
    with pytest.raises(ValueError, match="no claim"):
        pool.submit(_raise, "no claim").result(WAIT_S)
    assert pool.submit(lambda a, *, b: a + b, 1, b=2).result(WAIT_S) == 3


def _raise(message: str) -> None:
    raise ValueError(message)


def _wait_until(check: Callable[[], bool]) -> None:
    pause = threading.Event()
    for _ in range(int(WAIT_S / 0.01)):
        if check():
            return
        pause.wait(0.01)
    raise AssertionError("timed out")
