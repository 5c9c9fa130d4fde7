"""A kubelet stand-in: the registration handshake and DRA calls over the plugin's unix sockets.

Built from the same protos as the plugin (libdisplay.proto), and dialing the way the kubelet
does: `unix:<path>`, insecure, GetInfo on the registration socket, the first advertised DRA
service it supports, then NodePrepareResources / NodeUnprepareResources on the endpoint.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import grpc

from libdisplay.proto import wire

Version = Literal["v1", "v1beta1"]
KUBELET_SERVICES: Final = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
# A 1.37 kubelet's health services, newest first: it takes the first the plugin advertises.
KUBELET_HEALTH_SERVICES: Final = (wire.HEALTH_V1_SERVICE, wire.HEALTH_V1ALPHA1_SERVICE)
_SERVICES: Final = {"v1": wire.DRA_V1_SERVICE, "v1beta1": wire.DRA_V1BETA1_SERVICE}
_MODULES: Final = {"v1": wire.DRA_V1, "v1beta1": wire.DRA_V1BETA1}
CALL_TIMEOUT_S: Final = 45.0  # the kubelet's defaultClientCallTimeout


class KubeletError(Exception):
    """The plugin did not pass the registration the kubelet would do."""


@dataclass(frozen=True, slots=True)
class Claim:
    uid: str
    name: str
    namespace: str = "default"


@dataclass(frozen=True, slots=True)
class Device:
    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Answer:
    devices: tuple[Device, ...]
    error: str


def _serialize(message: Any) -> bytes:
    data: bytes = message.SerializeToString()
    return data


def get_info(registration_socket: Path, *, timeout: float = 5.0) -> Any:
    with grpc.insecure_channel(f"unix:{registration_socket}") as channel:
        call = channel.unary_unary(
            wire.method(wire.REGISTRATION_SERVICE, "GetInfo"),
            request_serializer=_serialize,
            response_deserializer=wire.REGISTRATION.PluginInfo.FromString,
        )
        return call(wire.REGISTRATION.InfoRequest(), timeout=timeout)


class Kubelet:
    """One registered plugin: the DRA channel the kubelet keeps to its endpoint."""

    def __init__(self, registration_socket: Path, *, driver: str,
                 host_root: Path | None = None) -> None:
        """`host_root`: a simulated host's root dir, under which the plugin's endpoint (a path
        on the host, through its hostPath) is found."""
        info = get_info(registration_socket)
        if info.type != wire.PLUGIN_TYPE or info.name != driver:
            raise KubeletError(f"GetInfo said type {info.type!r} name {info.name!r}")
        supported = [v for v in info.supported_versions if v in KUBELET_SERVICES]
        if not supported:
            raise KubeletError(f"none of {list(info.supported_versions)} is supported")
        self.info = info
        self.service = supported[0]
        self.health_service = next(
            (v for v in KUBELET_HEALTH_SERVICES if v in info.supported_versions), None)
        endpoint = Path(info.endpoint)
        if host_root is not None:
            endpoint = host_root / endpoint.relative_to("/")
        self._channel = grpc.insecure_channel(f"unix:{endpoint}")
        with grpc.insecure_channel(f"unix:{registration_socket}") as channel:
            notify = channel.unary_unary(
                wire.method(wire.REGISTRATION_SERVICE, "NotifyRegistrationStatus"),
                request_serializer=_serialize,
                response_deserializer=wire.REGISTRATION.RegistrationStatusResponse.FromString,
            )
            notify(wire.REGISTRATION.RegistrationStatus(plugin_registered=True), timeout=5.0)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Kubelet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def prepare(self, claims: Iterable[Claim], *, version: Version = "v1") -> dict[str, Answer]:
        module = _MODULES[version]
        response = self._call(version, "NodePrepareResources", module.NodePrepareResourcesRequest,
                              module.NodePrepareResourcesResponse, claims)
        return {
            uid: Answer(
                devices=tuple(
                    Device(
                        request_names=tuple(d.request_names),
                        pool_name=d.pool_name,
                        device_name=d.device_name,
                        cdi_device_ids=tuple(d.cdi_device_ids),
                    )
                    for d in entry.devices
                ),
                error=entry.error,
            )
            for uid, entry in response.claims.items()
        }

    def unprepare(self, claims: Iterable[Claim], *, version: Version = "v1") -> dict[str, str]:
        module = _MODULES[version]
        response = self._call(version, "NodeUnprepareResources",
                              module.NodeUnprepareResourcesRequest,
                              module.NodeUnprepareResourcesResponse, claims)
        return {uid: entry.error for uid, entry in response.claims.items()}

    def health(self) -> dict[str, str]:
        """The first message of the health stream, on the health service a 1.37 kubelet
        picks: device name -> HEALTHY/UNHEALTHY/UNKNOWN."""
        if self.health_service is None:
            raise KubeletError("the plugin advertises no health service")
        health = wire.HEALTH_VERSIONS[self.health_service]
        call = self._channel.unary_stream(
            wire.method(self.health_service, "NodeWatchResources"),
            request_serializer=_serialize,
            response_deserializer=health.NodeWatchResourcesResponse.FromString,
        )
        stream = call(health.NodeWatchResourcesRequest(), timeout=CALL_TIMEOUT_S)
        try:
            first = next(stream)
        finally:
            stream.cancel()
        return {d.device.device_name: health.HealthStatus.Name(d.health) for d in first.devices}

    def _call(self, version: Version, method: str, request_type: Any, response_type: Any,
              claims: Iterable[Claim]) -> Any:
        call = self._channel.unary_unary(
            wire.method(_SERVICES[version], method),
            request_serializer=_serialize,
            response_deserializer=response_type.FromString,
        )
        request = request_type(
            claims=[{"uid": c.uid, "name": c.name, "namespace": c.namespace} for c in claims]
        )
        return call(request, timeout=CALL_TIMEOUT_S)
