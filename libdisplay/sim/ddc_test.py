from __future__ import annotations

import errno
from pathlib import Path

import pytest

from libdisplay.hardware.ddc import (
    InvalidArgumentError,
    TransportError,
    capabilities_request,
    encode_reply,
    get_vcp_request,
    save_settings_request,
    set_vcp_request,
)
from libdisplay.sim.ddc import DEFAULT_FEATURES, FakeClock, Feature, SimulatedMonitor

NULL = bytes.fromhex("6E 80 BE")


def h(text: str) -> bytes:
    return bytes.fromhex(text)


def ask(monitor: SimulatedMonitor, request: bytes, length: int = 11) -> bytes:
    monitor.write(0x37, request)
    return monitor.read(0x37, length)


def test_get_vcp_reply_is_the_worked_packet() -> None:
    monitor = SimulatedMonitor(values={0x10: 50})
    assert ask(monitor, h("51 82 01 10 AC")) == h("6E 88 02 00 10 00 00 64 00 32 F2")


def test_a_read_clocks_out_exactly_the_bytes_asked_for() -> None:
    monitor = SimulatedMonitor(values={0x10: 50})
    assert ask(monitor, get_vcp_request(0x10), 16) == h("6E 88 02 00 10 00 00 64 00 32 F2") + \
        bytes(5)
    assert ask(monitor, get_vcp_request(0x10), 4) == h("6E 88 02 00")


@pytest.mark.parametrize(
    ("style", "reply"),
    [("rc", "6E 88 02 01 DD 00 00 00 00 00 68"), ("null", "6E 80 BE"),
     ("zeros", encode_reply(h("02 00 DD 00 00 00 00 00")).hex())],
    ids=["result-code", "null-message", "all-zero-values"],
)
def test_unsupported_codes_are_answered_in_the_display_style(style: str, reply: str) -> None:
    monitor = SimulatedMonitor()
    monitor.faults.unsupported_reply = style  # type: ignore[assignment]
    assert ask(monitor, get_vcp_request(0xDD))[: len(h(reply))] == h(reply)


@pytest.mark.parametrize(
    "wire",
    # Valid: 51 84 03 10 00 05 AD. Each variant keeps a checksum consistent with its bytes.
    ["51 84 03 10 00 05 AC", "51 04 03 10 00 05 2D", "51 85 03 10 00 05 AC",
     "50 84 03 10 00 05 AC", "51 80", ""],
    ids=["bad-checksum", "no-protocol-flag", "length-mismatch", "wrong-source", "too-short",
         "empty"],
)
def test_invalid_packets_are_ignored(wire: str) -> None:
    monitor = SimulatedMonitor(values={0x10: 50})
    monitor.write(0x37, get_vcp_request(0x10))
    monitor.write(0x37, h(wire))
    assert monitor.read(0x37, 3) == NULL, "an ignored packet also drops the pending reply"
    assert monitor.value(0x10) == 50
    assert monitor.rejected == [h(wire)]


@pytest.mark.parametrize(
    ("code", "value", "after"),
    [(0x10, 80, 80), (0x10, 101, 50), (0x60, 0x11, 0x11), (0x60, 0x13, 0x0F), (0xD6, 4, 4),
     (0xDD, 1, None)],
    ids=["in-range", "above-maximum", "allowed-input", "unlisted-input", "power-off",
         "unknown-code"],
)
def test_set_vcp_takes_only_values_the_feature_accepts(code: int, value: int,
                                                       after: int | None) -> None:
    monitor = SimulatedMonitor()
    monitor.write(0x37, set_vcp_request(code, value))
    assert monitor.read(0x37, 3) == NULL, "Set VCP has no reply"
    assert (monitor.value(code) if code in monitor.features else None) == after


def test_save_settings_records_the_values() -> None:
    monitor = SimulatedMonitor(values={0x10: 10, 0x12: 20})
    monitor.write(0x37, set_vcp_request(0x10, 70))
    monitor.write(0x37, save_settings_request())
    assert monitor.saved == {0x10: 70, 0x12: 20}


def test_capabilities_are_fragmented_32_bytes_at_a_time() -> None:
    text = bytes(range(0x41, 0x41 + 26)) * 8 + b"()"  # 210 bytes
    monitor = SimulatedMonitor(capabilities=text)
    assert ask(monitor, capabilities_request(0), 40) == \
        encode_reply(h("E3 00 00") + text[:32]) + bytes(2)
    assert ask(monitor, capabilities_request(192), 40)[:24] == \
        encode_reply(h("E3 00 C0") + text[192:])
    assert ask(monitor, capabilities_request(210), 6) == encode_reply(h("E3 00 D2"))


def test_the_final_fragment_is_the_worked_packet() -> None:
    monitor = SimulatedMonitor(capabilities=b"x" * 0xE0)
    assert ask(monitor, capabilities_request(0xE0), 6) == h("6E 83 E3 00 E0 BE")


def test_a_display_without_capabilities_answers_null() -> None:
    assert ask(SimulatedMonitor(), capabilities_request(0), 3) == NULL


def test_features_come_from_capabilities_and_values(testdata: Path) -> None:
    text = (testdata / "ddc-caps" / "Dell_U2415.txt").read_text()
    listed = SimulatedMonitor(capabilities=text, values={0x10: 75})
    assert listed.features[0x10] == Feature(75, 100)
    assert listed.features[0x60] == Feature(0x0F, 0x12, allowed=(0x0F, 0x10, 0x11, 0x12))
    assert listed.features[0xDF] == Feature(0x0201, 0), "VCP version from mccs_ver(2.1)"
    assert listed.features[0x12] == Feature(50, 100)
    assert 0xD6 in listed.features and 0x02 in listed.features
    bare = SimulatedMonitor()
    assert bare.features == dict(DEFAULT_FEATURES)
    assert bare.features[0x10] is not DEFAULT_FEATURES[0x10], "defaults are copied"


def test_a_read_without_a_request_and_a_second_read_get_null() -> None:
    monitor = SimulatedMonitor(values={0x10: 50})
    assert monitor.read(0x37, 3) == NULL
    ask(monitor, get_vcp_request(0x10))
    assert monitor.read(0x37, 3) == NULL


# --- EDID ---------------------------------------------------------------------------------


def test_edid_reads_follow_the_offset_pointer_and_wrap(testdata: Path) -> None:
    edid = (testdata / "edid" / "AGC-AVR5-d3a5a789.bin").read_bytes()
    monitor = SimulatedMonitor(edid=edid)
    monitor.write(0x50, b"\x80")
    assert monitor.read(0x50, 128) == edid[128:]
    assert monitor.read(0x50, 16) == edid[:16], "a sequential read wraps around"
    with pytest.raises(TransportError) as caught:
        monitor.write(0x30, b"\x01")
    assert caught.value.errno == errno.ENXIO, "no segment pointer for 256 bytes"


def test_the_segment_pointer_lasts_one_transfer(testdata: Path) -> None:
    from libdisplay.hardware.ddc import I2cRead, I2cWrite

    edid = (testdata / "edid" / "SAM-C49RG9x-f808e376.bin").read_bytes()
    monitor = SimulatedMonitor(edid=edid)
    assert monitor.transfer([I2cWrite(0x30, b"\x01"), I2cWrite(0x50, b"\x80"),
                             I2cRead(0x50, 128)]) == [edid[384:]]
    assert monitor.transfer([I2cWrite(0x50, b"\x00"), I2cRead(0x50, 8)]) == [edid[:8]]


def test_nothing_answers_at_0x50_without_an_edid() -> None:
    with pytest.raises(TransportError, match="NACK at 0x50"):
        SimulatedMonitor().read(0x50, 128)


# --- Faults -------------------------------------------------------------------------------


def test_null_replies_count_down_and_keep_the_request() -> None:
    monitor = SimulatedMonitor(values={0x10: 50})
    monitor.faults.null_replies = 2
    monitor.write(0x37, get_vcp_request(0x10))
    assert [monitor.read(0x37, 3) for _ in range(2)] == [NULL, NULL]
    assert monitor.read(0x37, 11) == h("6E 88 02 00 10 00 00 64 00 32 F2")


def test_a_slow_reply_is_ready_only_after_its_delay() -> None:
    clock = FakeClock()
    monitor = SimulatedMonitor(values={0x10: 50}, clock=clock)
    monitor.faults.reply_delay = 0.125
    monitor.write(0x37, get_vcp_request(0x10))
    clock.sleep(0.0625)
    assert monitor.read(0x37, 3) == NULL
    clock.sleep(0.0625)
    assert monitor.read(0x37, 3) == h("6E 88 02")


def test_a_busy_display_answers_null_until_it_is_free() -> None:
    clock = FakeClock()
    monitor = SimulatedMonitor(values={0x10: 50}, clock=clock)
    monitor.faults.busy_until = clock() + 1
    assert ask(monitor, get_vcp_request(0x10), 3) == NULL
    clock.sleep(1)
    assert ask(monitor, get_vcp_request(0x10), 3) == h("6E 88 02")


def test_garbage_and_bad_checksums_replace_replies() -> None:
    monitor = SimulatedMonitor(values={0x10: 50})
    monitor.faults.garbage_replies = 1
    monitor.faults.bad_checksum_replies = 1
    garbage = ask(monitor, get_vcp_request(0x10))
    assert garbage[0] != 0x6E and len(garbage) == 11
    assert ask(monitor, get_vcp_request(0x10)) == h("6E 88 02 00 10 00 00 64 00 32 0D")
    assert ask(monitor, get_vcp_request(0x10)) == h("6E 88 02 00 10 00 00 64 00 32 F2")


def test_silence_and_bus_errors() -> None:
    monitor = SimulatedMonitor(values={0x10: 50})
    monitor.faults.silent = "zeros"
    assert ask(monitor, get_vcp_request(0x10)) == bytes(11)
    monitor.faults.silent = "nack"
    with pytest.raises(TransportError) as nack:
        monitor.write(0x37, get_vcp_request(0x10))
    assert nack.value.nack
    monitor.faults.silent = None
    monitor.faults.bus_errno = errno.EIO
    with pytest.raises(TransportError) as broken:
        monitor.read(0x37, 3)
    assert broken.value.errno == errno.EIO and not broken.value.nack


def test_endless_capabilities_and_wrong_offsets() -> None:
    monitor = SimulatedMonitor(capabilities=b"abcdefghij", fragment_size=4)
    monitor.faults.endless_capabilities = True
    assert ask(monitor, capabilities_request(8), 10)[5:9] == b"ijab"
    assert ask(monitor, capabilities_request(4000), 10)[5:9] == b"abcd"
    monitor.faults.wrong_offset_replies = 1
    assert ask(monitor, capabilities_request(4), 5)[3:5] == h("00 05")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fragment_size": 0}, "fragment_size 0"),
        ({"fragment_size": 125}, "fragment_size 125"),
        ({"edid": bytes(100)}, "100 bytes"),
        ({"values": {0x10: 70000}}, "0x10: current 70000"),
        ({"values": {0x100: 1}}, "VCP code 0x100"),
    ],
    ids=["fragment-zero", "fragment-too-big", "edid-partial-block", "value-too-big", "code-9-bit"],
)
def test_bad_construction_names_the_field(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        SimulatedMonitor(**kwargs)  # type: ignore[arg-type]


def test_fake_clock_moves_only_when_slept_on() -> None:
    clock = FakeClock(start=5.0)
    assert clock() == 5.0
    clock.sleep(0.25)
    clock.sleep(-1)
    assert clock() == 5.25
    assert clock.sleeps == [0.25, -1]
