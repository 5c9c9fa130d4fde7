from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import logging
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from libdisplay.hardware import mccs
from libdisplay.hardware.ddc import (
    I2C_RDWR,
    I2C_SLAVE,
    I2C_SLAVE_FORCE,
    MAX_CAPABILITIES,
    ChecksumError,
    DdcClient,
    DdcError,
    GarbledReplyError,
    I2cMessage,
    I2cMsg,
    I2cRdwrIoctlData,
    I2cRead,
    I2cWrite,
    InvalidArgumentError,
    LinuxI2c,
    NoReplyError,
    NullMessageError,
    ReplyTooLongError,
    Retries,
    Timing,
    TransportError,
    UnsupportedVcpError,
    VcpReading,
    capabilities_request,
    decode_reply,
    decode_vcp_reply,
    encode_request,
    get_vcp_request,
    save_settings_request,
    set_vcp_request,
    xor_checksum,
)
from libdisplay.sim.ddc import FakeClock, Faults, SimulatedMonitor


class Recorder:
    """A transport in front of another that notes when each write, read and transfer started."""

    def __init__(self, inner: SimulatedMonitor, clock: FakeClock) -> None:
        self.inner = inner
        self.clock = clock
        self.events: list[tuple[float, str, bytes]] = []
        self.transfers: list[list[I2cMessage]] = []

    def write(self, address: int, data: bytes) -> None:
        self.events.append((self.clock(), "write", data))
        self.inner.write(address, data)

    def read(self, address: int, length: int) -> bytes:
        self.events.append((self.clock(), "read", b""))
        return self.inner.read(address, length)

    def transfer(self, messages: Sequence[I2cMessage]) -> list[bytes]:
        self.transfers.append(list(messages))
        return self.inner.transfer(messages)

    def writes(self) -> list[bytes]:
        return [data for _, kind, data in self.events if kind == "write"]


class Rig:
    """A host talking to a simulated monitor on one fake clock."""

    def __init__(self, *, timing: Timing | None = None, retries: Retries | None = None,
                 **monitor: Any) -> None:
        self.clock = FakeClock()
        self.monitor = SimulatedMonitor(clock=self.clock, **monitor)
        self.bus = Recorder(self.monitor, self.clock)
        self.client = DdcClient(self.bus, timing=timing, retries=retries,
                                sleep=self.clock.sleep, clock=self.clock)

    @property
    def faults(self) -> Faults:
        return self.monitor.faults

    def elapsed_since(self, start: float) -> float:
        return self.clock() - start


def h(text: str) -> bytes:
    return bytes.fromhex(text)


def _indexed_caps_files() -> list[str]:
    from conftest import testdata_dir

    index = json.loads((testdata_dir() / "ddc-caps" / "index.json").read_text())
    return [entry["file"] for entry in index["strings"]]


CAPS_FILES = _indexed_caps_files()


# --- Packets against the test vectors of docs/ddc.md §2 ------------------------------


@pytest.mark.parametrize(
    ("data", "seed", "checksum"),
    [("6E 51 82 F5 01", 0, 0x49), ("6E 51 81 B1", 0, 0x0F), ("6E 82 A1 00", 0x50, 0x1D),
     ("6E 80", 0x50, 0xBE)],
    ids=["spec-6.2-request", "spec-6.3-request", "spec-reply-seed-50", "null-message"],
)
def test_checksum_matches_the_spec_vectors(data: str, seed: int, checksum: int) -> None:
    assert xor_checksum(h(data), seed) == checksum


@pytest.mark.parametrize(
    ("packet", "wire"),
    [
        (get_vcp_request(0x10), "51 82 01 10 AC"),
        (get_vcp_request(0x60), "51 82 01 60 DC"),
        (set_vcp_request(0x10, 50), "51 84 03 10 00 32 9A"),
        (set_vcp_request(0xD6, 4), "51 84 03 D6 00 04 6A"),
        (save_settings_request(), "51 81 0C B2"),
        (capabilities_request(0), "51 83 F3 00 00 4F"),
        (capabilities_request(32), "51 83 F3 00 20 6F"),
    ],
    ids=["get-brightness", "get-input", "set-brightness-50", "power-off", "save", "caps-0",
         "caps-32"],
)
def test_requests_are_the_worked_bytes(packet: bytes, wire: str) -> None:
    assert packet == h(wire)


@pytest.mark.parametrize(
    ("operation", "wire"),
    [
        (lambda c: c.get_vcp(0x10), ["51 82 01 10 AC"]),
        (lambda c: c.set_vcp(0x10, 50), ["51 84 03 10 00 32 9A"]),
        (lambda c: c.set_vcp(0xD6, 4), ["51 84 03 D6 00 04 6A"]),
        (lambda c: c.save_settings(), ["51 81 0C B2"]),
        (lambda c: c.capabilities(), ["51 83 F3 00 00 4F", "51 83 F3 00 20 6F"]),
    ],
    ids=["get-brightness", "set-brightness-50", "power-off", "save", "capabilities"],
)
def test_operations_write_the_worked_bytes(operation: Callable[[DdcClient], object],
                                           wire: list[str]) -> None:
    rig = Rig(capabilities="(prot(monitor)type(lcd)model(X)cmds(01 02 03 0C E3 F3)vcp(10 D6))")
    operation(rig.client)
    assert rig.monitor.received[: len(wire)] == [h(w) for w in wire]
    assert not rig.monitor.rejected


def test_worked_replies_decode() -> None:
    assert decode_vcp_reply(decode_reply(h("6E 88 02 00 10 00 00 64 00 32 F2")), 0x10) == \
        VcpReading(code=0x10, current=50, maximum=100, vcp_type=0)
    assert decode_reply(h("6E 80 BE")) == b""
    assert decode_reply(h("6E 83 E3 00 E0 BE 00 00")) == h("E3 00 E0")
    with pytest.raises(UnsupportedVcpError, match="0xDD"):
        decode_vcp_reply(decode_reply(h("6E 88 02 01 DD 00 00 00 00 00 68")), 0xDD)


def test_a_doubled_source_byte_is_skipped() -> None:
    assert decode_reply(h("6E 6E 80 BE")) == b""


@pytest.mark.parametrize(
    ("raw", "error", "message"),
    [
        ("00 00 00 00", NoReplyError, "zero bytes"),
        ("FF FF FF FF", GarbledReplyError, "0xFF"),
        ("6E 80 BF", ChecksumError, "0xBF, expected 0xBE"),
        ("6E 88 02 00 10", GarbledReplyError, "overruns"),
        ("6E 80", GarbledReplyError, "shorter"),
    ],
    ids=["all-zero", "wrong-source", "bad-checksum", "length-overrun", "truncated"],
)
def test_bad_replies_raise_typed_errors(raw: str, error: type[DdcError], message: str) -> None:
    with pytest.raises(error, match=message):
        decode_reply(h(raw))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("E3 00 10 00 00 64 00 32", "opcode 0xE3"),
        ("02 00 10 00 00 64 00", "7 data bytes"),
        ("02 00 12 00 00 64 00 32", "code 0x12, asked for 0x10"),
        ("02 02 10 00 00 64 00 32", "result code 0x02"),
    ],
    ids=["opcode", "length", "other-code", "result-code"],
)
def test_vcp_replies_that_do_not_answer_are_garbled(data: str, message: str) -> None:
    with pytest.raises(GarbledReplyError, match=message):
        decode_vcp_reply(h(data), 0x10)


# --- Round trips with the simulated monitor -----------------------------------------------


def test_get_set_and_save_round_trip() -> None:
    rig = Rig(values={0x10: 50, 0x60: 0x0F})
    assert rig.client.get_vcp(0x10) == VcpReading(0x10, current=50, maximum=100, vcp_type=0)
    rig.client.set_vcp(0x10, 80)
    assert rig.client.get_vcp(0x10).current == 80
    rig.client.save_settings()
    assert rig.monitor.saved == {0x10: 80, 0x60: 0x0F}


@pytest.mark.parametrize("name", CAPS_FILES, ids=CAPS_FILES)
def test_real_capabilities_survive_the_wire(testdata: Path, name: str) -> None:
    text = (testdata / "ddc-caps" / name).read_text(encoding="latin-1")
    rig = Rig(capabilities=text)
    got = rig.client.capabilities()
    assert got == text
    assert mccs.parse_capabilities(got) == mccs.parse_capabilities(text)
    fragments = [w for w in rig.monitor.received if w[2] == 0xF3]
    assert len(fragments) == len(text) // 32 + 1 + (len(text) % 32 > 0)


@pytest.mark.parametrize("size", [43, 58], ids=["173P-43", "largest-that-fits-64"])
def test_fragments_longer_than_32_bytes_are_taken(testdata: Path, size: int) -> None:
    text = (testdata / "ddc-caps" / "Lenovo_Legion_27U-10.txt").read_text()
    rig = Rig(capabilities=text, fragment_size=size)
    assert rig.client.capabilities() == text


def test_trailing_blanks_and_nuls_are_trimmed() -> None:
    rig = Rig(capabilities=b"(vcp(10))  \0\0")
    assert rig.client.capabilities() == "(vcp(10))"


# --- Faults: the right error, in bounded time ---------------------------------------------


def _get(rig: Rig) -> object:
    return rig.client.get_vcp(0x10)


def _set(rig: Rig) -> object:
    rig.client.set_vcp(0x10, 20)
    return None


def _caps(rig: Rig) -> object:
    return rig.client.capabilities()


def _unknown(rig: Rig) -> object:
    return rig.client.get_vcp(0xDD)


@pytest.mark.parametrize(
    ("faults", "operation", "error", "writes"),
    [
        (Faults(null_replies=99), _get, NullMessageError, 4),
        (Faults(unsupported_reply="rc"), _unknown, UnsupportedVcpError, 1),
        (Faults(unsupported_reply="null"), _unknown, NullMessageError, 4),
        (Faults(reply_delay=1.0), _get, NullMessageError, 4),
        (Faults(busy_until=float("inf")), _caps, NullMessageError, 4),
        (Faults(garbage_replies=999), _get, GarbledReplyError, 10),
        (Faults(bad_checksum_replies=999), _get, ChecksumError, 10),
        (Faults(silent="nack"), _get, NoReplyError, 1),
        (Faults(silent="nack"), _set, NoReplyError, 1),
        (Faults(silent="zeros"), _get, NoReplyError, 10),
        (Faults(bus_errno=errno.EIO), _get, TransportError, 1),
        (Faults(bus_errno=errno.EAGAIN), _get, TransportError, 10),
        (Faults(bus_errno=errno.EAGAIN), _set, TransportError, 4),
        (Faults(bus_errno=errno.EREMOTEIO), _get, NoReplyError, 10),
        (Faults(wrong_offset_replies=999), _caps, GarbledReplyError, 8),
        (Faults(garbage_replies=10**6), _caps, GarbledReplyError, 8 * 10),
        (Faults(endless_capabilities=True), _caps, ReplyTooLongError, 4096 // 32 + 1),
    ],
    ids=["null-forever", "unsupported-rc", "unsupported-null", "slow-forever", "busy-caps",
         "garbage", "bad-checksum", "silent-nack-get", "silent-nack-set", "silent-zeros",
         "bus-eio", "bus-eagain-get", "bus-eagain-set", "nack-eremoteio", "wrong-offset",
         "garbage-caps", "endless-caps"],
)
def test_each_fault_gives_its_error_within_bounded_time(
    faults: Faults, operation: Callable[[Rig], object], error: type[DdcError], writes: int
) -> None:
    rig = Rig(capabilities="(prot(monitor)vcp(10 12)mccs_ver(2.1))", values={0x10: 5})
    rig.monitor.faults = faults
    start = rig.clock()
    with pytest.raises(error) as caught:
        operation(rig)
    assert type(caught.value) is error
    assert len(rig.bus.writes()) == writes
    assert rig.elapsed_since(start) <= Timing().capabilities_budget + 1.0


def test_slow_babbling_is_stopped_by_the_time_budget() -> None:
    rig = Rig(capabilities="(vcp(10))", fragment_size=1)
    rig.faults.endless_capabilities = True
    start = rig.clock()
    with pytest.raises(NoReplyError, match="not complete within 30.0 s"):
        rig.client.capabilities()
    assert len(rig.bus.writes()) < MAX_CAPABILITIES
    assert rig.elapsed_since(start) <= Timing().capabilities_budget + 0.2


def test_budget_stops_retries_before_the_counts_do() -> None:
    rig = Rig(timing=Timing(command_budget=0.24), values={0x10: 5})
    rig.faults.garbage_replies = 999
    with pytest.raises(GarbledReplyError, match="gave up after 3 tries"):
        rig.client.get_vcp(0x10)


def test_null_messages_are_retried_with_growing_pauses() -> None:
    rig = Rig(values={0x10: 42})
    rig.faults.null_replies = 3
    assert rig.client.get_vcp(0x10).current == 42
    starts = [t for t, kind, _ in rig.bus.events if kind == "write"]
    gaps = [round(b - a, 6) for a, b in pairwise(starts)]
    # write->read 50 ms, post-read 50 ms, then the extra 25 / 100 / 200 ms of ddcutil.
    assert gaps == [0.125, 0.2, 0.3]


def test_a_busy_display_is_waited_for() -> None:
    rig = Rig(values={0x10: 42})
    rig.faults.busy_until = rig.clock() + 0.3
    assert rig.client.get_vcp(0x10).current == 42
    assert len(rig.bus.writes()) == 3


@pytest.mark.parametrize(
    ("multiplier", "answers"), [(1.0, True), (0.5, False), (2.0, True)],
    ids=["default-50ms", "halved-25ms", "doubled-100ms"],
)
def test_a_slow_display_needs_the_write_to_read_delay(multiplier: float, answers: bool) -> None:
    rig = Rig(timing=Timing(multiplier=multiplier), values={0x10: 42})
    rig.faults.reply_delay = 0.045
    if answers:
        assert rig.client.get_vcp(0x10).current == 42
    else:
        with pytest.raises(NullMessageError, match="4 times"):
            rig.client.get_vcp(0x10)


def test_a_null_message_mid_capabilities_retries_that_fragment(testdata: Path) -> None:
    text = (testdata / "ddc-caps" / "Dell_U2415.txt").read_text()
    rig = Rig(capabilities=text)
    inner_write = rig.monitor.write

    def write(address: int, data: bytes) -> None:
        if data == capabilities_request(64) and not rig.monitor.received.count(data):
            rig.faults.null_replies = 2
        inner_write(address, data)

    rig.monitor.write = write  # type: ignore[method-assign]
    assert rig.client.capabilities() == text
    requests = rig.monitor.received
    assert requests.count(capabilities_request(0)) == 1
    assert requests.count(capabilities_request(64)) == 3


def test_a_wrong_fragment_offset_restarts_from_zero(testdata: Path) -> None:
    text = (testdata / "ddc-caps" / "Dell_U2415.txt").read_text()
    rig = Rig(capabilities=text)
    rig.faults.wrong_offset_replies = 1
    assert rig.client.capabilities() == text
    assert rig.monitor.received.count(capabilities_request(0)) == 2


# --- Delays -------------------------------------------------------------------------------


@pytest.mark.parametrize("multiplier", [1.0, 2.0], ids=["x1", "x2"])
def test_delays_between_commands_follow_the_spec(multiplier: float) -> None:
    rig = Rig(timing=Timing(multiplier=multiplier),
              capabilities="(prot(monitor)vcp(10 12 60)mccs_ver(2.1))")
    rig.client.get_vcp(0x10)
    rig.client.set_vcp(0x10, 30)
    rig.client.save_settings()
    rig.client.get_vcp(0x12)
    rig.client.capabilities()
    events = rig.bus.events
    gaps = [(a[1], b[1], round((b[0] - a[0]) / multiplier, 6))
            for a, b in pairwise(events)]
    assert gaps[:6] == [
        ("write", "read", 0.05),  # get: write -> read
        ("read", "write", 0.05),  # post-read, then set
        ("write", "write", 0.05),  # post-write, then save
        ("write", "write", 0.2),  # post-save, then get
        ("write", "read", 0.05),
        ("read", "write", 0.25),  # post-read, then 200 ms before capabilities
    ]
    fragment_gaps = {gap for gap in gaps[6:] if gap[0] == "read"}
    assert fragment_gaps == {("read", "write", 0.05)}


# --- Arguments and settings ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Timing(write_to_read=-0.01), "Timing.write_to_read"),
        (lambda: Timing(null_backoff=(0.1, -1.0)), "Timing.null_backoff"),
        (lambda: Timing(null_backoff=()), "null_backoff is empty"),
        (lambda: Timing(multiplier=0), "Timing.multiplier 0"),
        (lambda: Retries(write_read=0), "Retries.write_read 0"),
        (lambda: Retries(multi_part=16), "Retries.multi_part 16 is outside 1..15"),
        (lambda: Retries(null_replies=-1), "Retries.null_replies -1"),
        (lambda: get_vcp_request(256), "VCP code 256"),
        (lambda: set_vcp_request(0x10, 65536), "VCP value 65536"),
        (lambda: set_vcp_request(-1, 0), "VCP code -1"),
        (lambda: capabilities_request(70000), "offset 70000"),
        (lambda: encode_request(bytes(33)), "33 bytes"),
        (lambda: I2cRead(0x80, 1), "0x80"),
        (lambda: I2cWrite(0x37, bytes(70000)), "length 70000"),
    ],
    ids=["negative-delay", "negative-backoff", "empty-backoff", "zero-multiplier",
         "zero-tries", "too-many-tries", "negative-nulls", "code-256", "value-65536",
         "code-negative", "caps-offset", "request-too-long", "address-8-bit",
         "message-too-long"],
)
def test_bad_arguments_name_the_field(make: Callable[[], object], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        make()


# --- EDID ---------------------------------------------------------------------------------

EDIDS = ["ACI-ASUS_VS247-5f1f2af6.bin", "AGC-AVR5-d3a5a789.bin", "ARZ-ARZOPA-315-a2d5f2eb.bin",
         "SAM-C49RG9x-f808e376.bin"]


@pytest.mark.parametrize("name", EDIDS, ids=["1-block", "2-blocks", "3-blocks", "4-blocks"])
def test_edid_is_read_whole(testdata: Path, name: str) -> None:
    edid = (testdata / "edid" / name).read_bytes()
    rig = Rig(edid=edid)
    assert rig.client.read_edid() == edid
    blocks = len(edid) // 128
    assert len(rig.bus.transfers) == blocks
    for number, messages in enumerate(rig.bus.transfers):
        segment = [I2cWrite(0x30, bytes([number // 2]))] if number >= 2 else []
        assert messages == [*segment, I2cWrite(0x50, bytes([number % 2 * 128])),
                            I2cRead(0x50, 128)]


def test_edid_of_256_blocks_is_bounded(testdata: Path) -> None:
    edid = (testdata / "edid" / "edidtest-256-blocks-60f09a7a.bin").read_bytes()
    rig = Rig(edid=edid)
    assert rig.client.read_edid() == edid


def _edid_claiming_an_extension(testdata: Path) -> bytes:
    base = bytearray((testdata / "edid" / EDIDS[0]).read_bytes())
    base[126] = 1
    return _with_checksum(bytes(base[:127]))


def test_an_eeprom_that_wraps_yields_the_base_block(testdata: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    base = _edid_claiming_an_extension(testdata)
    rig = Rig(edid=base)
    with caplog.at_level(logging.WARNING, logger="libdisplay.hardware.ddc"):
        assert rig.client.read_edid() == base
    assert "repeats the base block" in caplog.text


def test_a_corrupt_edid_read_is_retried(testdata: Path) -> None:
    edid = (testdata / "edid" / EDIDS[1]).read_bytes()
    rig = Rig(edid=edid)
    inner = rig.monitor.transfer
    corrupt = iter([True, True])

    def transfer(messages: Sequence[I2cMessage]) -> list[bytes]:
        results = inner(messages)
        if next(corrupt, False):
            results[-1] = bytes([results[-1][0] ^ 1]) + results[-1][1:]
        return results

    rig.monitor.transfer = transfer  # type: ignore[method-assign]
    assert rig.client.read_edid() == edid
    assert len(rig.bus.transfers) == 4


def _with_checksum(body: bytes) -> bytes:
    return body + bytes([(-sum(body)) % 256])


HEADER = bytes.fromhex("00FFFFFFFFFFFF00")


@pytest.mark.parametrize(
    ("edid", "error", "tries"),
    [
        (b"", NoReplyError, 1),
        (_with_checksum(bytes(range(127))), GarbledReplyError, 1),
        (HEADER + bytes(119) + b"\x01", ChecksumError, 5),
    ],
    ids=["no-eeprom", "no-header", "bad-checksum"],
)
def test_bad_edid_gives_typed_errors(edid: bytes, error: type[DdcError], tries: int) -> None:
    rig = Rig(edid=edid)
    with pytest.raises(error):
        rig.client.read_edid()
    assert len(rig.bus.transfers) == tries


# --- LinuxI2c over a faked i2c-dev ---------------------------------------------------------

FAKE_FD = 987_654
DEVICE = "/dev/i2c-7"


class FakeI2cDev:
    """What the kernel's i2c-dev does with our syscalls, in front of a simulated monitor.

    The I2C_RDWR argument is decoded from raw memory with `struct`'s native layout, which
    is the C layout, so a wrongly packed ctypes structure shows up here.
    """

    def __init__(self, monitor: SimulatedMonitor, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monitor = monitor
        self.selected: int | None = None
        self.ioctls: list[tuple[int, int]] = []
        self.layouts: list[list[tuple[int, int, int]]] = []
        self.busy: set[int] = set()
        self.short_reads = False
        self.opened: list[tuple[str, int]] = []
        real_open, real_read, real_write = os.open, os.read, os.write
        real_close, real_ioctl = os.close, fcntl.ioctl

        def fake_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            if os.fspath(path) == DEVICE:
                self.opened.append((DEVICE, flags))
                return FAKE_FD
            return real_open(path, flags, *args, **kwargs)

        def fake_read(fd: int, length: int) -> bytes:
            if fd != FAKE_FD:
                return real_read(fd, length)
            data: bytes = self.call(lambda: self.monitor.read(self.address(), length))
            return data[: length // 2] if self.short_reads else data

        def fake_write(fd: int, data: bytes) -> int:
            if fd != FAKE_FD:
                return real_write(fd, data)
            self.call(lambda: self.monitor.write(self.address(), bytes(data)))
            return len(data)

        def fake_close(fd: int) -> None:
            if fd != FAKE_FD:
                real_close(fd)

        def fake_ioctl(fd: int, request: int, arg: Any = 0, *rest: Any) -> Any:
            if fd != FAKE_FD:
                return real_ioctl(fd, request, arg, *rest)
            if request == I2C_RDWR:
                return self.rdwr(arg)
            self.ioctls.append((request, arg))
            if request == I2C_SLAVE and arg in self.busy:
                raise OSError(errno.EBUSY, os.strerror(errno.EBUSY))
            self.selected = arg
            return 0

        monkeypatch.setattr(os, "open", fake_open)
        monkeypatch.setattr(os, "read", fake_read)
        monkeypatch.setattr(os, "write", fake_write)
        monkeypatch.setattr(os, "close", fake_close)
        monkeypatch.setattr(fcntl, "ioctl", fake_ioctl)

    def address(self) -> int:
        assert self.selected is not None, "read/write before I2C_SLAVE"
        return self.selected

    def call(self, action: Callable[[], Any]) -> Any:
        try:
            return action()
        except TransportError as err:
            raise OSError(err.errno, os.strerror(err.errno or errno.EIO)) from err

    def rdwr(self, arg: Any) -> int:
        raw = bytes(arg)
        assert len(raw) == 16, "struct i2c_rdwr_ioctl_data is 16 bytes on LP64"
        msgs, count = struct.unpack_from("@PI", raw)
        decoded: list[tuple[int, int, int, int]] = []
        for index in range(count):
            decoded.append(struct.unpack("@HHHP", ctypes.string_at(msgs + 16 * index, 16)))
        self.layouts.append([(addr, flags, length) for addr, flags, length, _ in decoded])
        messages: list[I2cMessage] = [
            I2cRead(addr, length) if flags & 1 else I2cWrite(addr, ctypes.string_at(buf, length))
            for addr, flags, length, buf in decoded
        ]
        results = iter(self.call(lambda: self.monitor.transfer(messages)))
        for _, flags, length, buf in decoded:
            if flags & 1:
                data = next(results)
                assert len(data) == length
                ctypes.memmove(buf, data, length)
        return int(count)


def test_i2c_structs_have_the_kernel_layout() -> None:
    # Offsets and sizes as gcc lays out <linux/i2c.h> and <linux/i2c-dev.h> on x86-64.
    assert ctypes.sizeof(I2cMsg) == struct.calcsize("@HHHP") == 16
    msg = [I2cMsg.addr, I2cMsg.flags, I2cMsg.len, I2cMsg.buf]
    assert [(f.offset, f.size) for f in msg] == [(0, 2), (2, 2), (4, 2), (8, 8)]
    assert ctypes.sizeof(I2cRdwrIoctlData) == 16
    rdwr = [I2cRdwrIoctlData.msgs, I2cRdwrIoctlData.nmsgs]
    assert [(f.offset, f.size) for f in rdwr] == [(0, 8), (8, 4)]


@pytest.fixture
def linux_rig(testdata: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[
        tuple[DdcClient, FakeI2cDev, LinuxI2c, SimulatedMonitor]]:
    clock = FakeClock()
    monitor = SimulatedMonitor(
        capabilities=(testdata / "ddc-caps" / "Dell_U2415.txt").read_text(),
        edid=(testdata / "edid" / EDIDS[2]).read_bytes(),
        values={0x10: 30},
        clock=clock,
    )
    kernel = FakeI2cDev(monitor, monkeypatch)
    bus = LinuxI2c.bus(7)
    try:
        yield DdcClient(bus, sleep=clock.sleep, clock=clock), kernel, bus, monitor
    finally:
        bus.close()


def test_linux_i2c_round_trips_every_operation(
    linux_rig: tuple[DdcClient, FakeI2cDev, LinuxI2c, SimulatedMonitor], testdata: Path
) -> None:
    client, kernel, _, monitor = linux_rig
    assert kernel.opened == [(DEVICE, os.O_RDWR | os.O_CLOEXEC)]
    assert client.get_vcp(0x10).current == 30
    client.set_vcp(0x10, 60)
    client.save_settings()
    assert monitor.value(0x10) == 60
    assert monitor.saved[0x10] == 60
    assert client.capabilities() == (testdata / "ddc-caps" / "Dell_U2415.txt").read_text()
    assert client.read_edid() == monitor.edid
    assert kernel.ioctls == [(I2C_SLAVE, 0x37)], "the address is selected once"
    assert kernel.layouts[2] == [(0x30, 0, 1), (0x50, 0, 1), (0x50, 1, 128)]


def test_linux_i2c_forces_an_address_a_driver_holds(
    linux_rig: tuple[DdcClient, FakeI2cDev, LinuxI2c, SimulatedMonitor],
    caplog: pytest.LogCaptureFixture,
) -> None:
    client, kernel, _, _ = linux_rig
    kernel.busy.add(0x37)
    with caplog.at_level(logging.WARNING, logger="libdisplay.hardware.ddc"):
        assert client.get_vcp(0x10).current == 30
    assert kernel.ioctls == [(I2C_SLAVE, 0x37), (I2C_SLAVE_FORCE, 0x37)]
    assert "I2C_SLAVE_FORCE" in caplog.text


def test_linux_i2c_reports_os_errors_as_transport_errors(
    linux_rig: tuple[DdcClient, FakeI2cDev, LinuxI2c, SimulatedMonitor],
) -> None:
    client, kernel, bus, monitor = linux_rig
    monitor.faults.silent = "nack"
    with pytest.raises(NoReplyError, match="not acknowledged"):
        client.get_vcp(0x10)
    monitor.faults.silent = None
    kernel.short_reads = True
    with pytest.raises(TransportError, match="short read"):
        bus.read(0x37, 40)
    monitor.faults.bus_errno = errno.EIO
    with pytest.raises(TransportError, match="I2C_RDWR") as caught:
        bus.transfer([I2cRead(0x50, 128)])
    assert caught.value.errno == errno.EIO
    bus.close()
    with pytest.raises(TransportError, match="closed"):
        bus.write(0x37, b"\x00")


def test_linux_i2c_names_a_device_it_cannot_open(tmp_path: Path) -> None:
    with pytest.raises(TransportError, match="i2c-99") as caught:
        LinuxI2c(tmp_path / "i2c-99")
    assert caught.value.errno == errno.ENOENT


def test_linux_i2c_refuses_empty_and_oversized_transfers(
    linux_rig: tuple[DdcClient, FakeI2cDev, LinuxI2c, SimulatedMonitor],
) -> None:
    _, _, bus, _ = linux_rig
    with pytest.raises(InvalidArgumentError, match="not 0"):
        bus.transfer([])
    with pytest.raises(InvalidArgumentError, match="not 43"):
        bus.transfer([I2cRead(0x50, 1)] * 43)
