"""What the operator's `/healthz` answers: every part that can wedge alone is asked.

Two parts can stop while the process lives on: the publisher's loop (its own check,
`NodeRuntime.liveness`) and the kubelet-facing gRPC server (its worker pool wedged, or its
sockets gone: a person or a kubelet restart that wiped the plugins directory). The kubelet sees
the second only as prepares that time out, so the server is dialled on both of its sockets, as
dra-example-driver's health check does. The call is `GetInfo`: the same server answers it on
both sockets, and it takes no lock a prepare holds, so a long prepare never fails liveness.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import grpc

from libdisplay.proto import wire

Check = Callable[[], tuple[bool, str]]
"""(alive, why) of one part."""

DIAL_TIMEOUT_S: Final = 1.0
"""Per socket; the kubelet's probe (daemonset.yaml) waits longer than both together."""


class HealthChecks:
    """The verdict of every check added so far: alive while all are, else the first failure's
    reason. Checks are added as their part starts (the gRPC server serves after recovery)."""

    def __init__(self, *checks: Check) -> None:
        self._checks = list(checks)

    def add(self, check: Check) -> None:
        self._checks.append(check)

    def __call__(self) -> tuple[bool, str]:
        reasons = []
        for check in list(self._checks):
            alive, why = check()
            if not alive:
                return False, why
            reasons.append(why)
        return True, "; ".join(reasons) or "no check"


def grpc_answers(sockets: Sequence[Path], *, timeout_s: float = DIAL_TIMEOUT_S) -> Check:
    """A check that calls GetInfo on each of the plugin's sockets."""

    def check() -> tuple[bool, str]:
        for path in sockets:
            why = _get_info(path, timeout_s)
            if why is not None:
                return False, f"the gRPC server does not answer on {path}: {why}"
        return True, "the gRPC server answers on both sockets"

    return check


def _get_info(path: Path, timeout_s: float) -> str | None:
    """None when GetInfo on `path` answers within `timeout_s`, else why not."""
    if not path.is_socket():
        return "no socket there"
    reg = wire.REGISTRATION
    with grpc.insecure_channel(f"unix:{path}") as channel:
        get_info = channel.unary_unary(
            wire.method(wire.REGISTRATION_SERVICE, "GetInfo"),
            request_serializer=reg.InfoRequest.SerializeToString,
            response_deserializer=reg.PluginInfo.FromString)
        try:
            get_info(reg.InfoRequest(), timeout=timeout_s)
        except grpc.RpcError as err:
            return f"{err.code().name} ({err.details()})"
    return None
