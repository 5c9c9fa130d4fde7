"""ddc_socket: DDC/CI over the socket bus, its wire format, bad frames both ways, a dead server."""

from __future__ import annotations

import errno
import socket
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from libdisplay.hardware.ddc import (
    EDID_HEADER,
    ChecksumError,
    DdcClient,
    DdcError,
    GarbledReplyError,
    I2cMessage,
    I2cRead,
    I2cWrite,
    InvalidArgumentError,
    NoReplyError,
    NullMessageError,
    TransportError,
    UnsupportedVcpError,
)
from libdisplay.hardware.ddc_socket import (
    HEADER,
    MAGIC,
    MAX_BODY,
    FrameError,
    MonitorServer,
    SocketBusError,
    SocketI2c,
    body_length,
    frame,
    parse_reply,
    parse_request,
    request_body,
)
from libdisplay.sim.ddc import FakeClock, Faults, SimulatedMonitor

CAPS = "Dell_U2415.txt"
EDID = "ARZ-ARZOPA-315-a2d5f2eb.bin"  # three blocks: the third needs the segment pointer


@dataclass(frozen=True, slots=True)
class Rig:
    monitor: SimulatedMonitor
    server: MonitorServer
    bus: SocketI2c
    client: DdcClient
    path: Path


@pytest.fixture
def rig(tmp_path: Path, testdata: Path) -> Iterator[Rig]:
    clock = FakeClock()
    monitor = SimulatedMonitor(
        capabilities=(testdata / "ddc-caps" / CAPS).read_text(),
        edid=(testdata / "edid" / EDID).read_bytes(),
        values={0x10: 30, 0x12: 75},
        clock=clock,
    )
    path = tmp_path / "i2c-5"
    with MonitorServer(path, monitor) as server, SocketI2c(path) as bus:
        yield Rig(monitor, server, bus, DdcClient(bus, sleep=clock.sleep, clock=clock), path)


def _raw(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10.0)
    sock.connect(str(path))
    return sock


def _receive_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = bytearray()
    while chunk := sock.recv(4096):
        data += chunk
    return bytes(data)


# --- DDC/CI through the socket ----------------------------------------------------------


def test_ddc_client_round_trips_every_operation(rig: Rig, testdata: Path) -> None:
    assert rig.client.capabilities() == (testdata / "ddc-caps" / CAPS).read_text().strip()
    assert rig.client.get_vcp(0x10).current == 30
    rig.client.set_vcp(0x10, 70)
    rig.client.save_settings()
    assert rig.client.get_vcp(0x10).current == 70
    assert rig.monitor.value(0x10) == 70 and rig.monitor.saved[0x10] == 70
    assert rig.client.read_edid() == (testdata / "edid" / EDID).read_bytes()


def _set(**values: object) -> Callable[[Faults], None]:
    def apply(faults: Faults) -> None:
        for name, value in values.items():
            setattr(faults, name, value)
    return apply


@pytest.mark.parametrize(
    ("fault", "code", "error", "errno_"),
    [
        (_set(silent="nack"), 0x10, NoReplyError, None),
        (_set(bus_errno=errno.EBUSY), 0x10, TransportError, errno.EBUSY),
        (_set(null_replies=100), 0x10, NullMessageError, None),
        (_set(garbage_replies=100), 0x10, GarbledReplyError, None),
        (_set(bad_checksum_replies=100), 0x10, ChecksumError, None),
        (_set(), 0xDD, UnsupportedVcpError, None),
    ],
    ids=["nack", "bus-errno", "null-messages", "garbage", "bad-checksum", "unsupported-code"],
)
def test_injected_faults_reach_the_client(rig: Rig, fault: Callable[[Faults], None], code: int,
                                          error: type[DdcError], errno_: int | None) -> None:
    fault(rig.monitor.faults)
    with pytest.raises(error) as caught:
        rig.client.get_vcp(code)
    if errno_ is not None:
        assert isinstance(caught.value, TransportError) and caught.value.errno == errno_


def test_an_address_nobody_answers_is_enxio(rig: Rig) -> None:
    with pytest.raises(SocketBusError, match="i2c-5: simulated NACK at 0x42") as caught:
        rig.bus.read(0x42, 1)
    assert caught.value.errno == errno.ENXIO and caught.value.nack
    assert rig.client.get_vcp(0x10).current == 30, "a bus error keeps the connection"


@pytest.mark.parametrize(
    ("messages", "address"),
    [
        ([I2cWrite(0x37, b"\x51\x82\x01\x10\xac")], 0x37),
        ([I2cWrite(0x50, b"\x00"), I2cRead(0x50, 8)], 0x50),
        ([I2cWrite(0x30, b"\x01"), I2cWrite(0x50, b"\x00"), I2cRead(0x50, 8)], 0x30),
    ],
    ids=["ddc-ci", "edid", "segment-pointer"],
)
def test_an_unplugged_monitor_nacks_every_address_until_plugged_back(
    tmp_path: Path, messages: list[I2cMessage], address: int
) -> None:
    plugged = [False]
    monitor = SimulatedMonitor(edid=EDID_HEADER + bytes(376))
    path = tmp_path / "i2c-6"
    with MonitorServer(path, monitor, present=lambda: plugged[0]), SocketI2c(path) as bus:
        with pytest.raises(SocketBusError, match=f"0x{address:02X}: the monitor is unplugged"
                           ) as caught:
            bus.transfer(messages)
        assert caught.value.errno == errno.ENXIO and caught.value.nack
        assert monitor.received == [], "nothing reached the monitor"
        plugged[0] = True
        assert bus.transfer([I2cWrite(0x50, b"\x00"), I2cRead(0x50, 8)]) == [EDID_HEADER]


def test_ddc_ci_to_an_unplugged_monitor_gets_no_reply(rig: Rig) -> None:
    rig.server.present = lambda: False
    with pytest.raises(NoReplyError):
        rig.client.get_vcp(0x10)


def test_two_connections_are_served_side_by_side(rig: Rig) -> None:
    with SocketI2c(rig.path) as other:
        assert other.transfer([I2cWrite(0x50, b"\x00"), I2cRead(0x50, 8)]) == [EDID_HEADER]
        assert rig.client.get_vcp(0x12).current == 75


# --- Bad frames -------------------------------------------------------------------------


def _header(length: int, magic: bytes = MAGIC) -> bytes:
    return HEADER.pack(magic, length)


@pytest.mark.parametrize(
    ("sent", "reason"),
    [
        (b"GET / HTTP/1.0\r\n\r\n", "not the magic"),
        (_header(MAX_BODY + 1), "over the bound"),
        (frame(b""), "request body is empty"),
        (frame(b"\x00"), "message count 0"),
        (frame(b"\x01\x07\x37\x00\x01"), "kind 7"),
        (frame(b"\x01\x01\x80\x00\x01"), "address 0x80"),
        (frame(b"\x01\x01\x37\x20\x01"), "length 8193"),
        (frame(b"\x02\x01\x37\x00\x01"), "message 1 is cut off"),
        (frame(b"\x01\x00\x37\x00\x05\x01"), "5 data bytes announced, 1 sent"),
        (frame(b"\x01\x01\x37\x00\x01\xff"), "1 bytes after its messages"),
    ],
    ids=["http", "oversized", "empty", "no-messages", "bad-kind", "bad-address", "too-long",
         "cut-off", "short-write", "trailing"],
)
def test_a_bad_frame_is_refused_and_the_server_serves_on(rig: Rig, sent: bytes,
                                                         reason: str) -> None:
    with _raw(rig.path) as sock:
        sock.sendall(sent)
        reply = _receive_all(sock)
    assert body_length(reply[: HEADER.size]) == len(reply) - HEADER.size
    with pytest.raises(FrameError, match=f"refused the request: .*{reason}") as caught:
        parse_reply(reply[HEADER.size :], [])
    assert caught.value.errno == errno.EPROTO
    assert rig.client.get_vcp(0x10).current == 30


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (b"HTTP/1.0 200 OK\r\n", "not the magic"),
        (_header(MAX_BODY + 1), "over the bound"),
        (frame(b"\x09"), "status 9"),
        (frame(b"\x01\x05"), "has no errno"),
        (frame(b"\x00\x00\x02ab"), "2 bytes announced and 2 sent; 3 were asked for"),
        (frame(b"\x00\x00\x03abcd"), "1 bytes after its reads"),
        (frame(b"\x00"), "cut off before read 0"),
    ],
    ids=["http", "oversized", "bad-status", "no-errno", "wrong-length", "trailing", "cut-off"],
)
def test_a_bad_reply_is_a_frame_error(tmp_path: Path, answer: bytes, reason: str) -> None:
    path = tmp_path / "i2c-1"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen()
        with SocketI2c(path) as bus:
            accepted, _ = listener.accept()
            with accepted:
                accepted.sendall(answer)  # the reply is there before the request is sent
                with pytest.raises(FrameError, match=reason) as caught:
                    bus.read(0x37, 3)
    assert caught.value.errno == errno.EPROTO


# --- The server's life ------------------------------------------------------------------


def test_a_stopped_server_fails_transfers_and_a_restarted_one_serves_again(rig: Rig) -> None:
    rig.server.stop()
    assert not rig.path.exists(), "stop removes the socket"
    with pytest.raises(TransportError) as caught:
        rig.client.get_vcp(0x10)
    assert caught.value.errno == errno.EIO
    with pytest.raises(SocketBusError, match="cannot open .*i2c-5") as opening:
        SocketI2c(rig.path)
    assert opening.value.errno == errno.ENOENT
    with MonitorServer(rig.path, rig.monitor):
        assert rig.client.get_vcp(0x10).current == 30, "the same bus connects again"


def test_a_dead_server_whose_socket_is_left_refuses_connections(tmp_path: Path) -> None:
    path = tmp_path / "i2c-2"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as left:
        left.bind(str(path))
    with pytest.raises(SocketBusError) as caught:
        SocketI2c(path)
    assert caught.value.errno == errno.ECONNREFUSED


def test_a_server_that_does_not_answer_times_out(tmp_path: Path) -> None:
    path = tmp_path / "i2c-3"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen()
        with SocketI2c(path, timeout=0.2) as bus, pytest.raises(SocketBusError) as caught:
            bus.write(0x37, b"\x51\x80\xbe")
    assert caught.value.errno == errno.ETIMEDOUT


def test_serving_where_a_file_is_fails_with_the_errno(tmp_path: Path) -> None:
    path = tmp_path / "i2c-4"
    path.touch()
    server = MonitorServer(path, SimulatedMonitor())
    with pytest.raises(SocketBusError, match="cannot serve i2c at .*i2c-4") as caught:
        server.start()
    server.stop()
    assert caught.value.errno == errno.EADDRINUSE
    assert path.is_file(), "a path the server did not bind is left alone"


@pytest.mark.parametrize(
    ("messages", "error", "match"),
    [
        ([], InvalidArgumentError, "not 0"),
        ([I2cRead(0x50, 1)] * 43, InvalidArgumentError, "not 43"),
        ([I2cRead(0x50, 8193)], SocketBusError, "over i2c-dev's 8192"),
    ],
    ids=["none", "too-many", "too-long"],
)
def test_transfers_i2c_dev_would_refuse_are_refused(rig: Rig, messages: list[I2cMessage],
                                                    error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        rig.bus.transfer(messages)
    assert rig.monitor.received == []


# --- The wire format --------------------------------------------------------------------

_messages = st.lists(
    st.one_of(
        st.builds(I2cWrite, st.integers(0, 0x7F), st.binary(max_size=64)),
        st.builds(I2cRead, st.integers(0, 0x7F), st.integers(0, 8192)),
    ),
    min_size=1, max_size=42,
)


@given(_messages)
def test_a_request_body_parses_back_to_its_messages(messages: list[I2cMessage]) -> None:
    assert parse_request(request_body(messages)) == messages


def test_the_header_is_magic_and_length() -> None:
    assert frame(b"\x01\x01\x37\x00\x03") == b"I2C\x01" + struct.pack(">I", 5) + \
        b"\x01\x01\x37\x00\x03"
