"""The gRPC side: plugin registration and the DRA service (v1 and v1beta1) on unix sockets.

One sync gRPC server with a small thread pool listens on both sockets. Sync, not asyncio:
prepare and unprepare are serialized anyway, and their work is blocking (the API through
lightkube's sync client, fsync'd files, a Wayland probe while waiting for the compositor);
under asyncio each would be a thread hand-off. The pool keeps GetInfo and the health stream
answering while a prepare waits for a restarted compositor. Both API versions go to the
same `Driver` calls; their messages are identical but for v1's `share_id`, unused here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent import futures
from typing import Any, Final

import grpc

from draplugin.settings import DRIVER, Settings
from draplugin.state import ClaimRef, Driver
from libdisplay import fsutil
from libdisplay.compositor.wayland import Liveness, probe
from libdisplay.hardware import drm
from libdisplay.proto import wire

log = logging.getLogger(__name__)

WORKERS: Final = 8
"""The server's thread pool: started lazily, never more than this."""
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
        self._server: Any = None

    def start(self) -> None:
        sockets = (self._settings.dra_socket, self._settings.registration_socket)
        for path in sockets:
            path.parent.mkdir(parents=True, exist_ok=True)
            if fsutil.remove(path):
                log.info("removed stale socket %s", path)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=WORKERS))
        server.add_generic_rpc_handlers(self._handlers())
        # The DRA socket first: the kubelet dials the endpoint as soon as it sees the
        # registration socket.
        for path in sockets:
            server.add_insecure_port(f"unix://{path}")
        server.start()
        self._server = server
        log.info("serving DRA on %s, registration on %s", *sockets)

    def wait(self) -> None:
        self._server.wait_for_termination()

    def stop(self, *, grace_s: float = 2.0) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.stop(grace_s).wait()
        for path in (self._settings.registration_socket, self._settings.dra_socket):
            fsutil.remove(path)
        log.info("stopped; removed %s and %s", self._settings.registration_socket,
                 self._settings.dra_socket)

    # --- handlers --------------------------------------------------------------------------

    def _handlers(self) -> tuple[Any, ...]:
        reg = wire.REGISTRATION
        handlers = [
            grpc.method_handlers_generic_handler(
                wire.REGISTRATION_SERVICE,
                {
                    "GetInfo": _unary(self._get_info, reg.InfoRequest),
                    "NotifyRegistrationStatus": _unary(
                        self._notify_registration, reg.RegistrationStatus
                    ),
                },
            ),
            grpc.method_handlers_generic_handler(
                wire.HEALTH_V1ALPHA1_SERVICE,
                {
                    "NodeWatchResources": grpc.unary_stream_rpc_method_handler(
                        self._watch_resources,
                        request_deserializer=wire.HEALTH_V1ALPHA1.NodeWatchResourcesRequest.FromString,
                        response_serializer=_serialize,
                    )
                },
            ),
        ]
        for service, module in wire.DRA_VERSIONS.items():
            handlers.append(
                grpc.method_handlers_generic_handler(
                    service,
                    {
                        "NodePrepareResources": _unary(
                            self._prepare_for(module), module.NodePrepareResourcesRequest
                        ),
                        "NodeUnprepareResources": _unary(
                            self._unprepare_for(module), module.NodeUnprepareResourcesRequest
                        ),
                    },
                )
            )
        return tuple(handlers)

    def _get_info(self, request: Any, context: Any) -> Any:
        return wire.REGISTRATION.PluginInfo(
            type=wire.PLUGIN_TYPE,
            name=DRIVER,
            endpoint=str(self._settings.dra_socket),
            supported_versions=list(wire.SUPPORTED_VERSIONS),
        )

    def _notify_registration(self, request: Any, context: Any) -> Any:
        if request.plugin_registered:
            log.info("the kubelet registered the plugin")
        else:
            log.error("the kubelet refused the registration: %s", request.error)
        return wire.REGISTRATION.RegistrationStatusResponse()

    def _prepare_for(self, module: Any) -> Any:
        def prepare(request: Any, context: Any) -> Any:
            answers = self._driver.prepare(_refs(request))
            response = module.NodePrepareResourcesResponse()
            for uid, answer in answers.items():
                entry = response.claims[uid]
                if answer.error:
                    entry.error = answer.error
                    continue
                for d in answer.devices:
                    entry.devices.add(
                        request_names=[d.request],
                        pool_name=d.pool,
                        device_name=d.device,
                        cdi_device_ids=list(d.cdi_ids),
                    )
            return response

        return prepare

    def _unprepare_for(self, module: Any) -> Any:
        def unprepare(request: Any, context: Any) -> Any:
            answers = self._driver.unprepare(_refs(request))
            response = module.NodeUnprepareResourcesResponse()
            for uid, error in answers.items():
                response.claims[uid].error = error
            return response

        return unprepare

    def _watch_resources(self, request: Any, context: Any) -> Any:
        health = wire.HEALTH_V1ALPHA1
        while context.is_active() and not self._stopping.is_set():
            yield health.NodeWatchResourcesResponse(devices=self._device_health())
            self._stopping.wait(HEALTH_PERIOD_S)

    def _device_health(self) -> list[Any]:
        health = wire.HEALTH_V1ALPHA1
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
                device=health.DeviceIdentifier(
                    pool_name=self._settings.node.name, device_name=c.device_name
                ),
                health=health.HEALTHY if ok else health.UNHEALTHY,
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


def _refs(request: Any) -> list[ClaimRef]:
    return [ClaimRef(uid=c.uid, namespace=c.namespace, name=c.name) for c in request.claims]


def _serialize(message: Any) -> bytes:
    data: bytes = message.SerializeToString()
    return data


def _unary(handler: Any, request_type: Any) -> Any:
    return grpc.unary_unary_rpc_method_handler(
        handler, request_deserializer=request_type.FromString, response_serializer=_serialize
    )
