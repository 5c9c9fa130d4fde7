"""The connection bookkeeping: the per-address and total bounds, and which connection makes
room: the oldest one not inside a request, never one serving a request. End to end, under a
flood, in bounds_test."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from capture.connections import ConnectionLimits, Connections
from capture.metrics import Metrics


class FakeTransport:
    def __init__(self) -> None:
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


def _connections(total: int, per_source: int) -> Connections:
    return Connections(ConnectionLimits(max_connections=total, per_source=per_source), Metrics())


def _serve(connections: Connections, source: str) -> FakeTransport:
    held = connections.admit(source)
    assert held is not None
    transport = FakeTransport()
    connections.served(held, cast(asyncio.Transport, transport))
    return transport


def _refused(connections: Connections) -> dict[str, float]:
    metric: Any = connections.metrics.connections_refused
    return {labels[0]: child._value.get() for labels, child in metric._metrics.items()}


def test_an_address_holds_at_most_its_share() -> None:
    connections = _connections(total=10, per_source=2)
    assert connections.admit("a") and connections.admit("a")
    assert connections.admit("a") is None
    assert connections.admit("b") is not None
    assert _refused(connections) == {"source": 1.0}


def test_the_oldest_idle_connection_makes_room_never_one_in_a_request() -> None:
    connections = _connections(total=2, per_source=5)
    first, second = _serve(connections, "a"), _serve(connections, "b")
    with connections.in_request(cast(asyncio.Transport, first)):
        third = _serve(connections, "c")
        assert (first.aborted, second.aborted, third.aborted) == (False, True, False)
        with connections.in_request(cast(asyncio.Transport, third)):
            assert connections.admit("d") is None
    assert len(connections) == 2
    assert _refused(connections) == {"evicted": 1.0, "capacity": 1.0}
    assert _serve(connections, "d") and first.aborted  # out of its request, it is the oldest
