"""liveness: /healthz's verdict over its checks, and the gRPC self-dial against a real
PluginServer on its two unix sockets."""

from __future__ import annotations

import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from draplugin.liveness import HealthChecks, grpc_answers
from draplugin.service import PluginServer
from draplugin.testing import settings


def test_alive_while_every_check_is_and_the_first_failure_names_why() -> None:
    liveness = HealthChecks(lambda: (True, "loop: a pass 1 s ago"))
    assert liveness() == (True, "loop: a pass 1 s ago")
    liveness.add(lambda: (False, "the gRPC server does not answer"))
    liveness.add(lambda: (False, "never reached"))
    assert liveness() == (False, "the gRPC server does not answer")


@pytest.fixture
def server() -> Iterator[PluginServer]:
    # unix socket paths are limited to 107 bytes: pytest's tmp_path can be longer.
    with tempfile.TemporaryDirectory(prefix="live-", dir="/tmp") as root:
        base = settings(Path(root))
        served = PluginServer(base, driver=_NoDriver())  # type: ignore[arg-type]
        served.start()
        try:
            yield served
        finally:
            served.stop(grace_s=0.1)


class _NoDriver:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"liveness must not reach the driver ({name})")


def _sockets(server: PluginServer) -> tuple[Path, Path]:
    return server._settings.dra_socket, server._settings.registration_socket


def test_the_grpc_server_answers_on_both_sockets(server: PluginServer) -> None:
    alive, why = grpc_answers(_sockets(server))()
    assert alive, why
    assert why == "the gRPC server answers on both sockets"


def test_a_removed_socket_fails_liveness_and_names_it(server: PluginServer) -> None:
    dra, _registration = _sockets(server)
    dra.unlink()
    alive, why = grpc_answers(_sockets(server))()
    assert not alive
    assert str(dra) in why and "no socket there" in why


def test_a_stopped_server_fails_liveness(server: PluginServer) -> None:
    sockets = _sockets(server)
    server._server.stop(0).wait()
    alive, why = grpc_answers(sockets, timeout_s=0.5)()
    assert not alive
    assert str(sockets[0]) in why


@pytest.mark.parametrize(("listening", "code"), [(True, "DEADLINE_EXCEEDED"),
                                                 (False, "UNAVAILABLE")],
                         ids=["never-answers", "refuses"])
def test_a_socket_that_does_not_answer_fails_liveness_within_the_timeout(
        listening: bool, code: str) -> None:
    # A wedged server: the kernel takes the connection and no one speaks; a dead one: the file
    # is there and nothing listens.
    with tempfile.TemporaryDirectory(prefix="live-", dir="/tmp") as root, \
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
        path = Path(root) / "dra.sock"
        silent.bind(str(path))
        if listening:
            silent.listen(1)
        started = time.monotonic()
        alive, why = grpc_answers([path], timeout_s=0.5)()
        took = time.monotonic() - started
    assert not alive
    assert str(path) in why and code in why
    assert took < 15.0  # ends at its 0.5 s time-out, not never; a loaded machine adds seconds
