"""The gRPC side: plugin registration, the DRA service (v1 and v1beta1) and the health stream
(dra-health v1 and v1alpha1) on unix sockets.

grpcio's threaded server (`draplugin.rpc.grpcserver`) with the messages protoc generates from
`libdisplay/proto`, as the kubelet's grpc-go expects them. Threads, not asyncio: prepare and
unprepare are serialized anyway, and their work is blocking (the API through lightkube's sync
client, fsync'd files, a Wayland probe while waiting for the compositor); under asyncio each
would be a thread hand-off. A worker per call keeps GetInfo and the health stream answering
while a prepare waits for a restarted compositor. Each API version goes to the same `Driver`
calls and the same health verdict; the versions' messages are alike but for DRA v1's
`share_id`, unused here.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

import grpc

from draplugin.claims import ClaimRef
from draplugin.driver.state import Driver, Prepared
from draplugin.rpc import grpcserver
from draplugin.settings import Settings
from libdisplay.compositor.wayland import Liveness, probe
from libdisplay.hardware import drm
from libdisplay.pod import DRIVER
from libdisplay.proto import wire

log = logging.getLogger(__name__)

WORKERS: Final = 8
"""The most calls whose handlers run at once; each health stream holds one while it lasts."""
HEALTH_PERIOD_S: Final = 10.0
"""How often the health stream re-sends every device: well inside its timeout."""
HEALTH_TIMEOUT_S: Final = 30
"""Each device's health_check_timeout_seconds: past it without a message, the kubelet takes
the device as Unknown. Three periods, so one late message costs nothing."""
_PROBE_TIMEOUT_S: Final = 1.0
_MESSAGE_MAX: Final = 1024  # the kubelet truncates a longer health message


class PluginServer:
    """Serves registration, DRA and health on the settings' sockets until `stop`."""

    def __init__(
        self,
        settings: Settings,
        driver: Driver,
        *,
        health: Callable[[], tuple[bool, str]] | None = None,
        health_period_s: float = HEALTH_PERIOD_S,
    ) -> None:
        self._settings = settings
        self._driver = driver
        # The watchdog's verdict (answers, detail) when the publisher runs; else a probe here.
        self._health = health
        self._health_period_s = health_period_s
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._streams: set[threading.Event] = set()  # each open health stream's wake-up
        self._server = grpcserver.Server(self._handlers(), workers=WORKERS)

    def start(self) -> None:
        sockets = (self._settings.dra_socket, self._settings.registration_socket)
        for path in sockets:
            path.parent.mkdir(parents=True, exist_ok=True)
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
        """Refuse new calls, end the health streams, give the other calls `grace_s` seconds."""
        self._stopping.set()
        with self._lock:
            for wake in self._streams:
                wake.set()
        self._server.stop(grace_s)
        log.info("stopped; removed %s and %s", self._settings.registration_socket,
                 self._settings.dra_socket)

    # --- handlers --------------------------------------------------------------------------

    def _handlers(self) -> list[grpc.GenericRpcHandler]:
        reg = wire.REGISTRATION
        handlers = [grpc.method_handlers_generic_handler(wire.REGISTRATION_SERVICE, {
            "GetInfo": grpc.unary_unary_rpc_method_handler(
                self._get_info, reg.InfoRequest.FromString, reg.PluginInfo.SerializeToString),
            "NotifyRegistrationStatus": grpc.unary_unary_rpc_method_handler(
                self._notify_registration, reg.RegistrationStatus.FromString,
                reg.RegistrationStatusResponse.SerializeToString),
        })]
        for service, dra in wire.DRA_VERSIONS.items():
            handlers.append(grpc.method_handlers_generic_handler(service, {
                "NodePrepareResources": grpc.unary_unary_rpc_method_handler(
                    functools.partial(self._prepare, dra),
                    dra.NodePrepareResourcesRequest.FromString,
                    dra.NodePrepareResourcesResponse.SerializeToString),
                "NodeUnprepareResources": grpc.unary_unary_rpc_method_handler(
                    functools.partial(self._unprepare, dra),
                    dra.NodeUnprepareResourcesRequest.FromString,
                    dra.NodeUnprepareResourcesResponse.SerializeToString),
            }))
        for service, health in wire.HEALTH_VERSIONS.items():
            handlers.append(grpc.method_handlers_generic_handler(service, {
                "NodeWatchResources": grpc.unary_stream_rpc_method_handler(
                    functools.partial(self._watch_resources, health),
                    health.NodeWatchResourcesRequest.FromString,
                    health.NodeWatchResourcesResponse.SerializeToString),
            }))
        return handlers

    def _get_info(self, request: Any, context: grpc.ServicerContext) -> Any:
        return wire.REGISTRATION.PluginInfo(
            type=wire.PLUGIN_TYPE, name=DRIVER, endpoint=str(self._settings.dra_socket),
            supported_versions=wire.SUPPORTED_VERSIONS)

    def _notify_registration(self, request: Any, context: grpc.ServicerContext) -> Any:
        if request.plugin_registered:
            log.info("the kubelet registered the plugin")
        else:
            log.error("the kubelet refused the registration: %s", request.error)
        return wire.REGISTRATION.RegistrationStatusResponse()

    def _prepare(self, dra: Any, request: Any, context: grpc.ServicerContext) -> Any:
        answers = self._driver.prepare(_refs(request.claims))
        response = dra.NodePrepareResourcesResponse()
        for uid, answer in answers.items():
            _prepared(response.claims[uid], answer)
        return response

    def _unprepare(self, dra: Any, request: Any, context: grpc.ServicerContext) -> Any:
        response = dra.NodeUnprepareResourcesResponse()
        for uid, error in self._driver.unprepare(_refs(request.claims)).items():
            response.claims[uid].error = error
        return response

    def _watch_resources(self, health: Any, request: Any,
                         context: grpc.ServicerContext) -> Iterator[Any]:
        """Every device's health at once, again each period, until the client goes or the
        server stops: a device left out, or not re-sent within its timeout, goes Unknown."""
        wake = threading.Event()
        context.add_callback(wake.set)  # the client cancelled or went away
        with self._lock:
            self._streams.add(wake)
        try:
            while not self._stopping.is_set() and context.is_active():
                yield health.NodeWatchResourcesResponse(devices=self._device_health(health))
                wake.wait(self._health_period_s)
        finally:
            with self._lock:
                self._streams.discard(wake)

    def _device_health(self, health: Any) -> list[Any]:
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
            health.DeviceHealth(
                device=health.DeviceIdentifier(pool_name=self._settings.node.name,
                                               device_name=c.device_name),
                health=health.HEALTHY if ok else health.UNHEALTHY,
                last_updated_time=now,
                health_check_timeout_seconds=HEALTH_TIMEOUT_S,
                message="" if ok else detail[:_MESSAGE_MAX],
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


def _prepared(entry: Any, answer: Prepared) -> None:
    """A claim's NodePrepareResourceResponse: its error, or its devices."""
    if answer.error:
        entry.error = answer.error
        return
    for d in answer.devices:
        entry.devices.add(request_names=[d.request], pool_name=d.pool, device_name=d.device,
                          cdi_device_ids=list(d.cdi_ids))


def _refs(claims: Any) -> list[ClaimRef]:
    return [ClaimRef(uid=c.uid, namespace=c.namespace, name=c.name) for c in claims]
