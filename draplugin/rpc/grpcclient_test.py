"""grpcclient against the plugin's own server: an answer, a failed call's status and message,
and a server that does not answer within the deadline."""

from __future__ import annotations

import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from draplugin.rpc import grpcclient, grpcmessages, grpcserver
from draplugin.rpc.grpcserver import Status

METHOD = "/test.Service/Echo"


@pytest.fixture
def sock() -> Iterator[Path]:
    # unix socket paths are limited to 107 bytes: pytest's tmp_path can be longer.
    with tempfile.TemporaryDirectory(prefix="client-", dir="/tmp") as root:
        yield Path(root) / "s.sock"


def _serving(sock: Path, handler: grpcserver.Method) -> grpcserver.Server:
    server = grpcserver.Server({METHOD: handler}, workers=2)
    server.add_unix_socket(sock)
    server.start()
    return server


def test_the_answer_is_the_handlers_bytes(sock: Path) -> None:
    server = _serving(sock, grpcserver.unary(lambda r, c: r + b"!", bytes))
    try:
        assert grpcclient.call(sock, METHOD, b"ping", timeout_s=5.0) == b"ping!"
    finally:
        server.stop(0.1)


def test_a_failed_call_raises_its_status_and_message(sock: Path) -> None:
    server = _serving(sock, grpcserver.unary(lambda r, c: b"", grpcmessages.decode_claims))
    try:
        with pytest.raises(grpcclient.CallError) as failed:
            grpcclient.call(sock, METHOD, b"\x0a\xff", timeout_s=5.0)
        assert failed.value.status is Status.INTERNAL
        assert "cannot parse the request" in failed.value.message
        with pytest.raises(grpcclient.CallError) as unknown:
            grpcclient.call(sock, "/test.Service/Nope", b"", timeout_s=5.0)
        assert unknown.value.status is Status.UNIMPLEMENTED
    finally:
        server.stop(0.1)


def test_a_server_that_never_answers_is_a_deadline_and_one_that_is_gone_unavailable(
        sock: Path) -> None:
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.bind(str(sock))
    silent.listen(1)  # accepts (the kernel does) and never speaks
    try:
        with pytest.raises(grpcclient.CallError) as late:
            grpcclient.call(sock, METHOD, b"", timeout_s=0.2)
        assert late.value.status is Status.DEADLINE_EXCEEDED
    finally:
        silent.close()
    with pytest.raises(grpcclient.CallError) as gone:
        grpcclient.call(sock, METHOD, b"", timeout_s=1.0)
    assert gone.value.status is Status.UNAVAILABLE


def test_a_call_cut_by_stop_is_unavailable(sock: Path) -> None:
    entered, release = threading.Event(), threading.Event()

    def stuck(request: bytes, context: grpcserver.CallContext) -> bytes:
        entered.set()
        release.wait(5.0)
        return b""

    server = _serving(sock, grpcserver.unary(stuck, bytes))
    outcome: list[grpcclient.CallError] = []

    def caller() -> None:
        try:
            grpcclient.call(sock, METHOD, b"", timeout_s=5.0)
        except grpcclient.CallError as err:
            outcome.append(err)

    thread = threading.Thread(target=caller)
    thread.start()
    try:
        assert entered.wait(5.0)
        server.stop(0.1).wait(5.0)
        thread.join(5.0)
    finally:
        release.set()
    assert [e.status for e in outcome] == [Status.UNAVAILABLE]
