"""Tests for libdisplay.hardware.edid.

The corpus (testdata/) must agree with edid-decode's oracle on every contract field; the broken
variants give typed errors or flags; mutated EDIDs give nothing but EdidError or a result; the
CLI keeps its JSON contract; and EDIDs that are not in the corpus (built by libdisplay.sim.edid, or
random structures from a seeded generator) decode exactly as the real edid-decode prints them.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from conftest import testdata_dir
from libdisplay.hardware.edid import (
    VIC_TIMINGS,
    Edid,
    EdidEmptyError,
    EdidError,
    EdidHeaderError,
    EdidLengthError,
    MonitorIdentity,
    decode_edid,
    json_record,
    summary,
)
from libdisplay.hardware.modes import Mode
from libdisplay.sim.edid import EdidBuildError, EdidParams, build_edid

REPO_ROOT = Path(__file__).resolve().parents[2]
EDID_DECODE = shutil.which("edid-decode")
needs_edid_decode = pytest.mark.skipif(EDID_DECODE is None, reason="edid-decode not installed")

# The README of the shared data: an HF-EEODB overrides the extension count legally.
_LEGAL_COUNT_OVERRIDE = "edidtest-cta-eeodb-"


def _load_json(relative: str) -> Any:
    # Parametrizing needs the file names at collection time; the tests themselves read the
    # EDIDs through the `testdata` fixture, which resolves the same directory.
    return json.loads((testdata_dir() / "edid" / relative).read_text())


_ORACLE_MODE = re.compile(r"(?P<w>\d+)x(?P<h>\d+)(?P<i>i?)@(?P<r>[0-9.]+)")


ORACLE: list[dict[str, Any]] = _load_json("oracle.json")["files"]
BROKEN: list[dict[str, Any]] = _load_json("broken/verdicts.json")["variants"]
ORACLE_BY_NAME = {entry["file"]: entry for entry in ORACLE}


def _read(testdata: Path, name: str) -> bytes:
    return (testdata / "edid" / name).read_bytes()


# --- the corpus against the oracle ------------------------------------------------------------


def _oracle_mode(text: str) -> dict[str, Any]:
    """The oracle's `WIDTHxHEIGHT[i]@REFRESH_HZ` (a mode line may add its label after a space)
    in the record's form."""
    match = _ORACLE_MODE.fullmatch(text.split(" ", 1)[0])
    assert match is not None, text
    return {"width": int(match["w"]), "height": int(match["h"]), "interlaced": bool(match["i"]),
            "refresh_hz": float(match["r"])}


def _label(mode_line: str) -> str:
    return mode_line.split(" ", 1)[1]


def _unique(modes: list[str]) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    for m in map(_oracle_mode, modes):
        if m not in seen:
            seen.append(m)
    return seen


def _expected_preferred(entry: dict[str, Any]) -> dict[str, Any] | None:
    """Block 0's DTD 1; without one, DisplayID's preferred timing, else the first detailed
    timing, else the largest mode (the decoder's documented fallback)."""
    if entry["preferred_first_dtd"]:
        return _oracle_mode(entry["preferred_first_dtd"])
    displayid = entry["displayid_preferred"]
    if displayid:
        return _oracle_mode(displayid[0])
    detailed = [m for m in entry["modes"] if _label(m).startswith("DTD")]
    if detailed:
        return _oracle_mode(detailed[0])
    if not entry["modes"]:
        return None
    modes = [_oracle_mode(m) for m in entry["modes"]]
    return max(modes, key=lambda m: (m["width"] * m["height"], m["refresh_hz"]))


def _expected_record(entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "manufacturer": entry["manufacturer"],
        "product_code": entry["product_code"],
        "serial_number": entry["serial_number"],
        "serial_string": entry["serial_string"],
        "monitor_name": entry["monitor_name"],
        "edid_version": entry["edid_version"],
        "digital": entry["digital"],
        "image_size_cm": entry["image_size_cm"],
        "manufacture_week": entry["manufacture_week"],
        "manufacture_year": entry["manufacture_year"],
        "model_year": entry["model_year"],
        "checksum_valid": entry["checksum_valid"],
        "preferred_mode": _expected_preferred(entry),
        "modes": _unique(entry["modes"]),
    }


@pytest.mark.parametrize("entry", ORACLE, ids=[e["file"] for e in ORACLE])
def test_corpus_agrees_with_oracle(entry: dict[str, Any], testdata: Path) -> None:
    record = json_record(decode_edid(_read(testdata, entry["file"])))
    expected = _expected_record(entry)
    if entry["edid_decode_exit_code"] == 1:
        # edid-decode crashed part-way through this file (README): its list is a prefix.
        modes = record["modes"]
        assert isinstance(modes, list) and len(modes) > len(expected["modes"])
        assert modes[:len(expected["modes"])] == expected["modes"]
        record["modes"] = expected["modes"]
    assert record == expected
    assert list(record) == list(expected)


@pytest.mark.parametrize("entry", ORACLE, ids=[e["file"] for e in ORACLE])
def test_corpus_flags_agree_with_oracle(entry: dict[str, Any], testdata: Path) -> None:
    edid = decode_edid(_read(testdata, entry["file"]))
    bad = tuple(i for i, valid in enumerate(entry["block_checksums_valid"]) if not valid)
    assert edid.bad_checksum_blocks == bad
    mismatch = entry["ext_count_byte"] + 1 != entry["blocks_present"]
    if entry["file"].startswith(_LEGAL_COUNT_OVERRIDE):
        mismatch = False
    assert edid.extension_count_mismatch == mismatch
    assert len(edid.extensions) == entry["blocks_present"] - 1


# --- broken input -----------------------------------------------------------------------------


def _broken_outcome(variant: dict[str, Any]) -> type[EdidError] | None:
    first = variant["edid_decode_stdout_first_line"]
    if variant["edid_decode_exit_code"] != 255:
        return None
    if "not a multiple of 128" in first:
        return EdidLengthError
    if "No EDID header" in first:
        return EdidHeaderError
    assert "was empty" in first, first
    return EdidEmptyError


@pytest.mark.parametrize("variant", BROKEN, ids=[Path(v["file"]).stem for v in BROKEN])
def test_broken_variants_give_typed_errors_or_flags(variant: dict[str, Any],
                                                   testdata: Path) -> None:
    data = _read(testdata, variant["file"])
    error = _broken_outcome(variant)
    if error is not None:
        with pytest.raises(error):
            decode_edid(data)
        return
    edid = decode_edid(data)
    bad = tuple(i for i, c in enumerate(variant["block_checksums"]) if c["should_be"])
    assert edid.bad_checksum_blocks == bad
    assert edid.checksum_valid == (not bad)
    count_failure = any("extension block(s), but found" in f for f in variant["failures"])
    assert edid.extension_count_mismatch == count_failure
    if variant["file"].endswith("base-block-repeated.bin"):
        assert edid.repeated_base_blocks == (1,)


@pytest.mark.parametrize(
    ("data", "error", "message"),
    [
        (b"", EdidEmptyError, "empty"),
        (bytes(256), EdidEmptyError, "256 bytes, all zero"),
        (bytes(100), EdidLengthError, "length 100"),
        (b"\xff" * 128, EdidHeaderError, "ff ff ff ff ff ff ff ff"),
    ],
    ids=["no-bytes", "zeros", "short", "floating-bus"],
)
def test_errors_name_what_is_wrong(data: bytes, error: type[EdidError], message: str) -> None:
    with pytest.raises(error, match=message):
        decode_edid(data)


# --- mutations: EdidError or a result, never anything else --------------------------------------


@pytest.fixture(scope="session")
def mutation_seeds(testdata: Path) -> list[bytes]:
    # Every 7th file plus every file with DisplayID or several blocks: all the parsers.
    names = [e["file"] for i, e in enumerate(ORACLE) if i % 7 == 0 or e["blocks_present"] > 1]
    return [_read(testdata, name) for name in names if "256-blocks" not in name]


@st.composite
def _mutated(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(0, 12))):
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        data[126] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        # Truncate, or wrap around like an i2c read past the end: always whole blocks.
        blocks = draw(st.integers(1, len(data) // 128 + 2))
        data = (data * 3)[:blocks * 128]
    if draw(st.booleans()):
        for start in range(0, len(data), 128):
            data[start + 127] = -sum(data[start:start + 127]) & 0xFF
    return bytes(data)


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_mutated_edids_decode_or_raise_edid_error(data: st.DataObject,
                                                  mutation_seeds: list[bytes]) -> None:
    blob = data.draw(_mutated(mutation_seeds))
    try:
        edid = decode_edid(blob)
    except EdidError:
        return
    json.dumps(json_record(edid))
    assert summary(edid)
    assert all(isinstance(m, Mode) for m in edid.modes)
    assert len(edid.extensions) == len(blob) // 128 - 1


# --- values and fallbacks ---------------------------------------------------------------------


def test_vic_table_covers_every_defined_vic() -> None:
    assert sorted(VIC_TIMINGS) == [*range(1, 128), *range(193, 220)]
    assert VIC_TIMINGS[16] == (1920, 1080, 60000000, False)
    # Interlaced VICs carry the field rate, as edid-decode prints it.
    assert VIC_TIMINGS[5] == (1920, 1080, 60000000, True)
    assert VIC_TIMINGS[2] == (720, 480, 59940060, False)
    assert VIC_TIMINGS[219] == (4096, 2160, 120000000, False)


@pytest.mark.parametrize(
    ("identity", "text"),
    [
        (MonitorIdentity("DEL", 0x411A, 0, "73K0275ACK7L"), "DEL-411A-73K0275ACK7L"),
        (MonitorIdentity("ACI", 0x249A, 141123, None), "ACI-249A-141123"),
        (MonitorIdentity("LKN", 1, 0, " A/B 7 "), "LKN-0001-A_B_7"),
    ],
    ids=["serial-string", "serial-number", "odd-characters"],
)
def test_identity_string_form_is_stable(identity: MonitorIdentity, text: str) -> None:
    assert str(identity) == text
    assert str(MonitorIdentity(*[getattr(identity, f) for f in identity.__slots__])) == text


def test_modes_are_deduplicated_and_keep_edid_order(testdata: Path) -> None:
    edid = decode_edid(_read(testdata, "dell-up2718q-dp-28d8f761.bin"))
    assert len(edid.modes) == len(set(edid.modes)) < len(edid.timings)
    assert edid.modes[0] == Mode(720, 400, 70082)
    assert edid.preferred_mode == Mode(3840, 2160, 59997)
    serial = ORACLE_BY_NAME["dell-up2718q-dp-28d8f761.bin"]["serial_number"]
    assert edid.identity == MonitorIdentity("DEL", 0x411A, serial, "73K0275ACK7L")


def _edid_with(testdata: Path, prefix: str) -> Edid:
    name = next(e["file"] for e in ORACLE if e["file"].startswith(prefix))
    return decode_edid(_read(testdata, name))


def _decoded_text(testdata: Path, name: str) -> str:
    """The real edid-decode's `-c` text for a corpus file (exit 254 is a conformity failure)."""
    assert EDID_DECODE is not None
    result = subprocess.run([EDID_DECODE, "-c", str(testdata / "edid" / name)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode in (0, 254), result.stderr
    return result.stdout


@needs_edid_decode
def test_cta_facts_match_edid_decode_text(testdata: Path) -> None:
    name = next(e["file"] for e in ORACLE if e["file"].startswith("samsung-q800t-hdmi2.1-game"))
    text = _decoded_text(testdata, name)
    cta = decode_edid(_read(testdata, name)).cta
    assert cta is not None and cta.hdmi is not None and cta.hdmi_forum is not None
    assert re.search(rf"Source physical address: {re.escape(cta.hdmi.physical_address)}\n", text)
    assert f"Maximum TMDS clock: {cta.hdmi.max_tmds_mhz} MHz" in text
    assert f"Maximum TMDS Character Rate: {cta.hdmi_forum.max_tmds_mhz} MHz" in text
    assert cta.hdmi.hdmi_vics == (1, 2, 3, 4)
    assert cta.hdr is not None and "SMPTE ST 2084" in cta.hdr.eotfs
    assert "SMPTE ST2084" in text
    lines = text.split("YCbCr 4:2:0 Capability Map Data Block:\n")[1].splitlines()
    y420 = [line for line in itertools.takewhile(lambda t: t.startswith("    "), lines)]
    assert [int(re.findall(r"VIC +(\d+):", line)[0]) for line in y420] == \
        list(cta.ycbcr420_capable_vics)


def test_displayid_facts(testdata: Path) -> None:
    tile = _edid_with(testdata, "asus-pq321-dp-tile0")
    assert tile.model_year == 2013 and tile.manufacture_year is None
    edo = _edid_with(testdata, "EDO-EDO142")
    assert edo.displayid is not None and edo.displayid.version == "2.0"
    product = edo.displayid.product
    assert product is not None
    assert (product.vendor, product.product_code, product.year) == ("84-8A-59", 142, 2023)
    # No DTD in block 0: DisplayID's timing flagged preferred is the preferred mode.
    assert edo.preferred_mode == Mode(2880, 1920, 120000)
    xdr = _edid_with(testdata, "apple-xdr-6k-tile1")
    # Nothing flagged preferred either: the first DisplayID detailed timing is.
    assert xdr.preferred is not None and xdr.preferred.source == "DTD"
    assert xdr.preferred == next(t for t in xdr.timings if t.source == "DTD")


def _checksummed(block: bytearray) -> bytes:
    block[127] = -sum(block[:127]) & 0xFF
    return bytes(block)


def _with_extension(base: bytes, extension: bytes, *, drop_dtd: bool = False) -> bytes:
    block = bytearray(base[:128])
    block[126] = 1
    if drop_dtd:
        block[54:72] = bytes([0, 0, 0, 0x10]) + bytes(14)  # a dummy descriptor, no DTD 1
    return _checksummed(block) + extension


def _cta_block(data_blocks: bytes) -> bytes:
    block = bytearray(128)
    block[0:4] = bytes([0x02, 0x03, 4 + len(data_blocks), 0])
    block[4:4 + len(data_blocks)] = data_blocks
    return _checksummed(block)


def _displayid_type1(width: int, height: int, clock_khz: int, *, preferred: bool) -> bytes:
    def le(value: int) -> bytes:
        return (value - 1).to_bytes(2, "little")

    clock = (clock_khz // 10 - 1).to_bytes(3, "little")
    flags = 0x80 if preferred else 0x00
    return clock + bytes([flags]) + le(width) + le(280) + le(88) + le(44) + le(height) \
        + le(45) + le(4) + le(5)


def _displayid_block(*timings: bytes) -> bytes:
    payload = b"".join(timings)
    section = bytes([0x12, 3 + len(payload), 0, 0, 0x03, 0, len(payload)]) + payload
    section += bytes([-sum(section) & 0xFF])
    block = bytearray(128)
    block[0] = 0x70
    block[1:1 + len(section)] = section
    return _checksummed(block)


@pytest.mark.parametrize(
    ("svds", "vics", "native"),
    [
        (bytes([0x81, 0x10, 0x04]), (1, 16, 4), (1,)),
        (bytes([0xC0, 0x40]), (64, 64), (64,)),
        (bytes([0x41, 0x7F, 0xC1, 0xDB]), (65, 127, 193, 219), ()),
        (bytes([0x00, 0x80, 0xDC, 0xFF]), (), ()),
    ],
    ids=["native-flag", "vic-64", "vics-65-and-up", "reserved"],
)
def test_short_video_descriptors(svds: bytes, vics: tuple[int, ...],
                                 native: tuple[int, ...]) -> None:
    data = _with_extension(build_edid(EdidParams()), _cta_block(bytes([0x40 | len(svds)]) + svds))
    edid = decode_edid(data)
    assert edid.cta is not None
    assert (edid.cta.vics, edid.cta.native_vics) == (vics, native)
    assert [t.source for t in edid.timings if t.block == 1] == [f"VIC {v}" for v in vics]


def test_displayid_preferred_flag_wins_without_a_block_0_dtd() -> None:
    plain = _displayid_type1(1920, 1080, 148500, preferred=False)
    flagged = _displayid_type1(2560, 1440, 241500, preferred=True)
    base = build_edid(EdidParams())
    edid = decode_edid(_with_extension(base, _displayid_block(plain, flagged), drop_dtd=True))
    assert [t.source for t in edid.timings] == ["DTD", "DTD"]
    assert edid.preferred == edid.timings[1]
    # With a DTD in block 0, that DTD is preferred whatever DisplayID flags.
    edid = decode_edid(_with_extension(base, _displayid_block(plain, flagged)))
    assert edid.preferred_mode == Mode(1920, 1080, 60000) and edid.preferred is edid.timings[0]
    # Nothing flagged: the first detailed timing of any block.
    edid = decode_edid(_with_extension(base, _displayid_block(flagged[:3] + b"\0" + flagged[4:],
                                                              plain), drop_dtd=True))
    assert edid.preferred == edid.timings[0]


def test_preferred_falls_back_to_the_first_vic() -> None:
    data = _with_extension(build_edid(EdidParams()), _cta_block(bytes([0x42, 0x04, 0x10])),
                           drop_dtd=True)
    edid = decode_edid(data)
    assert edid.preferred is not None and edid.preferred.source == "VIC 4"


def test_preferred_falls_back_to_the_largest_mode(testdata: Path) -> None:
    edid = _edid_with(testdata, "HEI-HEI12F0")
    assert not any(t.source.startswith("DTD") for t in edid.timings)
    largest = max(edid.timings, key=lambda t: (t.width * t.height, t.refresh_uhz))
    assert edid.preferred == largest


# --- the CLI contract -------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "libdisplay.hardware.edid", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


def test_cli_json_keeps_order_and_exits_1_on_a_bad_file(testdata: Path) -> None:
    good = [testdata / "edid" / ORACLE[n]["file"] for n in (5, 200)]
    bad = testdata / "edid" / "broken" / "truncated-127-bytes.bin"
    result = _cli("--json", str(good[0]), str(bad), str(good[1]))
    assert result.returncode == 1
    records = json.loads(result.stdout)
    assert [set(r) for r in records][1] == {"error"}
    assert "not a multiple of 128" in records[1]["error"]
    assert records[0] == _expected_record(ORACLE[5])
    assert records[2] == _expected_record(ORACLE[200])


def test_cli_json_exits_0_when_every_file_decodes(testdata: Path) -> None:
    paths = [str(testdata / "edid" / e["file"]) for e in ORACLE[:3]]
    result = _cli("--json", *paths)
    assert result.returncode == 0
    assert [r["manufacturer"] for r in json.loads(result.stdout)] == \
        [e["manufacturer"] for e in ORACLE[:3]]


def test_cli_summary_and_help(testdata: Path) -> None:
    result = _cli(str(testdata / "edid" / "dell-up2718q-dp-28d8f761.bin"))
    assert result.returncode == 0
    assert "DELL UP2718Q" in result.stdout and "3840x2160@59.997" in result.stdout
    helped = _cli("--help")
    assert helped.returncode == 0 and "--json" in helped.stdout


# --- edid-decode itself on EDIDs that are not in the corpus -------------------------------------

_TIMING_LINE = re.compile(
    r"^\s*(?P<label>[^:\n]+?)\s*:\s+(?P<w>\d+)x(?P<h>\d+)(?P<i>i?)\s+(?P<r>\d+\.\d{6}) Hz"
    r"\s+\d+:\d+\s+[\d.]+ kHz\s+[\d.]+ MHz", re.M)


def _edid_decode(data: bytes) -> str | None:
    """edid-decode's report, or None when edid-decode itself fails on this input."""
    assert EDID_DECODE is not None
    try:
        run = subprocess.run([EDID_DECODE, "-s", "-"], input=data, capture_output=True,
                             timeout=30, check=False)
    except subprocess.TimeoutExpired:
        return None
    return run.stdout.decode("latin-1") if run.returncode == 0 else None


def _reported_timings(report: str) -> list[tuple[int, int, bool, int]]:
    seen: list[tuple[int, int, bool, int]] = []
    for m in _TIMING_LINE.finditer(report):
        key = (int(m["w"]), int(m["h"]), bool(m["i"]), int(m["r"].replace(".", "")))
        if key not in seen:
            seen.append(key)
    return seen


def _reported_identity(report: str) -> tuple[str | None, ...]:
    block0 = report.split("\nBlock 1,")[0]

    def grab(pattern: str) -> str | None:
        found = re.search(pattern, block0)
        return found[1] if found else None

    return (grab(r"Manufacturer: (\S+)"), grab(r"Model: (\d+)"),
            grab(r"Serial Number: (\d+)") or "0", grab(r"Display Product Name: '(.*)'"),
            grab(r"Display Product Serial Number: '(.*)'"))


def _identity(edid: Edid) -> tuple[str | None, ...]:
    return (edid.manufacturer, str(edid.product_code), str(edid.serial_number),
            edid.monitor_name, edid.serial_string)


def _timings(edid: Edid) -> list[tuple[int, int, bool, int]]:
    return [(t.width, t.height, t.interlaced, t.refresh_uhz) for t in edid.unique_timings]


def _modes_from(widths: list[int], heights: list[int]) -> st.SearchStrategy[Mode]:
    return st.builds(Mode, st.sampled_from(widths), st.sampled_from(heights),
                     st.integers(23000, 165000), st.just(False))


_NAMES = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=13)
_STANDARD = [Mode(1280, 1024, 60000), Mode(1600, 900, 60000), Mode(1440, 900, 75000),
             Mode(1024, 768, 70000), Mode(1920, 1200, 85000), Mode(1280, 800, 61000)]
_PARAMS = st.builds(
    EdidParams,
    manufacturer=st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=3, max_size=3),
    product_code=st.integers(0, 0xFFFF),
    serial_number=st.integers(0, 0xFFFFFFFF),
    serial_string=st.none() | _NAMES,
    name=st.none() | _NAMES,
    size_mm=st.tuples(st.integers(0, 2000), st.integers(0, 2000)),
    preferred=_modes_from([640, 1280, 1366, 1920, 2560, 3440, 3840], [480, 720, 768, 1080, 1440,
                                                                      1600, 2160]),
    detailed=st.lists(_modes_from([800, 1024, 1920], [600, 1080]), max_size=2).map(tuple),
    standard=st.lists(st.sampled_from(_STANDARD), max_size=4).map(tuple),
    vics=st.lists(st.sampled_from(sorted(VIC_TIMINGS)), max_size=40).map(tuple),
    interface=st.sampled_from(["undefined", "dvi", "hdmi-a", "displayport"]),
)


@needs_edid_decode
@settings(max_examples=60, deadline=None)
@given(params=_PARAMS)
def test_built_edids_decode_as_edid_decode_reports(params: EdidParams) -> None:
    try:
        data = build_edid(params)
    except EdidBuildError:
        assume(False)
    report = _edid_decode(data)
    assert report is not None
    edid = decode_edid(data)
    assert _identity(edid) == _reported_identity(report)
    reported = _reported_timings(report)
    assert _timings(edid) == reported
    dtd1 = re.search(r"DTD 1:\s+(\d+)x(\d+)(i?)\s+(\d+\.\d{6}) Hz", report)
    assert dtd1 is not None and edid.preferred is not None
    assert (edid.preferred.width, edid.preferred.height, edid.preferred.refresh_uhz) == \
        (int(dtd1[1]), int(dtd1[2]), int(dtd1[4].replace(".", "")))


# A seeded generator of random but well-formed-enough structures: base blocks with every
# descriptor kind, CTA-861 blocks with every timing-bearing data block, DisplayID blocks with
# every timing type, VTB-EXT blocks. Field values are random, so formulas see odd inputs.


def _random_structure(seed: int) -> bytes:
    rng = random.Random(seed)
    pick: Callable[[list[Any]], Any] = rng.choice

    def raw(n: int) -> bytes:
        return bytes(rng.randrange(256) for _ in range(n))

    def checksummed(block: bytearray) -> bytes:
        block[127] = -sum(block[:127]) & 0xFF
        return bytes(block)

    def dtd() -> bytes:
        d = bytearray(raw(18))
        d[0], d[1] = pick([(0x02, 0x3A), (0x01, 0x1D), (0x56, 0x5E), (d[0], d[1] | 1)])
        d[15] = d[16] = 0
        d[17] &= pick([0x7F, 0xFF])
        return bytes(d)

    def descriptor() -> bytes:
        if rng.random() < 0.35:
            return dtd()
        d = bytearray([0, 0, 0, pick([0xF7, 0xF8, 0xFA, 0xFC, 0xFD, 0xFE, 0xFF, 0x10]), 0])
        d += raw(13)
        if d[3] == 0xF8:
            d[5] = 1
        if d[3] == 0xFD:
            d[10] = pick([0, 1, 2, 4])
        return bytes(d)

    def cta() -> bytes:
        blocks = b""
        while rng.random() < 0.8 and len(blocks) < 90:
            kind = rng.randrange(9)
            if kind == 0:
                body = bytes([0x40 | 12]) + raw(12)
            elif kind in (1, 2, 3):
                body = bytes([0xE0 | 6, pick([0x0E, 0x0F, 0x0D])]) + raw(5)
            elif kind == 4:
                body = bytes([0x60 | 14, 0x03, 0x0C, 0x00]) + raw(3) + bytes([0x20]) + raw(7)
            elif kind == 5:
                body = bytes([0xE0 | 22, 0x22, 0]) + raw(20)
            elif kind == 6:
                body = bytes([0xE0 | 5, 0x23, pick([0, 8])]) + raw(3)
            elif kind == 7:
                body = bytes([0xE0 | 9, 0x2A, 0x10, pick([1, 2, 3, 0x13])]) + raw(6)
            else:
                body = bytes([0xE0 | 3, 0x08]) + raw(2)
            blocks += body
        block = bytearray(128)
        block[0:4] = bytes([0x02, 0x03, 4 + len(blocks), rng.randrange(256)])
        tail = blocks + b"".join(dtd() for _ in range(rng.randrange(3)))
        block[4:4 + min(len(tail), 123)] = tail[:123]
        return checksummed(block)

    def displayid() -> bytes:
        body = b""
        while rng.random() < 0.8 and len(body) < 90:
            tag, size = pick([(0x03, 20), (0x22, 20), (0x04, 11), (0x05, 3), (0x06, 4), (0x07, 10),
                              (0x08, 8), (0x11, 7), (0x13, 14), (0x23, 4), (0x24, 6)])
            body += bytes([tag, 0, size]) + raw(size)
        section = bytes([pick([0x12, 0x13, 0x20]), len(body), 0, 0]) + body
        section += bytes([-sum(section) & 0xFF])
        block = bytearray(128)
        block[0] = 0x70
        block[1:1 + len(section)] = section
        return checksummed(block)

    def vtb() -> bytes:
        block = bytearray(raw(128))
        block[0:5] = bytes([0x10, 1, rng.randrange(3), rng.randrange(4), rng.randrange(6)])
        return checksummed(block)

    extensions = [pick([cta, displayid, vtb])() for _ in range(rng.randrange(3))]
    base = bytearray(raw(128))
    base[0:8] = b"\x00\xff\xff\xff\xff\xff\xff\x00"
    base[18:20] = bytes([1, pick([0, 2, 3, 4])])
    for i in range(4):
        base[54 + 18 * i:72 + 18 * i] = descriptor()
    base[126] = len(extensions)
    return checksummed(base) + b"".join(extensions)


@needs_edid_decode
@pytest.mark.parametrize("seed", range(150), ids=[f"structure-{n}" for n in range(150)])
def test_random_structures_decode_as_edid_decode_reports(seed: int) -> None:
    data = _random_structure(seed)
    report = _edid_decode(data)
    if report is None:
        pytest.skip("edid-decode itself fails on this structure")
    edid = decode_edid(data)
    assert _identity(edid) == _reported_identity(report)
    assert _timings(edid) == _reported_timings(report)
