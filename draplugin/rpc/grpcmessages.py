"""The kubelet's messages as the plugin reads and answers them, in protobuf's wire format.

The plugin serves six small messages (libdisplay/proto/*.proto: registration, DRA v1 and
v1beta1, whose messages are the same but for v1's optional `Device.share_id`, unused here,
and the health stream). protobuf's runtime and its C++ library cost the operator about 3 MiB of
RSS for them, so they are encoded and decoded here: proto3's varints and length-delimited
fields, the default values left out, unknown fields skipped as protobuf skips them.
`grpcmessages_test` checks every message against the generated modules both ways.

The services' names and paths are those of `libdisplay.proto.wire`, which loads the generated
modules at import; the test checks they are the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

REGISTRATION_SERVICE: Final = "pluginregistration.Registration"
DRA_V1_SERVICE: Final = "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
DRA_V1BETA1_SERVICE: Final = "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin"
HEALTH_V1ALPHA1_SERVICE: Final = "v1alpha1.DRAResourceHealth"
DRA_SERVICES: Final = (DRA_V1_SERVICE, DRA_V1BETA1_SERVICE)
# What GetInfo advertises: `<proto package>.<service>`, the kubelet picks the first it knows.
SUPPORTED_VERSIONS: Final = ("v1.DRAPlugin", "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth")
PLUGIN_TYPE: Final = "DRAPlugin"

_VARINT: Final = 0
_FIXED64: Final = 1
_BYTES: Final = 2
_FIXED32: Final = 5


class MessageError(ValueError):
    """Bytes that are not a message of the expected type."""


def method(service: str, name: str) -> str:
    """The gRPC method path, e.g. `/pluginregistration.Registration/GetInfo`."""
    return f"/{service}/{name}"


# --- what the kubelet sends ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Claim:
    """A claim in NodePrepareResourcesRequest or NodeUnprepareResourcesRequest."""

    namespace: str
    uid: str
    name: str


def decode_claims(data: bytes) -> list[Claim]:
    """NodePrepareResourcesRequest's or NodeUnprepareResourcesRequest's claims (field 1)."""
    claims = []
    for number, value in _fields(data):
        if number == 1:
            strings = _strings(_as_bytes(value), {1: "namespace", 2: "uid", 3: "name"})
            claims.append(Claim(**{"namespace": "", "uid": "", "name": "", **strings}))
    return claims


@dataclass(frozen=True, slots=True)
class RegistrationStatus:
    plugin_registered: bool
    error: str


def decode_registration_status(data: bytes) -> RegistrationStatus:
    registered, error = False, ""
    for number, value in _fields(data):
        if number == 1:
            registered = bool(value)
        elif number == 2:
            error = _text(_as_bytes(value))
    return RegistrationStatus(plugin_registered=registered, error=error)


def decode_empty(data: bytes) -> None:
    """InfoRequest and NodeWatchResourcesRequest: no fields (unknown ones are skipped)."""
    for _ in _fields(data):
        pass


# --- what the plugin answers ---------------------------------------------------------------


def plugin_info(*, type_: str, name: str, endpoint: str,
                supported_versions: Sequence[str]) -> bytes:
    return (_string(1, type_) + _string(2, name) + _string(3, endpoint)
            + b"".join(_string(4, v, always=True) for v in supported_versions))


EMPTY: Final = b""
"""RegistrationStatusResponse: no fields."""


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """A Device of NodePrepareResourceResponse."""

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]


def prepare_response(claims: Mapping[str, tuple[Sequence[PreparedDevice], str]]) -> bytes:
    """NodePrepareResourcesResponse: by claim UID, its devices and error."""
    entries = []
    for uid, (devices, error) in claims.items():
        answer = b"".join(_message(1, _device(d)) for d in devices) + _string(2, error)
        entries.append(_map_entry(uid, answer))
    return b"".join(_message(1, entry) for entry in entries)


def unprepare_response(errors: Mapping[str, str]) -> bytes:
    """NodeUnprepareResourcesResponse: by claim UID, its error ("" when unprepared)."""
    return b"".join(_message(1, _map_entry(uid, _string(1, error)))
                    for uid, error in errors.items())


class Health(IntEnum):
    UNKNOWN = 0
    HEALTHY = 1
    UNHEALTHY = 2


@dataclass(frozen=True, slots=True)
class DeviceHealth:
    pool_name: str
    device_name: str
    health: Health
    last_updated_time: int
    health_check_timeout_seconds: int
    message: str


def watch_response(devices: Iterable[DeviceHealth]) -> bytes:
    """NodeWatchResourcesResponse."""
    return b"".join(_message(1, _device_health(d)) for d in devices)


def _device(d: PreparedDevice) -> bytes:
    return (b"".join(_string(1, r, always=True) for r in d.request_names)
            + _string(2, d.pool_name) + _string(3, d.device_name)
            + b"".join(_string(4, c, always=True) for c in d.cdi_device_ids))


def _device_health(d: DeviceHealth) -> bytes:
    identifier = _string(1, d.pool_name) + _string(2, d.device_name)
    return (_message(1, identifier) + _int(2, int(d.health)) + _int(3, d.last_updated_time)
            + _int(4, d.health_check_timeout_seconds) + _string(5, d.message))


def _map_entry(key: str, value: bytes) -> bytes:
    # protobuf writes a map entry's key and value even when they are defaults.
    return _string(1, key, always=True) + _message(2, value)


# --- the wire format -----------------------------------------------------------------------


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # a negative int64 is its two's complement, ten bytes
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _key(number: int, wire_type: int) -> bytes:
    return _varint(number << 3 | wire_type)


def _string(number: int, value: str, *, always: bool = False) -> bytes:
    """A string field; proto3 leaves out "" unless it is an element of a repeated field."""
    if not value and not always:
        return b""
    return _message(number, value.encode())


def _message(number: int, body: bytes) -> bytes:
    return _key(number, _BYTES) + _varint(len(body)) + body


def _int(number: int, value: int) -> bytes:
    return _key(number, _VARINT) + _varint(value) if value else b""


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise MessageError("truncated or overlong varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of each field: an int for varints, bytes otherwise."""
    at = 0
    while at < len(data):
        key, at = _read_varint(data, at)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise MessageError("field number 0")
        value: int | bytes
        if wire_type == _VARINT:
            value, at = _read_varint(data, at)
        elif wire_type == _BYTES:
            length, at = _read_varint(data, at)
            value, at = data[at:at + length], at + length
        elif wire_type in (_FIXED64, _FIXED32):
            size = 8 if wire_type == _FIXED64 else 4
            value, at = data[at:at + size], at + size
        else:
            raise MessageError(f"wire type {wire_type} (groups are not used by these messages)")
        if at > len(data):
            raise MessageError("truncated field")
        yield number, value


def _as_bytes(value: int | bytes) -> bytes:
    if isinstance(value, int):
        raise MessageError("a varint where a string or message belongs")
    return value


def _text(value: bytes) -> str:
    try:
        return value.decode()
    except UnicodeDecodeError as err:
        raise MessageError(f"a string that is not UTF-8: {err}") from err


def _strings(data: bytes, names: Mapping[int, str]) -> dict[str, str]:
    return {names[n]: _text(_as_bytes(v)) for n, v in _fields(data) if n in names}
