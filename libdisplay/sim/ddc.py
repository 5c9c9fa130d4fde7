"""A simulated DDC/CI monitor: the display side of DDC/CI and its EDID EEPROM, as a Transport.

Stands for a real monitor wherever no i2c bus exists (tests, the simulated node). It is
byte-exact on the wire: it checks what the host writes to 0x37 the way a display does
(source byte 0x51, length byte with the protocol flag, checksum seeded with 0x6E) and
silently ignores a bad packet; it answers Get VCP, Set VCP, Save Current Settings and
Capabilities Request with packets checksummed from 0x50, fragments its capabilities
string 32 bytes at a time, and serves the EDID at 0x50 with the E-DDC segment pointer at
0x30 when the EDID is longer than 256 bytes.

`Faults` makes it misbehave the ways real displays do (Null Messages, slow or garbled
replies, silence, endless capabilities). Time comes from an injectable clock; `FakeClock`
is one that a `DdcClient` can share, so tests of slow displays run instantly.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal

from libdisplay.hardware import mccs
from libdisplay.hardware.ddc import (
    CAPABILITIES_REPLY,
    CAPABILITIES_REQUEST,
    DDC_ADDRESS,
    DISPLAY_ADDRESS,
    EDID_ADDRESS,
    GET_VCP,
    GET_VCP_REPLY,
    HOST_ADDRESS,
    LENGTH_FLAG,
    NULL_MESSAGE,
    SAVE_SETTINGS,
    SEGMENT_ADDRESS,
    SET_VCP,
    I2cMessage,
    I2cRead,
    I2cWrite,
    InvalidArgumentError,
    TransportError,
    encode_reply,
    xor_checksum,
)

FRAGMENT_SIZE: Final = 32  # MAX_DDC_MULTI_PART_FRAGMENT_SIZE; some displays send more
_SEGMENT_SIZE: Final = 256  # one E-DDC segment: two EDID blocks


@dataclass(slots=True)
class Feature:
    """One VCP feature of the simulated display.

    `allowed` lists the values a Set VCP may choose for a non-continuous feature; when
    empty, any value up to `maximum` is taken. Other values are ignored, as displays do.
    """

    current: int
    maximum: int = 100
    vcp_type: int = 0
    allowed: tuple[int, ...] = ()

    def accepts(self, value: int) -> bool:
        return value in self.allowed if self.allowed else value <= self.maximum


# Used when no values are given: the features a claim sets (docs/ddc.md §5), on DisplayPort-1.
DEFAULT_FEATURES: Final[Mapping[int, Feature]] = MappingProxyType({
    mccs.BRIGHTNESS: Feature(50, 100),
    mccs.CONTRAST: Feature(50, 100),
    mccs.INPUT_SOURCE: Feature(0x0F, 0x12, allowed=(0x0F, 0x11, 0x12)),
    mccs.POWER_MODE: Feature(0x01, 0x05, allowed=(0x01, 0x04, 0x05)),
})

UnsupportedReply = Literal["rc", "null", "zeros"]


@dataclass(slots=True)
class Faults:
    """Misbehaviour on demand; counters count down as replies are read.

    - `null_replies`: the next N replies are Null Messages (the request stays pending).
    - `reply_delay`: a reply is ready this many seconds after its request; earlier reads
      get a Null Message ("not ready").
    - `busy_until`: every read before this clock time gets a Null Message.
    - `garbage_replies` / `bad_checksum_replies` / `wrong_offset_replies`: the next N
      replies are noise / have a wrong checksum / carry a capabilities offset one too high.
    - `silent`: "nack" does not acknowledge 0x37 at all; "zeros" acknowledges and reads 0s.
    - `bus_errno`: every transfer fails with this errno, as a broken adapter does.
    - `endless_capabilities`: the string repeats forever instead of ending.
    - `unsupported_reply`: how a Get VCP of an unknown code is answered: result code 0x01
      ("rc"), a Null Message ("null"), or a reply of zeros ("zeros") (docs/ddc.md §2).
    """

    null_replies: int = 0
    reply_delay: float = 0.0
    busy_until: float = float("-inf")
    garbage_replies: int = 0
    bad_checksum_replies: int = 0
    wrong_offset_replies: int = 0
    silent: Literal["nack", "zeros"] | None = None
    bus_errno: int | None = None
    endless_capabilities: bool = False
    unsupported_reply: UnsupportedReply = "rc"


@dataclass(frozen=True, slots=True)
class _Pending:
    data: bytes
    ready_at: float


class FakeClock:
    """A monotonic clock that only moves when something sleeps on it."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += max(0.0, seconds)


class SimulatedMonitor:
    """The display side of DDC/CI behind the `Transport` interface.

    Features come from `values` (a current value, or a `Feature`) and from the `vcp(...)`
    codes of `capabilities`; without `values`, brightness, contrast, input source and power
    mode exist as in `DEFAULT_FEATURES`. `received` records every packet written to 0x37,
    `rejected` those ignored as invalid, `saved` the values at the last Save Settings.
    """

    def __init__(
        self,
        *,
        capabilities: str | bytes = "",
        edid: bytes = b"",
        values: Mapping[int, int | Feature] | None = None,
        fragment_size: int = FRAGMENT_SIZE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 1 <= fragment_size <= 127 - 3:
            raise InvalidArgumentError(f"fragment_size {fragment_size} is outside 1..124")
        if len(edid) % 128:
            raise InvalidArgumentError(f"EDID of {len(edid)} bytes is not whole 128-byte blocks")
        caps = capabilities.encode("latin-1") if isinstance(capabilities, str) else capabilities
        self.capabilities = caps
        self.edid = edid
        self.fragment_size = fragment_size
        self.features = _features(caps, values)
        self.faults = Faults()
        self.received: list[bytes] = []
        self.rejected: list[bytes] = []
        self.saved: dict[int, int] = {}
        self._clock = clock
        self._pending: _Pending | None = None
        self._edid_pointer = 0
        self._segment = 0
        self._lock = threading.Lock()

    def value(self, code: int) -> int:
        """The current value of a feature."""
        return self.features[code].current

    def write(self, address: int, data: bytes) -> None:
        self.transfer([I2cWrite(address, data)])

    def read(self, address: int, length: int) -> bytes:
        return self.transfer([I2cRead(address, length)])[0]

    def transfer(self, messages: Sequence[I2cMessage]) -> list[bytes]:
        with self._lock:
            if self.faults.bus_errno is not None:
                code = self.faults.bus_errno
                raise TransportError(f"simulated bus error: {os.strerror(code)}", errno=code)
            try:
                return [r for m in messages if (r := self._message(m)) is not None]
            finally:
                self._segment = 0  # the segment pointer resets at STOP (E-DDC)

    def _message(self, message: I2cMessage) -> bytes | None:
        self._acknowledge(message.address)
        if message.address == DDC_ADDRESS:
            if isinstance(message, I2cWrite):
                self._receive(message.data)
                return None
            return self._reply(message.length)
        if isinstance(message, I2cRead):
            return self._read_edid(message.length)
        if message.address == SEGMENT_ADDRESS:
            self._segment = message.data[0] if message.data else 0
        elif message.data:
            # Further bytes would be EEPROM writes; EDID EEPROMs are write-protected.
            self._edid_pointer = self._segment * _SEGMENT_SIZE + message.data[0]
        return None

    def _acknowledge(self, address: int) -> None:
        present = {
            DDC_ADDRESS: self.faults.silent != "nack",
            EDID_ADDRESS: bool(self.edid),
            SEGMENT_ADDRESS: len(self.edid) > _SEGMENT_SIZE,
        }
        if not present.get(address, False):
            raise TransportError(f"simulated NACK at 0x{address:02X}", errno=errno.ENXIO)

    def _receive(self, wire: bytes) -> None:
        self.received.append(bytes(wire))
        if self.faults.silent:
            return
        data = _decode_request(wire)
        if data is None:
            self.rejected.append(bytes(wire))
            self._pending = None
            return
        reply = self._dispatch(data)
        self._pending = (None if reply is None
                         else _Pending(reply, self._clock() + self.faults.reply_delay))

    def _dispatch(self, data: bytes) -> bytes | None:
        """The reply data to a request, or None when there is nothing to say."""
        opcode, args = data[:1], data[1:]
        if opcode == bytes([GET_VCP]) and len(args) == 1:
            return self._get_vcp(args[0])
        if opcode == bytes([SET_VCP]) and len(args) == 3:
            feature = self.features.get(args[0])
            value = args[1] << 8 | args[2]
            if feature is not None and feature.accepts(value):
                feature.current = value
        elif opcode == bytes([SAVE_SETTINGS]) and not args:
            self.saved = {code: f.current for code, f in self.features.items()}
        elif opcode == bytes([CAPABILITIES_REQUEST]) and len(args) == 2 and self.capabilities:
            return self._fragment(args[0] << 8 | args[1])
        return None

    def _get_vcp(self, code: int) -> bytes | None:
        feature = self.features.get(code)
        if feature is None:
            style = self.faults.unsupported_reply
            if style == "null":
                return None
            return bytes([GET_VCP_REPLY, 0x01 if style == "rc" else 0x00, code, 0, 0, 0, 0, 0])
        return (bytes([GET_VCP_REPLY, 0x00, code, feature.vcp_type])
                + feature.maximum.to_bytes(2, "big") + feature.current.to_bytes(2, "big"))

    def _fragment(self, offset: int) -> bytes:
        caps = self.capabilities
        if self.faults.endless_capabilities:
            start = offset % len(caps)
            chunk = (caps[start:] + caps)[: self.fragment_size]
        else:
            chunk = caps[offset : offset + self.fragment_size]
        if self.faults.wrong_offset_replies > 0:
            self.faults.wrong_offset_replies -= 1
            offset = (offset + 1) & 0xFFFF
        return bytes([CAPABILITIES_REPLY]) + offset.to_bytes(2, "big") + chunk

    def _reply(self, length: int) -> bytes:
        faults = self.faults
        if faults.silent == "zeros":
            return bytes(length)
        if faults.garbage_replies > 0:
            faults.garbage_replies -= 1
            return _pad(bytes((0xA5 + 37 * i) & 0xFF for i in range(length)), length)
        pending, now = self._pending, self._clock()
        if pending is None or now < pending.ready_at or now < faults.busy_until:
            return _pad(NULL_MESSAGE, length)
        if faults.null_replies > 0:
            faults.null_replies -= 1
            return _pad(NULL_MESSAGE, length)
        self._pending = None
        packet = encode_reply(pending.data)
        if faults.bad_checksum_replies > 0:
            faults.bad_checksum_replies -= 1
            packet = packet[:-1] + bytes([packet[-1] ^ 0xFF])
        return _pad(packet, length)

    def _read_edid(self, length: int) -> bytes:
        """Sequential read from the pointer; past the end the EEPROM wraps around."""
        start = self._edid_pointer
        self._edid_pointer += length
        return bytes(self.edid[(start + i) % len(self.edid)] for i in range(length))


def _decode_request(wire: bytes) -> bytes | None:
    """The data of a valid request, or None for a packet a display ignores."""
    if len(wire) < 3 or wire[0] != HOST_ADDRESS or not wire[1] & LENGTH_FLAG:
        return None
    if len(wire) != (wire[1] & 0x7F) + 3:
        return None
    if xor_checksum(wire[:-1], DISPLAY_ADDRESS) != wire[-1]:
        return None
    return wire[2:-1]


def _pad(packet: bytes, length: int) -> bytes:
    """A read clocks out exactly `length` bytes; after the packet the display sends zeros."""
    return (packet + bytes(max(0, length - len(packet))))[:length]


def _features(caps: bytes, values: Mapping[int, int | Feature] | None) -> dict[int, Feature]:
    features: dict[int, Feature] = {}
    parsed = mccs.parse_capabilities(caps) if caps else None
    for listed in parsed.vcp if parsed else ():
        allowed = listed.allowed
        if listed.code == mccs.VCP_VERSION and parsed and parsed.mccs_version:
            major, minor = parsed.mccs_version
            features[listed.code] = Feature(major << 8 | minor, 0)
        elif allowed:
            features[listed.code] = Feature(allowed[0], max(allowed), allowed=allowed)
        else:
            features[listed.code] = Feature(50, 100)  # mid-scale, as for brightness
    chosen = DEFAULT_FEATURES if values is None else values
    for code, value in chosen.items():
        feature = value if isinstance(value, Feature) else Feature(value)
        features[code] = Feature(feature.current, feature.maximum, feature.vcp_type,
                                 feature.allowed)
    for code, feature in features.items():
        if not 0 <= code <= 0xFF:
            raise InvalidArgumentError(f"VCP code 0x{code:X} is outside 0x00..0xFF")
        for field, value in (("current", feature.current), ("maximum", feature.maximum)):
            if not 0 <= value <= 0xFFFF:
                raise InvalidArgumentError(f"feature 0x{code:02X}: {field} {value} is outside "
                                           f"0..65535")
    return features
