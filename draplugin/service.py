"""The gRPC side: plugin registration and the DRA service (v1 and v1beta1) on unix sockets.

One threaded gRPC server listens on both sockets: `draplugin.rpc.grpcserver` with the messages of
`draplugin.rpc.grpcmessages`, not grpcio and protobuf, which cost the operator about 13 MiB for a
few calls an hour. Threads, not asyncio: prepare and unprepare are serialized anyway, and their
work is blocking (the API through lightkube's sync client, fsync'd files, a Wayland probe while
waiting for the compositor); under asyncio each would be a thread hand-off. A thread per call
keeps GetInfo and the health stream answering while a prepare waits for a restarted
compositor. Both API versions go to the same `Driver` calls; their messages are identical but
for v1's `share_id`, unused here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Final

from draplugin.claims import ClaimRef
from draplugin.driver.state import Driver
from draplugin.rpc import grpcmessages as msg
from draplugin.rpc import grpcserver
from draplugin.settings import Settings
from libdisplay import fsutil
from libdisplay.compositor.wayland import Liveness, probe
from libdisplay.hardware import drm
from libdisplay.pod import DRIVER

log = logging.getLogger(__name__)

WORKERS: Final = 8
"""The most calls whose handlers run at once (each on a thread of its own)."""
HEALTH_PERIOD_S: Final = 10.0
_PROBE_TIMEOUT_S: Final = 1.0


class PluginServer:
    """Serves registration, DRA and health on the settings' sockets until `stop`."""

    def __init__(
        self,
        settings: Settings,
        driver: Driver,
        *,
        health: Callable[[], tuple[bool, str]] | None = None,
    ) -> None:
        self._settings = settings
        self._driver = driver
        # The watchdog's verdict (answers, detail) when the publisher runs; else a probe here.
        self._health = health
        self._stopping = threading.Event()
        self._server = grpcserver.Server(self._methods(), workers=WORKERS)

    def start(self) -> None:
        sockets = (self._settings.dra_socket, self._settings.registration_socket)
        for path in sockets:
            path.parent.mkdir(parents=True, exist_ok=True)
            if fsutil.remove(path):
                log.info("removed stale socket %s", path)
        # The DRA socket first: the kubelet dials the endpoint as soon as it sees the
        # registration socket.
        for path in sockets:
            self._server.add_unix_socket(path)
        self._server.start()
        log.info("serving DRA on %s, registration on %s", *sockets)

    def wait(self) -> None:
        """Until `stop`."""
        self._server.wait()

    def stop(self, *, grace_s: float = 2.0) -> None:
        self._stopping.set()
        self._server.stop(grace_s)
        for path in (self._settings.registration_socket, self._settings.dra_socket):
            fsutil.remove(path)
        log.info("stopped; removed %s and %s", self._settings.registration_socket,
                 self._settings.dra_socket)

    # --- handlers --------------------------------------------------------------------------

    def _methods(self) -> dict[str, grpcserver.Method]:
        reg, health = msg.REGISTRATION_SERVICE, msg.HEALTH_V1ALPHA1_SERVICE
        methods = {
            msg.method(reg, "GetInfo"): grpcserver.unary(self._get_info, msg.decode_empty),
            msg.method(reg, "NotifyRegistrationStatus"): grpcserver.unary(
                self._notify_registration, msg.decode_registration_status),
            msg.method(health, "NodeWatchResources"): grpcserver.server_stream(
                self._watch_resources, msg.decode_empty),
        }
        # Both DRA versions carry the same messages.
        for service in msg.DRA_SERVICES:
            methods[msg.method(service, "NodePrepareResources")] = grpcserver.unary(
                self._prepare, msg.decode_claims)
            methods[msg.method(service, "NodeUnprepareResources")] = grpcserver.unary(
                self._unprepare, msg.decode_claims)
        return methods

    def _get_info(self, request: None, context: grpcserver.CallContext) -> bytes:
        return msg.plugin_info(type_=msg.PLUGIN_TYPE, name=DRIVER,
                               endpoint=str(self._settings.dra_socket),
                               supported_versions=msg.SUPPORTED_VERSIONS)

    def _notify_registration(self, request: msg.RegistrationStatus,
                             context: grpcserver.CallContext) -> bytes:
        if request.plugin_registered:
            log.info("the kubelet registered the plugin")
        else:
            log.error("the kubelet refused the registration: %s", request.error)
        return msg.EMPTY

    def _prepare(self, claims: list[msg.Claim], context: grpcserver.CallContext) -> bytes:
        answers = self._driver.prepare(_refs(claims))
        return msg.prepare_response({
            uid: ((), answer.error) if answer.error else (
                [msg.PreparedDevice(request_names=(d.request,), pool_name=d.pool,
                                    device_name=d.device, cdi_device_ids=tuple(d.cdi_ids))
                 for d in answer.devices], "")
            for uid, answer in answers.items()
        })

    def _unprepare(self, claims: list[msg.Claim], context: grpcserver.CallContext) -> bytes:
        return msg.unprepare_response(self._driver.unprepare(_refs(claims)))

    def _watch_resources(self, request: None, context: grpcserver.CallContext) -> Iterator[bytes]:
        while context.is_active() and not self._stopping.is_set():
            yield msg.watch_response(self._device_health())
            self._stopping.wait(HEALTH_PERIOD_S)

    def _device_health(self) -> list[msg.DeviceHealth]:
        ok, detail = self._compositor()
        try:
            cards = drm.enumerate_cards(
                sysfs_root=self._settings.node.sysfs_root, dev_root=self._settings.node.dev_root
            )
        except drm.DrmError as err:
            log.warning("cannot list devices for the health stream: %s", err)
            return []
        now = int(time.time())
        return [
            msg.DeviceHealth(
                pool_name=self._settings.node.name,
                device_name=c.device_name,
                health=msg.Health.HEALTHY if ok else msg.Health.UNHEALTHY,
                last_updated_time=now,
                health_check_timeout_seconds=int(HEALTH_PERIOD_S * 3),
                message="" if ok else detail[:1024],
            )
            for card in cards
            for c in card.connectors
            if c.connected
        ]

    def _compositor(self) -> tuple[bool, str]:
        if self._health is not None:
            return self._health()
        answered = probe(self._settings.wayland_socket, timeout=_PROBE_TIMEOUT_S)
        ok = answered.state is Liveness.ANSWERING
        return ok, f"compositor {answered.state}: {answered.detail}"


def _refs(claims: list[msg.Claim]) -> list[ClaimRef]:
    return [ClaimRef(uid=c.uid, namespace=c.namespace, name=c.name) for c in claims]
