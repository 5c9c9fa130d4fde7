from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from libdisplay.hardware.mccs import (
    Capabilities,
    Segment,
    VcpFeature,
    VcpName,
    VcpValue,
    Window,
    feature_name,
    parse_capabilities,
    value_name,
)


def _index() -> list[dict[str, Any]]:
    from conftest import testdata_dir

    data = json.loads((testdata_dir() / "ddc-caps" / "index.json").read_text())
    strings: list[dict[str, Any]] = data["strings"]
    return strings


INDEX = _index()
FILES = [entry["file"] for entry in INDEX]


def read(testdata: Path, name: str) -> str:
    return (testdata / "ddc-caps" / name).read_text(encoding="latin-1")


def v(*values: int) -> tuple[VcpValue, ...]:
    return tuple(VcpValue(x) for x in values)


def _nested(depth: int) -> tuple[VcpValue, ...]:
    """`(01(01(01...)))` cut at `depth` lists: what is kept of a list nested too deep."""
    values: tuple[VcpValue, ...] = v(0x01)
    for _ in range(depth - 1):
        values = (VcpValue(0x01, values),)
    return values


# Where the collector's naive scanner saw one segment name, this parser separates the stray
# text glued to it (docs/ddc.md §6); each is also a warning.
GLUED = {
    "UL550_500cmds": ("UL550_500", "cmds"),
    "UN880cmds": ("UN880", "cmds"),
    "G274QPF E2cmds": ("G274QPF E2", "cmds"),
    "model LCDPB287 cmds": ("model LCDPB287", "cmds"),
}

# The only real strings that break the grammar, and how.
EXPECTED_WARNINGS = {
    "AOC_G2590FX.txt": ["1 extra ')' after the closing parenthesis"],
    "ASUS_PB287Q.txt": ["stray text 'model LCDPB287' before segment 'cmds'"],
    "LG_27UL550-W.txt": ["stray text 'UL550_500' before segment 'cmds'"],
    "LG_32UN880-B.txt": ["stray text 'UN880' before segment 'cmds'"],
    "MSI_G274QPF_E2.txt": ["stray text 'G274QPF E2' before segment 'cmds'"],
    "LG_25UM65.txt": ["'E33' in cmds has an odd number of hex digits"],
    "HP_X24ih.txt": ["vcp lists code EE more than once"],
}


@pytest.mark.parametrize("entry", INDEX, ids=FILES)
def test_every_real_string_parses_as_indexed(testdata: Path, entry: dict[str, Any]) -> None:
    caps = parse_capabilities(read(testdata, entry["file"]))
    analysis = entry["analysis"]
    assert caps.mccs_ver == analysis["mccs_ver"]
    assert caps.model == analysis["model_field"]
    assert bool(caps.vcp) == analysis["has_vcp_segment"]
    expected_names = [GLUED.get(n, ("", n))[1] for n in analysis["top_level_segment_names"]]
    assert list(caps.segment_names) == expected_names
    expected_stray = [GLUED[n][0] for n in analysis["top_level_segment_names"] if n in GLUED]
    assert list(caps.stray_text) == expected_stray
    assert caps.cmds[:3] == (0x01, 0x02, 0x03)
    wanted = EXPECTED_WARNINGS.get(Path(entry["file"]).name, [])
    assert len(caps.warnings) == len(wanted)
    for warning, text in zip(caps.warnings, wanted, strict=True):
        assert text in warning


@pytest.mark.parametrize(
    ("name", "code", "values"),
    [
        ("LG_19M38HB.txt", 0x14, v(0x01, 0x05, 0x06, 0x07, 0x08, 0x0B)),
        ("LG_19M38HB.txt", 0x1A, ()),
        ("LG_19M38HB.txt", 0x60, v(0x01, 0x03, 0x04)),
        ("LG_25UM65.txt", 0x03, v(0x10, 0x00)),
        ("LG_25UM65.txt", 0x60, v(0x30, 0x33, 0x04)),
        ("DELL_U2723QE.txt", 0x60, v(0x1B, 0x0F, 0x11)),
        ("ViewSonic_VX2370.txt", 0xCC, v(2, 3, 4, 0x0A, 5, 0x16, 9, 6, 7, 0x0D, 1)),
        ("Apple_Cinema_Display.txt", 0xD6, v(0, 1, 2, 3, 4)),
        ("HP_LE1711.txt", 0xFE, v(0, 1, 2, 4)),
        ("HP_X24ih.txt", 0xDC, (VcpValue(0x00, v(0x00, 0x10, 0x13, 0x14, 0x15, 0x17, 0x1A,
                                                   0x1D, 0x1E)), *v(1, 2, 3))),
        ("HP_X24ih.txt", 0xE0, (VcpValue(0x02, v(0, 1, 2)),)),
        ("Kuycon_P27UB.txt", 0x02, ()),
    ],
    ids=["lg-run-together-list", "lg-run-together-code", "lg-input", "lg-list-glued-to-code",
         "lg-values-run-together", "dell-usb-c-input", "lowercase-hex", "apple-uppercase-vcp",
         "space-before-paren", "hp-nested-list", "hp-nested-blank", "kuycon-only-feature"],
)
def test_features_and_their_values(testdata: Path, name: str, code: int,
                                   values: tuple[VcpValue, ...]) -> None:
    caps = parse_capabilities(read(testdata, name))
    assert caps.feature(code) == VcpFeature(code, values)


def test_deeply_nested_lists_keep_their_tree(testdata: Path) -> None:
    caps = parse_capabilities(read(testdata, "Lenovo_Legion_27U-10.txt"))
    f7 = caps.feature(0xF7)
    assert f7 is not None
    assert f7.values[0] == VcpValue(0x01, v(0x01))
    assert f7.values[2] == VcpValue(0x09, (
        VcpValue(0x01),
        VcpValue(0x02, v(0x00, 0x03, 0x04, 0x05, 0x06)),
        VcpValue(0x03, v(0x05, 0x78, 0xFB, 0x50, 0x64, 0x78, 0x8C, 0xA0)),
    ))
    assert f7.allowed[:4] == (0x01, 0x02, 0x09, 0x0A)


def test_other_segments_are_kept(testdata: Path) -> None:
    nec = parse_capabilities(read(testdata, "NEC_L220W.txt"))
    assert (nec.prot, nec.display_type, nec.model, nec.mccs_version) == \
        ("monitor", "LCD", "L220W", (2, 0))
    assert nec.cmds == (0x01, 0x02, 0x03, 0x07, 0x0C, 0xC2, 0xC4, 0xC6, 0xC8, 0xF3)
    assert nec.unknown[:2] == (Segment("vcp_p02", "33 37 47 52 64 65 DA EA FF"),
                               Segment("vcp_p10", "10 11 26 27 28 29 2A 2B 2C 2D"))
    acer = parse_capabilities(read(testdata, "Acer_XB271HU.txt"))
    assert acer.vcp_names == (VcpName(0x10, "Brightness"),)


def test_the_mccs_2_2a_example() -> None:
    caps = parse_capabilities(
        "Prot(display) type(lcd) model(xxxxx) cmds(xxxxx) vcp(02 03 10 12 C8 DC(00 01 02 03 07) "
        "DF)mccs_ver(2.2) window1(type (PIP) area(25 25 1895 1175) max(640 480) min(10 10) "
        "window(10))vcpname(10(Brightness))")
    assert (caps.prot, caps.display_type, caps.model, caps.mccs_version) == \
        ("display", "lcd", "xxxxx", (2, 2))
    assert [f.code for f in caps.vcp] == [0x02, 0x03, 0x10, 0x12, 0xC8, 0xDC, 0xDF]
    assert caps.windows == (Window(1, "PIP", (25, 25, 1895, 1175), (640, 480), (10, 10),
                                   (Segment("window", "10"),)),)
    assert caps.vcp_names == (VcpName(0x10, "Brightness"),)
    assert caps.cmds == ()
    assert len(caps.warnings) == 1 and "'xxxxx' in cmds is not hex" in caps.warnings[0]


def test_the_access_bus_vcpname_example() -> None:
    caps = parse_capabilities(r"vcpname(14((9300 6500 5500))44(Rotate)80(Do\x20this(On Off))"
                              r"82(Fixit))")
    assert caps.vcp_names == (
        VcpName(0x14, None, ("9300", "6500", "5500")),
        VcpName(0x44, "Rotate"),
        VcpName(0x80, "Do this", ("On", "Off")),
        VcpName(0x82, "Fixit"),
    )
    assert caps.warnings == ()


@pytest.mark.parametrize(
    ("text", "partial", "warning"),
    [
        ("", Capabilities(warnings=("empty capabilities string",)), "empty"),
        ("(prot(monitor)type(lcd)vcp(10 12 14(01 05", Capabilities(
            prot="monitor", display_type="lcd", segment_names=("prot", "type", "vcp"),
            vcp=(VcpFeature(0x10), VcpFeature(0x12), VcpFeature(0x14, v(0x01, 0x05)))),
         "never closed"),
        ("(prot(monitor))vcp(10)mccs_ver(2.1))", Capabilities(
            prot="monitor", vcp=(VcpFeature(0x10),), mccs_ver="2.1",
            segment_names=("prot", "vcp", "mccs_ver")), "text after the closing"),
        ("(vcp(10 1G 12 ZZ(01) 14(01)(02)))", Capabilities(
            vcp=(VcpFeature(0x10), VcpFeature(0x12), VcpFeature(0x14, v(0x01))),
            segment_names=("vcp",)), "'1G' in vcp is not hex"),
        ("(cmds(01 02(03) F3)mccs_ver(two))", Capabilities(
            cmds=(0x01, 0x02, 0xF3), mccs_ver="two", segment_names=("cmds", "mccs_ver")),
         "not allowed"),
        ("(model(A)model(B)vcp(10)vcp(10 12))", Capabilities(
            model="A", vcp=(VcpFeature(0x10), VcpFeature(0x10), VcpFeature(0x12)),
            segment_names=("model", "model", "vcp", "vcp")), "repeated segment 'model'"),
        ("\x00\xff junk ) garbage (((", Capabilities(
            stray_text=("\xff junk",), segment_names=("garbage",),
            unknown=(Segment("garbage", "(("),)), "stray text '\xff junk'"),
        (")))vcp(10)", Capabilities(vcp=(VcpFeature(0x10),), segment_names=("vcp",)),
         "unbalanced ')'"),
        ("(window2(type(PBP) area(1 x)))", Capabilities(
            windows=(Window(2, "PBP"),), segment_names=("window2",)), "not a list of decimal"),
        ("(vcpname(1(x) 10(Brightness(On Off)))", Capabilities(
            vcp_names=(VcpName(0x10, "Brightness", ("On", "Off")),),
            segment_names=("vcpname",)), "is not one feature code"),
        ("(vcp(10" + "(01" * 3000 + ")" * 3000 + "))", Capabilities(
            vcp=(VcpFeature(0x10, _nested(16)),), segment_names=("vcp",)), "nested too deep"),
    ],
    ids=["empty", "truncated", "early-close", "hex-errors", "list-in-cmds", "repeats",
         "garbage", "leading-close", "bad-window", "bad-vcpname", "deep-nesting"],
)
def test_malformed_strings_give_a_partial_result_and_warnings(
    text: str, partial: Capabilities, warning: str
) -> None:
    caps = parse_capabilities(text)
    assert caps.warnings and any(warning in w for w in caps.warnings)
    got = {f: getattr(caps, f) for f in Capabilities.__slots__ if f != "warnings"}
    want = {f: getattr(partial, f) for f in Capabilities.__slots__ if f != "warnings"}
    assert got == want


def test_bytes_are_read_as_latin_1() -> None:
    assert parse_capabilities(b"(model(\xe9cran))").model == "\xe9cran"


# --- Never an exception -------------------------------------------------------------------

CAPS_ALPHABET = st.sampled_from(list("()( )0123456789ABCDEFabcdefvcpmodelcmds_ver.\\x\0\n"))


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=400) | st.text(CAPS_ALPHABET, max_size=400))
def test_any_text_parses_without_raising(text: str) -> None:
    assert isinstance(parse_capabilities(text), Capabilities)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_parse_as_their_latin_1_text(raw: bytes) -> None:
    assert parse_capabilities(raw) == parse_capabilities(raw.decode("latin-1"))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(FILES), cuts=st.lists(st.integers(0, 2000), min_size=1, max_size=4),
       insert=st.text(st.sampled_from(list("() x0G\\")), max_size=3))
def test_damaged_real_strings_parse_without_raising(testdata: Path, name: str,
                                                    cuts: list[int], insert: str) -> None:
    text = read(testdata, name)
    for cut in cuts:
        at = cut % (len(text) + 1)
        text = text[:at] + insert + text[at + 1:]
    assert isinstance(parse_capabilities(text), Capabilities)


CLEAN_ENCLOSED = [e["file"] for e in INDEX
                  if e["analysis"]["outer_parens"] and Path(e["file"]).name
                  not in EXPECTED_WARNINGS]


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(CLEAN_ENCLOSED), keep=st.floats(0.0, 0.999))
def test_a_truncated_string_always_warns(testdata: Path, name: str, keep: float) -> None:
    text = read(testdata, name)
    caps = parse_capabilities(text[: int(len(text) * keep)])
    assert caps.warnings


# --- Names --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "name"),
    [(0x10, "Brightness"), (0x12, "Contrast"), (0x60, "Input Source"), (0xD6, "Power mode"),
     (0xE5, "Manufacturer specific 0xE5"), (0x07, "Unknown feature 0x07")],
    ids=["brightness", "contrast", "input", "power", "manufacturer", "unknown"],
)
def test_feature_names(code: int, name: str) -> None:
    assert feature_name(code) == name


@pytest.mark.parametrize(
    ("code", "value", "name"),
    [(0x60, 0x11, "HDMI-1"), (0x60, 0x0F, "DisplayPort-1"), (0x60, 0x1B, None),
     (0xD6, 0x04, "Off (soft)"), (0x14, 0x0305, "6500 K"), (0x8D, 0x01, "Mute"),
     (0x10, 0x05, None)],
    ids=["hdmi-1", "dp-1", "dell-usb-c-unnamed", "power-off", "preset-tolerance-in-mh",
         "mute", "continuous"],
)
def test_value_names_read_the_low_byte(code: int, value: int, name: str | None) -> None:
    assert value_name(code, value) == name
