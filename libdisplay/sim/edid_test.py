"""Tests for libdisplay.sim.edid: built EDIDs round-trip through libdisplay.hardware.edid and
through the real edid-decode (which must find them conformant), and bad parameters are refused."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from libdisplay.hardware.edid import VIC_TIMINGS, decode_edid
from libdisplay.hardware.modes import Mode, find_mode
from libdisplay.sim.edid import EdidBuildError, EdidParams, build_edid

EDID_DECODE = shutil.which("edid-decode")
needs_edid_decode = pytest.mark.skipif(EDID_DECODE is None, reason="edid-decode not installed")

CASES = [
    EdidParams(),
    EdidParams(manufacturer="WST", product_code=0x1234, serial_number=42, name="TEST MONITOR",
               serial_string="SN0001", size_mm=(527, 296), year=2023, week=1),
    EdidParams(preferred=Mode(3840, 2160, 59940), detailed=(Mode(1920, 1080, 50000),
               Mode(1280, 720, 60000), Mode(1920, 1080, 60000, interlaced=True)),
               standard=(Mode(1280, 1024, 60000), Mode(1600, 900, 60000)),
               vics=(16, 4, 97, 1), interface="displayport", name="Wide 4K"),
    EdidParams(preferred=Mode(1366, 768, 59790), vics=tuple(range(1, 60)), size_mm=(0, 0)),
    EdidParams(preferred=Mode(1920, 1080, 60000, interlaced=True), interface="dvi"),
    EdidParams(preferred=Mode(2560, 1440, 143856), model_year=True, year=2021, bits_per_color=10),
]
CASE_IDS = ["defaults", "named", "cta-extension", "many-vics", "interlaced", "high-refresh"]


@pytest.mark.parametrize("params", CASES, ids=CASE_IDS)
def test_round_trip_through_the_decoder(params: EdidParams) -> None:
    data = build_edid(params)
    edid = decode_edid(data)
    assert len(data) == 128 * (1 + len(edid.extensions))
    assert edid.checksum_valid and not edid.extension_count_mismatch
    assert edid.version == "1.4" and edid.digital
    assert (edid.manufacturer, edid.product_code, edid.serial_number) == \
        (params.manufacturer, params.product_code, params.serial_number)
    assert (edid.monitor_name, edid.serial_string) == (params.name, params.serial_string)
    made = (None, None, params.year) if params.model_year else (params.week, params.year, None)
    assert (edid.manufacture_week, edid.manufacture_year, edid.model_year) == made
    expected_size = tuple(round(mm / 10) for mm in params.size_mm) if all(params.size_mm) \
        else None
    assert edid.image_size_cm == expected_size
    assert edid.bits_per_color == params.bits_per_color
    assert edid.preferred_mode == params.preferred
    for mode in params.detailed:
        assert mode in edid.modes
    for mode in params.standard:
        assert find_mode(mode, edid.modes) is not None
    assert edid.cta is not None if params.vics else True
    if params.vics:
        assert edid.cta is not None and edid.cta.vics == params.vics
        for vic in params.vics:
            width, height, refresh_uhz, interlaced = VIC_TIMINGS[vic]
            assert Mode(width, height, (refresh_uhz + 500) // 1000, interlaced) in edid.modes


def _edid_decode(data: bytes, *options: str) -> subprocess.CompletedProcess[str]:
    assert EDID_DECODE is not None
    return subprocess.run([EDID_DECODE, *options, "-s", "-"], input=data.decode("latin-1"),
                          capture_output=True, text=True, encoding="latin-1", timeout=30,
                          check=False)


@needs_edid_decode
@pytest.mark.parametrize("params", CASES, ids=CASE_IDS)
def test_edid_decode_finds_built_edids_conformant(params: EdidParams) -> None:
    result = _edid_decode(build_edid(params), "-c")
    assert result.returncode == 0, result.stdout[-2000:]
    assert "EDID conformity: PASS" in result.stdout
    assert "Warnings:" not in result.stdout
    assert f"Manufacturer: {params.manufacturer}\n" in result.stdout
    assert f"Model: {params.product_code}\n" in result.stdout
    if params.name:
        assert f"Display Product Name: '{params.name}'" in result.stdout
    dtd1 = re.search(r"DTD 1:\s+(\d+)x(\d+)(i?)\s+(\d+\.\d{6}) Hz", result.stdout)
    assert dtd1 is not None
    reported = Mode(int(dtd1[1]), int(dtd1[2]), round(float(dtd1[4]) * 1000), bool(dtd1[3]))
    assert reported == params.preferred


def test_name_and_serial_string_are_optional() -> None:
    edid = decode_edid(build_edid(EdidParams(name=None, serial_string=None)))
    assert (edid.monitor_name, edid.serial_string, edid.alphanumeric_strings) == (None, None, ())
    assert str(edid.identity) == "LKN-0001-0"


@given(
    width=st.integers(320, 4095),
    height=st.integers(200, 2400),
    refresh_mhz=st.integers(23000, 240000),
    interlaced=st.booleans(),
)
@settings(max_examples=200, deadline=None, database=None)
def test_preferred_mode_comes_back_exactly(width: int, height: int, refresh_mhz: int,
                                           interlaced: bool) -> None:
    mode = Mode(width, height - height % 2 if interlaced else height, refresh_mhz, interlaced)
    try:
        data = build_edid(EdidParams(preferred=mode))
    except EdidBuildError as e:
        # Only pixel clocks outside what a DTD holds are refused.
        assert "pixel clock" in str(e)
        assume(False)
    assert decode_edid(data).preferred_mode == mode


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (EdidParams(manufacturer="de1"), "manufacturer 'de1'"),
        (EdidParams(name="A NAME THAT IS TOO LONG"), "name 'A NAME THAT IS TOO LONG'"),
        (EdidParams(serial_string="caf\u00e9"), "serial_string"),
        (EdidParams(product_code=70000), "product_code 70000"),
        (EdidParams(year=1989), "year 1989"),
        (EdidParams(vics=(16, 128)), "vics: 128"),
        (EdidParams(standard=(Mode(1366, 768, 60000),)), r"standard\[0\] 1366x768@60"),
        (EdidParams(standard=(Mode(1280, 1024, 59940),)), "whole 60-123 Hz"),
        (EdidParams(preferred=Mode(7680, 4320, 60000)), "4095x4095"),
        (EdidParams(preferred=Mode(3840, 2160, 240000)), "at most 655.35 MHz"),
        (EdidParams(preferred=Mode(640, 480, 20000)), "at least 10 MHz"),
        (EdidParams(bits_per_color=7), "bits_per_color 7"),
        (EdidParams(vics=tuple(VIC_TIMINGS)[:100], detailed=(Mode(1920, 1080, 50000),) * 6),
         "do not fit"),
    ],
    ids=["manufacturer", "long-name", "non-ascii", "product", "year", "vic", "std-aspect",
         "std-refresh", "dtd-size", "dtd-clock-high", "dtd-clock-low", "bpc", "no-room"],
)
def test_bad_parameters_are_refused_by_name(params: EdidParams, message: str) -> None:
    with pytest.raises(EdidBuildError, match=message):
        build_edid(params)
