"""DDC/CI, host side: VCP get and set, Save Current Settings, capabilities and EDID over I²C.

Owns the wire format of DDC/CI 1.1 (packets, the two checksum seeds, the Null Message), the
delays and retry limits of docs/ddc.md §4, the `Transport` interface the protocol runs
over, and `LinuxI2c`, that interface on /dev/i2c-N. The display side used in tests is
`libdisplay.sim.ddc`; capability strings are parsed by `libdisplay.hardware.mccs`.

Every failure is a `DdcError`. Each operation ends within a bounded time: retries are
counted, no new try starts once the operation's time budget is spent, and the bytes read
are bounded (a capabilities string longer than `MAX_CAPABILITIES` is refused), so a
silent or babbling display cannot hold a caller.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Final, Protocol, TypeAlias, TypeVar

log = logging.getLogger(__name__)

DDC_ADDRESS: Final = 0x37  # 7-bit; 0x6E/0x6F as 8-bit write/read addresses
EDID_ADDRESS: Final = 0x50
SEGMENT_ADDRESS: Final = 0x30  # E-DDC segment pointer, for EDID blocks 2 and up
HOST_ADDRESS: Final = 0x51  # the source byte of every request
DISPLAY_ADDRESS: Final = 0x6E  # first byte of every reply; also the request checksum seed
REPLY_SEED: Final = 0x50  # the host's virtual address stands in for 0x6F in reply checksums
LENGTH_FLAG: Final = 0x80  # bit 7 of the length byte, the "protocol flag"
MAX_REQUEST_DATA: Final = 32

GET_VCP: Final = 0x01
GET_VCP_REPLY: Final = 0x02
SET_VCP: Final = 0x03
SAVE_SETTINGS: Final = 0x0C
CAPABILITIES_REPLY: Final = 0xE3
CAPABILITIES_REQUEST: Final = 0xF3

# ddcutil reads the largest packet (39 bytes) plus one for displays that double the 0x6E.
VCP_READ_SIZE: Final = 40
# ddccontrol reads 64: some displays send 43-byte capability fragments, not the spec's 32.
CAPABILITIES_READ_SIZE: Final = 64
# The longest real string seen is about 1 KiB (ddc-caps); four times that ends a babbler.
MAX_CAPABILITIES: Final = 4096

EDID_BLOCK_SIZE: Final = 128
EDID_HEADER: Final = bytes.fromhex("00FFFFFFFFFFFF00")
EDID_TRIES: Final = 5  # the kernel's drm_do_probe_ddc_edid

MAX_TRIES: Final = 15  # ddcutil's MAX_MAX_TRIES

# ddcutil gives up at once on these errnos (ddc_write_read_with_retry); the kernel's EDID
# probe stops on ENXIO. ENXIO and EREMOTEIO are how adapters report an address NACK.
_FATAL_ERRNOS: Final = frozenset({errno.EIO, errno.EBADF, errno.ENXIO, errno.EBUSY})
_NACK_ERRNOS: Final = frozenset({errno.ENXIO, errno.EREMOTEIO})


class DdcError(Exception):
    """Base of every error from this module."""


class TransportError(DdcError):
    """The I²C bus or the device file failed; `errno` is the OS error, if there was one."""

    def __init__(self, message: str, *, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno

    @property
    def nack(self) -> bool:
        """Nothing acknowledged the address: no display there, or one ignoring DDC/CI."""
        return self.errno in _NACK_ERRNOS


class NoReplyError(DdcError):
    """The display did not answer: its address was not acknowledged, or it sent zeros."""


class NullMessageError(NoReplyError):
    """The display kept answering with the Null Message: busy, or its way of saying no."""


class ChecksumError(DdcError):
    """A reply (or an EDID block) failed its checksum."""


class GarbledReplyError(DdcError):
    """A reply that is not the answer asked for: wrong source, length, opcode or offset."""


class ReplyTooLongError(GarbledReplyError):
    """A capabilities string that never ends (longer than `MAX_CAPABILITIES`)."""


class UnsupportedVcpError(DdcError):
    """The display answered that it does not support the VCP code (result code 0x01)."""


class InvalidArgumentError(DdcError, ValueError):
    """A request or setting out of range; the message names the field and the value."""


# --- Packets ----------------------------------------------------------------------------


def xor_checksum(data: bytes, seed: int) -> int:
    """XOR of `seed` and every byte: seed 0x6E for requests, 0x50 for replies."""
    value = seed
    for byte in data:
        value ^= byte
    return value


def encode_request(data: bytes) -> bytes:
    """The bytes written to 0x37: `51 80|n data CHK` (the adapter sends the 0x6E)."""
    if len(data) > MAX_REQUEST_DATA:
        raise InvalidArgumentError(f"request data is {len(data)} bytes; at most 32 fit")
    packet = bytes([HOST_ADDRESS, LENGTH_FLAG | len(data)]) + data
    return packet + bytes([xor_checksum(packet, DISPLAY_ADDRESS)])


def encode_reply(data: bytes) -> bytes:
    """The bytes a display sends: `6E 80|n data CHK`, checksummed from 0x50."""
    packet = bytes([DISPLAY_ADDRESS, LENGTH_FLAG | len(data)]) + data
    return packet + bytes([xor_checksum(packet, REPLY_SEED)])


NULL_MESSAGE: Final = encode_reply(b"")  # 6E 80 BE


def decode_reply(raw: bytes) -> bytes:
    """The data bytes of a reply read from 0x37; empty for the Null Message."""
    if not any(raw):
        raise NoReplyError(f"the display sent only zero bytes ({len(raw)} read)")
    if raw[:2] == bytes([DISPLAY_ADDRESS, DISPLAY_ADDRESS]):
        raw = raw[1:]  # some displays send the source byte twice (ddcutil skips one)
    if raw[0] != DISPLAY_ADDRESS:
        raise GarbledReplyError(f"reply starts with 0x{raw[0]:02X}, not the display's 0x6E")
    if len(raw) < 3:
        raise GarbledReplyError(f"reply of {len(raw)} bytes is shorter than a Null Message")
    # Bit 7 of the length byte is not checked: ddccontrol found displays that leave it clear.
    end = 2 + (raw[1] & 0x7F)
    if end >= len(raw):
        raise GarbledReplyError(
            f"reply length byte 0x{raw[1]:02X} overruns the {len(raw)} bytes read")
    expected = xor_checksum(raw[:end], REPLY_SEED)
    if raw[end] != expected:
        raise ChecksumError(f"reply checksum 0x{raw[end]:02X}, expected 0x{expected:02X}")
    return raw[2:end]


def get_vcp_request(code: int) -> bytes:
    return encode_request(bytes([GET_VCP, _byte("VCP code", code)]))


def set_vcp_request(code: int, value: int) -> bytes:
    if not 0 <= value <= 0xFFFF:
        raise InvalidArgumentError(f"VCP value {value} is outside 0..65535")
    return encode_request(bytes([SET_VCP, _byte("VCP code", code)]) + value.to_bytes(2, "big"))


def save_settings_request() -> bytes:
    return encode_request(bytes([SAVE_SETTINGS]))


def capabilities_request(offset: int) -> bytes:
    if not 0 <= offset <= 0xFFFF:
        raise InvalidArgumentError(f"capabilities offset {offset} is outside 0..65535")
    return encode_request(bytes([CAPABILITIES_REQUEST]) + offset.to_bytes(2, "big"))


@dataclass(frozen=True, slots=True)
class VcpReading:
    """A Get VCP Feature reply. `vcp_type` is the type byte: 0 set parameter, 1 momentary."""

    code: int
    current: int
    maximum: int
    vcp_type: int


def decode_vcp_reply(data: bytes, code: int) -> VcpReading:
    """Check a Get VCP reply (`02 rc vcp tp mh ml sh sl`) against the code asked for."""
    if data[0] != GET_VCP_REPLY:
        raise GarbledReplyError(f"reply opcode 0x{data[0]:02X}, expected 0x02 (VCP reply)")
    if len(data) != 8:
        raise GarbledReplyError(f"VCP reply has {len(data)} data bytes, expected 8")
    result, echoed, vcp_type, max_hi, max_lo, cur_hi, cur_lo = data[1:]
    if echoed != code:
        raise GarbledReplyError(f"VCP reply is for code 0x{echoed:02X}, asked for 0x{code:02X}")
    if result == 0x01:
        raise UnsupportedVcpError(f"the display does not support VCP code 0x{code:02X}")
    if result != 0x00:
        raise GarbledReplyError(f"VCP reply result code 0x{result:02X} (expected 0x00 or 0x01)")
    return VcpReading(code, cur_hi << 8 | cur_lo, max_hi << 8 | max_lo, vcp_type)


def _byte(field: str, value: int) -> int:
    if not 0 <= value <= 0xFF:
        raise InvalidArgumentError(f"{field} {value} is outside 0..255")
    return value


# --- Transport --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class I2cWrite:
    address: int
    data: bytes

    def __post_init__(self) -> None:
        _check_message(self.address, len(self.data))


@dataclass(frozen=True, slots=True)
class I2cRead:
    address: int
    length: int

    def __post_init__(self) -> None:
        _check_message(self.address, self.length)


I2cMessage: TypeAlias = I2cWrite | I2cRead


def _check_message(address: int, length: int) -> None:
    if not 0 <= address <= 0x7F:
        raise InvalidArgumentError(f"I2C address 0x{address:X} is not a 7-bit address")
    if not 0 <= length <= 0xFFFF:
        raise InvalidArgumentError(f"I2C message length {length} is outside 0..65535")


class Transport(Protocol):
    """Raw I²C to 7-bit addresses. Failures raise `TransportError` (with the errno)."""

    def write(self, address: int, data: bytes) -> None:
        """One write transfer (START, address, data, STOP)."""

    def read(self, address: int, length: int) -> bytes:
        """One read transfer of exactly `length` bytes."""

    def transfer(self, messages: Sequence[I2cMessage]) -> list[bytes]:
        """Messages joined by repeated STARTs; the data of each read, in order."""


# --- Timing and retries -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Timing:
    """Delays in seconds (docs/ddc.md §4), all scaled by `multiplier`.

    `write_to_read` is slept between a request and reading its reply. The others are the
    least time between the end of one command and the start of the next. The budgets
    bound each operation: no new try starts after them (they are not scaled).
    """

    write_to_read: float = 0.050  # spec: at least 40 ms; ddcutil 50 ms
    post_read: float = 0.050  # ddcutil SE_POST_READ
    post_write: float = 0.050  # after Set VCP, spec §4.4
    post_save: float = 0.200  # after Save Current Settings, spec §4.5
    between_fragments: float = 0.050  # capabilities fragments, spec §4.6
    pre_capabilities: float = 0.200  # ddcutil, "based on testing"
    null_backoff: tuple[float, ...] = (0.025, 0.100, 0.200)  # extra after the 1st, 2nd, 3rd+ null
    multiplier: float = 1.0  # ddcutil's sleep multiplier: slow displays need more than 1
    command_budget: float = 3.0
    capabilities_budget: float = 30.0

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            for number in value if isinstance(value, tuple) else (value,):
                if not number >= 0:
                    raise InvalidArgumentError(f"Timing.{item.name} {value!r} is negative")
        if not self.null_backoff:
            raise InvalidArgumentError("Timing.null_backoff is empty")
        if self.multiplier <= 0:
            raise InvalidArgumentError(f"Timing.multiplier {self.multiplier} is not positive")


@dataclass(frozen=True, slots=True)
class Retries:
    """Tries per exchange (ddcutil parms.h); `null_replies`: Null Messages retried."""

    write_only: int = 4
    write_read: int = 10
    multi_part: int = 8
    null_replies: int = 3

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            low = 0 if item.name == "null_replies" else 1
            if not low <= value <= MAX_TRIES:
                raise InvalidArgumentError(
                    f"Retries.{item.name} {value} is outside {low}..{MAX_TRIES}")


# --- The host ---------------------------------------------------------------------------

_T = TypeVar("_T")


class DdcClient:
    """DDC/CI commands to the display behind one transport.

    Not thread-safe: one client per bus, used by one thread at a time, since the delays
    between commands are tracked here.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        timing: Timing | None = None,
        retries: Retries | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._transport = transport
        self._timing = timing or Timing()
        self._retries = retries or Retries()
        self._sleep = sleep
        self._clock = clock
        self._quiet_until = float("-inf")

    def get_vcp(self, code: int) -> VcpReading:
        """Get VCP Feature: current and maximum value and the type byte."""
        request = get_vcp_request(code)
        return self._exchange(
            request,
            lambda data: decode_vcp_reply(data, code),
            what=f"get VCP 0x{code:02X}",
            read_size=VCP_READ_SIZE,
            quiet_after=self._timing.post_read,
            deadline=self._clock() + self._timing.command_budget,
        )

    def set_vcp(self, code: int, value: int) -> None:
        """Set VCP Feature. The display does not answer; read the value back to be sure."""
        request = set_vcp_request(code, value)
        self._write_only(request, what=f"set VCP 0x{code:02X} to {value}",
                         quiet_after=self._timing.post_write)

    def save_settings(self) -> None:
        """Save Current Settings: the display stores its values across power cycles."""
        self._write_only(save_settings_request(), what="save current settings",
                         quiet_after=self._timing.post_save)

    def capabilities(self) -> str:
        """The capabilities string, fragments joined, trailing blanks and NULs removed.

        Bytes are decoded as Latin-1 so nothing is lost; parse with `mccs.parse_capabilities`.
        """
        deadline = self._clock() + self._timing.capabilities_budget
        self._wait_quiet()
        self._pause(self._timing.pre_capabilities)
        attempts = 0
        while True:
            attempts += 1
            try:
                raw = self._capabilities_attempt(deadline)
            except ReplyTooLongError:
                raise
            except (ChecksumError, GarbledReplyError) as err:
                # ddcutil restarts the whole read from offset 0 when a fragment fails.
                if attempts >= self._retries.multi_part or self._clock() >= deadline:
                    raise type(err)(f"capabilities: {err}; gave up after {attempts} "
                                    f"attempts") from err
                log.debug("capabilities attempt %d failed: %s", attempts, err)
                continue
            return raw.rstrip(b" \0").decode("latin-1")

    def read_edid(self) -> bytes:
        """The EDID from the EEPROM at 0x50: the base block and its extensions.

        Used to tell which bus belongs to which connector, by comparing with sysfs.
        """
        base = self._edid_block(0)
        if base[:8] != EDID_HEADER:
            raise GarbledReplyError(f"EDID at 0x50 starts with {base[:8].hex(' ')}, not the header")
        blocks = [base]
        for number in range(1, base[126] + 1):
            block = self._edid_block(number)
            if block[:8] == EDID_HEADER:
                # A 128-byte EEPROM wraps around; ddcutil drops the repeat the same way.
                log.warning("EDID block %d repeats the base block; keeping the base only", number)
                break
            blocks.append(block)
        return b"".join(blocks)

    def _capabilities_attempt(self, deadline: float) -> bytes:
        assembled = bytearray()
        while True:
            offset = len(assembled)
            data = self._exchange(
                capabilities_request(offset),
                _capabilities_fragment,
                what=f"capabilities at offset {offset}",
                read_size=CAPABILITIES_READ_SIZE,
                quiet_after=self._timing.between_fragments,
                deadline=deadline,
            )
            echoed = data[1] << 8 | data[2]
            if echoed != offset:
                raise GarbledReplyError(f"capabilities fragment for offset {echoed}, "
                                        f"asked for {offset}")
            if len(data) == 3:
                return bytes(assembled)
            assembled += data[3:]
            if len(assembled) > MAX_CAPABILITIES:
                raise ReplyTooLongError(f"capabilities string longer than {MAX_CAPABILITIES} "
                                        f"bytes; the display does not end it")
            if self._clock() >= deadline:
                # Tiny fragments from a slow display would stay under the byte bound for minutes.
                raise NoReplyError(f"capabilities: not complete within "
                                   f"{self._timing.capabilities_budget} s "
                                   f"({len(assembled)} bytes so far)")

    def _exchange(
        self,
        request: bytes,
        decode: Callable[[bytes], _T],
        *,
        what: str,
        read_size: int,
        quiet_after: float,
        deadline: float,
    ) -> _T:
        """Write a request, wait, read and decode the reply, retrying as ddcutil does."""
        tries = 0
        nulls = 0
        while True:
            tries += 1
            try:
                data = self._write_read(request, read_size=read_size, quiet_after=quiet_after)
                if not data:
                    raise NullMessageError("Null Message")
                return decode(data)
            except NullMessageError as err:
                nulls += 1
                if nulls > self._retries.null_replies:
                    raise NullMessageError(
                        f"{what}: the display answered with the Null Message {nulls} times "
                        f"(busy, or its way of refusing the request)") from err
                backoff = self._timing.null_backoff
                self._extend_quiet(backoff[min(nulls, len(backoff)) - 1])
                last: DdcError = err
            except UnsupportedVcpError:
                raise
            except DdcError as err:
                if not _retryable(err):
                    raise _give_up(what, err, tries) from err
                last = err
            if tries >= self._retries.write_read or self._clock() >= deadline:
                raise _give_up(what, last, tries) from last
            log.debug("%s: try %d failed: %s", what, tries, last)

    def _write_read(self, request: bytes, *, read_size: int, quiet_after: float) -> bytes:
        self._wait_quiet()
        try:
            self._transport.write(DDC_ADDRESS, request)
            self._pause(self._timing.write_to_read)
            raw = self._transport.read(DDC_ADDRESS, read_size)
        finally:
            self._set_quiet(quiet_after)
        return decode_reply(raw)

    def _write_only(self, request: bytes, *, what: str, quiet_after: float) -> None:
        deadline = self._clock() + self._timing.command_budget
        tries = 0
        while True:
            tries += 1
            self._wait_quiet()
            try:
                self._transport.write(DDC_ADDRESS, request)
                return
            except TransportError as err:
                if (not _retryable(err) or tries >= self._retries.write_only
                        or self._clock() >= deadline):
                    raise _give_up(what, err, tries) from err
                log.debug("%s: try %d failed: %s", what, tries, err)
            finally:
                self._set_quiet(quiet_after)

    def _edid_block(self, number: int) -> bytes:
        segment, half = divmod(number, 2)
        messages: list[I2cMessage] = []
        if segment:
            messages.append(I2cWrite(SEGMENT_ADDRESS, bytes([segment])))
        messages += [I2cWrite(EDID_ADDRESS, bytes([half * EDID_BLOCK_SIZE])),
                     I2cRead(EDID_ADDRESS, EDID_BLOCK_SIZE)]
        what = f"read EDID block {number}"
        tries = 0
        while True:
            tries += 1
            try:
                return _check_edid_block(self._transport.transfer(messages))
            except DdcError as err:
                if not _retryable(err) or tries >= EDID_TRIES:
                    raise _give_up(what, err, tries) from err
                log.debug("%s: try %d failed: %s", what, tries, err)

    def _pause(self, seconds: float) -> None:
        self._sleep(seconds * self._timing.multiplier)

    def _set_quiet(self, seconds: float) -> None:
        """The next command starts no earlier than `seconds` from now."""
        until = self._clock() + seconds * self._timing.multiplier
        self._quiet_until = max(self._quiet_until, until)

    def _extend_quiet(self, seconds: float) -> None:
        base = max(self._quiet_until, self._clock())
        self._quiet_until = base + seconds * self._timing.multiplier

    def _wait_quiet(self) -> None:
        delay = self._quiet_until - self._clock()
        if delay > 0:
            self._sleep(delay)


def _capabilities_fragment(data: bytes) -> bytes:
    if data[0] != CAPABILITIES_REPLY or len(data) < 3:
        raise GarbledReplyError(f"reply {data[:3].hex(' ')} is not a capabilities fragment")
    return data


def _check_edid_block(results: list[bytes]) -> bytes:
    if len(results) != 1 or len(results[0]) != EDID_BLOCK_SIZE:
        raise GarbledReplyError(f"EDID read returned {[len(r) for r in results]} bytes, not [128]")
    block = results[0]
    if sum(block) % 256:
        raise ChecksumError(f"EDID block checksum byte 0x{block[127]:02X} does not sum to zero")
    return block


def _retryable(err: DdcError) -> bool:
    return not (isinstance(err, TransportError) and err.errno in _FATAL_ERRNOS)


def _give_up(what: str, err: DdcError, tries: int) -> DdcError:
    counted = f"{tries} {'try' if tries == 1 else 'tries'}"
    if isinstance(err, TransportError):
        if err.nack:
            return NoReplyError(f"{what}: address not acknowledged ({err}) after {counted}")
        return TransportError(f"{what}: {err} (gave up after {counted})", errno=err.errno)
    return type(err)(f"{what}: {err} (gave up after {counted})")


# --- Linux i2c-dev ----------------------------------------------------------------------

# <linux/i2c-dev.h> and <linux/i2c.h>
I2C_SLAVE: Final = 0x0703
I2C_SLAVE_FORCE: Final = 0x0706
I2C_RDWR: Final = 0x0707
I2C_M_RD: Final = 0x0001
I2C_RDWR_IOCTL_MAX_MSGS: Final = 42


class I2cMsg(ctypes.Structure):
    """struct i2c_msg: __u16 addr, flags, len; __u8 *buf (16 bytes on LP64)."""

    _fields_ = [
        ("addr", ctypes.c_uint16),
        ("flags", ctypes.c_uint16),
        ("len", ctypes.c_uint16),
        ("buf", ctypes.POINTER(ctypes.c_uint8)),
    ]


class I2cRdwrIoctlData(ctypes.Structure):
    """struct i2c_rdwr_ioctl_data: struct i2c_msg *msgs; __u32 nmsgs."""

    _fields_ = [("msgs", ctypes.POINTER(I2cMsg)), ("nmsgs", ctypes.c_uint32)]


class LinuxI2c:
    """An I²C adapter through /dev/i2c-N.

    Plain writes and reads select the address with I2C_SLAVE and use write()/read(), as
    ddccontrol and monitorcontrol do; when a kernel driver such as ddcci owns the address
    (EBUSY) it falls back to I2C_SLAVE_FORCE, as ddcutil does. Combined transfers (EDID
    with the segment pointer) use I2C_RDWR.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as err:
            raise TransportError(f"cannot open {self.path}: {err.strerror}",
                                 errno=err.errno) from err
        self._selected: int | None = None

    @classmethod
    def bus(cls, number: int) -> LinuxI2c:
        return cls(f"/dev/i2c-{number}")

    def __enter__(self) -> LinuxI2c:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def write(self, address: int, data: bytes) -> None:
        _check_message(address, len(data))
        fd = self._select(address)
        try:
            written = os.write(fd, data)
        except OSError as err:
            raise self._error(f"write of {len(data)} bytes to 0x{address:02X}", err) from err
        if written != len(data):
            raise TransportError(f"{self.path}: short write to 0x{address:02X}: "
                                 f"{written} of {len(data)} bytes")

    def read(self, address: int, length: int) -> bytes:
        _check_message(address, length)
        fd = self._select(address)
        try:
            data = os.read(fd, length)
        except OSError as err:
            raise self._error(f"read of {length} bytes from 0x{address:02X}", err) from err
        if len(data) != length:
            raise TransportError(f"{self.path}: short read from 0x{address:02X}: "
                                 f"{len(data)} of {length} bytes")
        return data

    def transfer(self, messages: Sequence[I2cMessage]) -> list[bytes]:
        if not 1 <= len(messages) <= I2C_RDWR_IOCTL_MAX_MSGS:
            raise InvalidArgumentError(f"I2C_RDWR takes 1..42 messages, not {len(messages)}")
        fd = self._open_fd()
        structs = (I2cMsg * len(messages))()
        buffers: list[ctypes.Array[ctypes.c_uint8]] = []
        for struct, message in zip(structs, messages, strict=True):
            if isinstance(message, I2cWrite):
                buffer = (ctypes.c_uint8 * len(message.data)).from_buffer_copy(message.data)
                struct.flags, struct.len = 0, len(message.data)
            else:
                buffer = (ctypes.c_uint8 * message.length)()
                struct.flags, struct.len = I2C_M_RD, message.length
            struct.addr = message.address
            struct.buf = ctypes.cast(buffer, ctypes.POINTER(ctypes.c_uint8))
            buffers.append(buffer)
        request = I2cRdwrIoctlData(ctypes.cast(structs, ctypes.POINTER(I2cMsg)), len(messages))
        try:
            done = fcntl.ioctl(fd, I2C_RDWR, request)
        except OSError as err:
            raise self._error(f"I2C_RDWR of {len(messages)} messages", err) from err
        if done != len(messages):
            raise TransportError(f"{self.path}: I2C_RDWR did {done} of {len(messages)} messages")
        return [bytes(b) for b, m in zip(buffers, messages, strict=True) if isinstance(m, I2cRead)]

    def _open_fd(self) -> int:
        if self._fd < 0:
            raise TransportError(f"{self.path} is closed", errno=errno.EBADF)
        return self._fd

    def _select(self, address: int) -> int:
        fd = self._open_fd()
        if self._selected == address:
            return fd
        try:
            fcntl.ioctl(fd, I2C_SLAVE, address)
        except OSError as err:
            if err.errno != errno.EBUSY:
                raise self._error(f"I2C_SLAVE 0x{address:02X}", err) from err
            log.warning("%s: a kernel driver holds address 0x%02X; using I2C_SLAVE_FORCE",
                        self.path, address)
            try:
                fcntl.ioctl(fd, I2C_SLAVE_FORCE, address)
            except OSError as forced:
                raise self._error(f"I2C_SLAVE_FORCE 0x{address:02X}", forced) from forced
        self._selected = address
        return fd

    def _error(self, action: str, err: OSError) -> TransportError:
        return TransportError(f"{self.path}: {action}: {err.strerror}", errno=err.errno)
