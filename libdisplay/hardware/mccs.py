"""MCCS capability strings and the VCP feature vocabulary.

Owns two things: the parser for the string a display returns to a Capabilities Request
(DDC/CI 0xF3), and the names of VCP feature codes and of the values of the common ones.

The grammar follows ddcutil's parser and what real displays send (docs/ddc.md §6):
`( segment* )`, each segment `name(value)`, with the outer parentheses sometimes missing
(Apple) or doubled at the end (AOC), `vcp(...)` lists of hex codes that may run together
(`02030405`) and carry nested value lists (`F7(01(01) 02 09(01 02(00 03)))`), and names that
are sometimes glued to stray text (LG `type(lcd)UN880cmds(...)`, MSI
`G274QPF E2cmds(...)`, Asus `model LCDPB287 cmds(...)`).

`parse_capabilities` never raises: whatever it cannot read becomes a warning, and the rest
is still returned. A display's string is a hint, not a contract (it omits working
features and lists broken ones), so callers treat `Capabilities` as advice.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

_BLANKS: Final = " \t\r\n\0"
_DELIMITERS: Final = _BLANKS + "()"
_HEX_RE: Final = re.compile(r"[0-9A-Fa-f]+")
_VERSION_RE: Final = re.compile(r"(\d+)\.(\d+)")
_ESCAPE_RE: Final = re.compile(r"\\x([0-9A-Fa-f]{2})")
_WINDOW_RE: Final = re.compile(r"window(\d*)", re.IGNORECASE)

# Deeper value lists than this are skipped with a warning; real strings nest up to 5
# (Lenovo Legion 27U-10), and a bound keeps hostile input from exhausting the stack.
_MAX_DEPTH: Final = 16

_SCALAR_SEGMENTS: Final = ("prot", "type", "model", "mccs_ver")
# A segment name that ends in one of these after other text is read as stray text glued
# to the name (LG writes `UN880cmds(`); longest first so `vcpname` wins over `vcp`.
_GLUED_NAMES: Final = ("mccs_ver", "vcpname", "model", "prot", "type", "cmds", "vcp")


@dataclass(frozen=True, slots=True)
class VcpValue:
    """One value in a feature's list, with the nested list some displays attach to it."""

    value: int
    children: tuple[VcpValue, ...] = ()


@dataclass(frozen=True, slots=True)
class VcpFeature:
    """A feature code from `vcp(...)` and the values listed for it (empty: none listed)."""

    code: int
    values: tuple[VcpValue, ...] = ()

    @property
    def allowed(self) -> tuple[int, ...]:
        """The top-level values, which is what a Set VCP of this feature may use."""
        return tuple(v.value for v in self.values)


@dataclass(frozen=True, slots=True)
class VcpName:
    """An entry of `vcpname(...)`: a display's own name for a feature and its values."""

    code: int
    name: str | None
    value_names: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Segment:
    """A segment kept as written: `name(value)`."""

    name: str
    value: str


@dataclass(frozen=True, slots=True)
class Window:
    """A `windowN(...)` segment (MCCS 2.2 PIP/PBP windows); sizes are decimal pixels."""

    number: int
    kind: str | None = None
    area: tuple[int, ...] | None = None
    max_size: tuple[int, ...] | None = None
    min_size: tuple[int, ...] | None = None
    other: tuple[Segment, ...] = ()


@dataclass(frozen=True, slots=True)
class Capabilities:
    """A parsed capabilities string. `display_type` is the `type(...)` segment.

    `segment_names` lists every segment in order as written (after separating glued stray
    text); `stray_text` is text that belongs to no segment; `unknown` keeps segments this
    parser does not interpret (`mswhql`, `asset_eep`, `vcp_p02`, ...). An empty `warnings`
    means the string followed the grammar.
    """

    prot: str | None = None
    display_type: str | None = None
    model: str | None = None
    cmds: tuple[int, ...] = ()
    vcp: tuple[VcpFeature, ...] = ()
    mccs_ver: str | None = None
    windows: tuple[Window, ...] = ()
    vcp_names: tuple[VcpName, ...] = ()
    unknown: tuple[Segment, ...] = ()
    segment_names: tuple[str, ...] = ()
    stray_text: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def mccs_version(self) -> tuple[int, int] | None:
        """`mccs_ver` as (major, minor), or None when absent or unreadable."""
        match = _VERSION_RE.fullmatch(self.mccs_ver or "")
        return (int(match.group(1)), int(match.group(2))) if match else None

    def feature(self, code: int) -> VcpFeature | None:
        """The first `vcp(...)` entry for `code`."""
        return next((f for f in self.vcp if f.code == code), None)


def parse_capabilities(text: str | bytes) -> Capabilities:
    """Parse a capabilities string; bytes are read as Latin-1 so that no byte is lost."""
    source = text.decode("latin-1") if isinstance(text, bytes) else text
    return _Parser(source).parse()


class _Parser:
    """One parse: the text, its parenthesis matches, and what has been found so far."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.close = _match_parens(text)
        self.warnings: list[str] = []
        self.scalars: dict[str, str] = {}
        self.cmds: list[int] = []
        self.vcp: list[VcpFeature] = []
        self.windows: list[Window] = []
        self.vcp_names: list[VcpName] = []
        self.unknown: list[Segment] = []
        self.names: list[str] = []
        self.stray: list[str] = []

    def warn(self, offset: int, message: str) -> None:
        self.warnings.append(f"offset {offset}: {message}")

    def parse(self) -> Capabilities:
        text = self.text
        start = _skip_blanks(text, 0, len(text))
        if start == len(text):
            self.warnings.append("empty capabilities string")
        elif text[start] == "(":
            self.parse_enclosed(start)
        else:
            self.parse_body(start, len(text))
        return Capabilities(
            prot=self.scalars.get("prot"),
            display_type=self.scalars.get("type"),
            model=self.scalars.get("model"),
            cmds=tuple(self.cmds),
            vcp=tuple(self.vcp),
            mccs_ver=self.scalars.get("mccs_ver"),
            windows=tuple(self.windows),
            vcp_names=tuple(self.vcp_names),
            unknown=tuple(self.unknown),
            segment_names=tuple(self.names),
            stray_text=tuple(self.stray),
            warnings=tuple(self.warnings),
        )

    def parse_enclosed(self, start: int) -> None:
        """The usual form: the whole string in one pair of parentheses."""
        text = self.text
        end = self.close[start]
        if end < 0:
            self.warn(start, "the opening '(' is never closed (truncated string?)")
            self.parse_body(start + 1, len(text))
            return
        self.parse_body(start + 1, end)
        tail = text[end + 1 :].strip(_BLANKS)
        if not tail:
            return
        if not tail.strip(")" + _BLANKS):
            self.warn(end + 1, f"{tail.count(')')} extra ')' after the closing parenthesis")
        else:
            self.warn(end + 1, "text after the closing parenthesis")
            self.parse_body(end + 1, len(text))

    def parse_body(self, start: int, end: int) -> None:
        for name, name_at, value_start, value_end in self.segments(start, end, top=True):
            self.names.append(name)
            self.interpret(name, name_at, value_start, value_end)

    def segments(self, start: int, end: int, *, top: bool) -> list[tuple[str, int, int, int]]:
        """Split `name(value) ...` into (name, offset, value start, value end).

        Words not followed by '(' are stray text: recorded at the top level, warned about
        everywhere.
        """
        text = self.text
        found: list[tuple[str, int, int, int]] = []
        stray_from = -1
        i = start
        while i < end:
            char = text[i]
            if char in _BLANKS:
                i += 1
            elif char in "()":
                if stray_from >= 0:
                    self.stray_found(stray_from, text[stray_from:i].strip(_BLANKS), "", top=top)
                    stray_from = -1
                if char == ")":
                    self.warn(i, "unbalanced ')'")
                    i += 1
                else:
                    self.warn(i, "parenthesised value without a segment name")
                    i = self.closing(i, end) + 1
            else:
                word_end = _word_end(text, i, end)
                after = _skip_blanks(text, word_end, end)
                if after < end and text[after] == "(":
                    prefix, name = _unglue(text[i:word_end])
                    pieces = [text[stray_from:i].strip(_BLANKS)] if stray_from >= 0 else []
                    self.stray_found(i, " ".join(p for p in [*pieces, prefix] if p), name, top=top)
                    stray_from = -1
                    close = self.closing(after, end)
                    if close == end:
                        self.warn(after, f"segment {name!r} has no closing ')' (truncated string?)")
                    found.append((name, i + len(prefix), after + 1, close))
                    i = close + 1
                else:
                    if stray_from < 0:
                        stray_from = i
                    i = after
        if stray_from >= 0:
            self.stray_found(stray_from, text[stray_from:end].strip(_BLANKS), "", top=top)
        return found

    def stray_found(self, offset: int, stray: str, before: str, *, top: bool) -> None:
        if not stray:
            return
        where = f" before segment {before!r}" if before else ""
        self.warn(offset, f"stray text {stray!r}{where}")
        if top:
            self.stray.append(stray)

    def closing(self, open_at: int, end: int) -> int:
        """The ')' matching the '(' at `open_at`, or `end` when it is missing there."""
        close = self.close[open_at]
        return close if 0 <= close < end else end

    def interpret(self, name: str, name_at: int, start: int, end: int) -> None:
        key = name.lower()
        raw = self.text[start:end]
        window = _WINDOW_RE.fullmatch(name)
        if key in _SCALAR_SEGMENTS:
            self.scalar(key, name_at, raw.strip(_BLANKS))
        elif key == "cmds":
            # Lists in cmds are not allowed; starting at the depth bound skips them.
            listed = self.values(start, end, depth=_MAX_DEPTH, what="cmds")
            self.cmds.extend(v.value for v in listed)
        elif key == "vcp":
            if any(n.lower() == "vcp" for n in self.names[:-1]):
                self.warn(name_at, "a second vcp segment; its features are added to the first")
            self.add_features(start, end)
        elif key == "vcpname":
            self.vcp_names.extend(self.names_list(start, end))
        elif window is not None:
            self.windows.append(self.window(int(window.group(1) or 0), start, end))
        else:
            self.unknown.append(Segment(name, raw))

    def scalar(self, key: str, offset: int, value: str) -> None:
        if key in self.scalars:
            self.warn(offset, f"repeated segment {key!r}; the first value is kept")
            return
        if key == "mccs_ver" and not _VERSION_RE.fullmatch(value):
            self.warn(offset, f"mccs_ver {value!r} is not MAJOR.MINOR")
        self.scalars[key] = value

    def add_features(self, start: int, end: int) -> None:
        seen = {f.code for f in self.vcp}
        for item in self.values(start, end, depth=0, what="vcp"):
            if item.value in seen:
                self.warn(start, f"vcp lists code {item.value:02X} more than once")
            seen.add(item.value)
            self.vcp.append(VcpFeature(item.value, item.children))

    def values(self, start: int, end: int, *, depth: int, what: str) -> tuple[VcpValue, ...]:
        """Hex bytes, each optionally followed by a parenthesised list of its own.

        Bytes may run together (`0203(10 00)04`): a run of hex digits is read in pairs and
        a following list belongs to the last pair.
        """
        text = self.text
        items: list[VcpValue] = []
        can_attach = False
        i = start
        while i < end:
            char = text[i]
            if char in _BLANKS:
                i += 1
                continue
            if char == ")":
                self.warn(i, f"unbalanced ')' in {what}")
                i += 1
                can_attach = False
                continue
            if char == "(":
                close = self.closing(i, end)
                if depth >= _MAX_DEPTH:
                    self.warn(i, f"value list in {what} nested too deep or not allowed; skipped")
                elif not can_attach:
                    self.warn(i, f"value list in {what} does not follow a hex code; skipped")
                else:
                    children = self.values(i + 1, close, depth=depth + 1, what=what)
                    items[-1] = VcpValue(items[-1].value, children)
                if close == end:
                    self.warn(i, f"value list in {what} has no closing ')'")
                can_attach = False
                i = close + 1
                continue
            word_end = _word_end(text, i, end)
            codes = self.hex_bytes(i, text[i:word_end], what)
            items.extend(VcpValue(code) for code in codes)
            can_attach = bool(codes) and len(text[i:word_end]) % 2 == 0
            i = word_end
        return tuple(items)

    def hex_bytes(self, offset: int, word: str, what: str) -> list[int]:
        if not _HEX_RE.fullmatch(word):
            self.warn(offset, f"{word!r} in {what} is not hex")
            return []
        if len(word) % 2:
            self.warn(offset, f"{word!r} in {what} has an odd number of hex digits; "
                      f"the last one is dropped")
        return [int(word[k : k + 2], 16) for k in range(0, len(word) - 1, 2)]

    def names_list(self, start: int, end: int) -> list[VcpName]:
        """`vcpname(10(Brightness) 14((9300 6500)) 80(Do\\x20this(On Off)))`."""
        text = self.text
        found: list[VcpName] = []
        for name, name_at, value_start, value_end in self.segments(start, end, top=False):
            codes = self.hex_bytes(name_at, name, "vcpname")
            if len(codes) != 1:
                self.warn(name_at, f"vcpname entry {name!r} is not one feature code")
                continue
            inner = text.find("(", value_start, value_end)
            label = text[value_start : value_end if inner < 0 else inner].strip(_BLANKS)
            value_names: tuple[str, ...] = ()
            if inner >= 0:
                close = self.closing(inner, value_end)
                value_names = tuple(_unescape(w) for w in text[inner + 1 : close].split())
            found.append(VcpName(codes[0], _unescape(label) or None, value_names))
        return found

    def window(self, number: int, start: int, end: int) -> Window:
        """`window1(type(PIP) area(25 25 1895 1175) max(640 480) min(10 10) window(10))`."""
        fields: dict[str, tuple[int, ...] | None] = {}
        kind: str | None = None
        other: list[Segment] = []
        for name, name_at, value_start, value_end in self.segments(start, end, top=False):
            value = self.text[value_start:value_end]
            key = name.lower()
            if key == "type":
                kind = value.strip(_BLANKS)
            elif key in ("area", "max", "min"):
                fields[key] = self.decimals(name_at, name, value)
            else:
                other.append(Segment(name, value))
        return Window(
            number=number,
            kind=kind,
            area=fields.get("area"),
            max_size=fields.get("max"),
            min_size=fields.get("min"),
            other=tuple(other),
        )

    def decimals(self, offset: int, name: str, value: str) -> tuple[int, ...] | None:
        words = value.split()
        if not words or not all(w.isdecimal() for w in words):
            self.warn(offset, f"window {name}({value}) is not a list of decimal numbers")
            return None
        return tuple(int(w) for w in words)


def _match_parens(text: str) -> list[int]:
    """For every '(' the index of its ')', -1 when unmatched (one pass, no recursion)."""
    close = [-1] * len(text)
    stack: list[int] = []
    for i, char in enumerate(text):
        if char == "(":
            stack.append(i)
        elif char == ")" and stack:
            close[stack.pop()] = i
    return close


def _skip_blanks(text: str, i: int, end: int) -> int:
    while i < end and text[i] in _BLANKS:
        i += 1
    return i


def _word_end(text: str, i: int, end: int) -> int:
    while i < end and text[i] not in _DELIMITERS:
        i += 1
    return i


def _unglue(word: str) -> tuple[str, str]:
    """Split `UN880cmds` into stray text `UN880` and the segment name `cmds`."""
    lower = word.lower()
    if lower in _GLUED_NAMES or _WINDOW_RE.fullmatch(word):
        return "", word
    for name in _GLUED_NAMES:
        if lower.endswith(name):
            return word[: -len(name)], word[-len(name) :]
    return "", word


def _unescape(word: str) -> str:
    """The Access.bus `\\xHH` escape (a blank is written `\\x20` inside names)."""
    return _ESCAPE_RE.sub(lambda m: chr(int(m.group(1), 16)), word)


# --- The VCP feature vocabulary -------------------------------------------------------

BRIGHTNESS: Final = 0x10
CONTRAST: Final = 0x12
COLOR_PRESET: Final = 0x14
INPUT_SOURCE: Final = 0x60
AUDIO_VOLUME: Final = 0x62
AUDIO_MUTE: Final = 0x8D
POWER_MODE: Final = 0xD6
VCP_VERSION: Final = 0xDF


def _table(text: str) -> Mapping[int, str]:
    rows = (line.split(" ", 1) for line in text.strip().splitlines())
    return MappingProxyType({int(code, 16): name for code, name in rows})


# MCCS 2.x names, one per code, from ddcutil's vcp_code_table (docs/ddc.md §5).
FEATURE_NAMES: Final = _table("""
01 Degauss
02 New control value
03 Soft controls
04 Restore factory defaults
05 Restore factory brightness/contrast defaults
06 Restore factory geometry defaults
08 Restore color defaults
0A Restore factory TV defaults
0B Color temperature increment
0C Color temperature request
0E Clock
10 Brightness
11 Flesh tone enhancement
12 Contrast
13 Backlight control
14 Select color preset
16 Video gain: Red
17 User color vision compensation
18 Video gain: Green
1A Video gain: Blue
1C Focus
1E Auto setup
1F Auto color setup
20 Horizontal Position
22 Horizontal Size
24 Horizontal Pincushion
26 Horizontal Pincushion Balance
28 Horizontal Convergence
29 Horizontal Convergence M/G
2A Horizontal Linearity
2C Horizontal Linearity Balance
2E Gray scale expansion
30 Vertical Position
32 Vertical Size
34 Vertical Pincushion
36 Vertical Pincushion Balance
38 Vertical Convergence
39 Vertical Convergence M/G
3A Vertical Linearity
3C Vertical Linearity Balance
3E Clock phase
40 Key Balance
41 Vertical Parallelogram
42 Horizontal Trapezoid
43 Vertical Trapezoid
44 Tilt (rotation)
46 Top Corner
48 Top Corner Balance
4A Bottom Corner
4C Bottom Corner Balance
52 Active control
54 Performance Preservation
56 Horizontal Moire
58 Vertical Moire
59 6 axis saturation: Red
5A 6 axis saturation: Yellow
5B 6 axis saturation: Green
5C 6 axis saturation: Cyan
5D 6 axis saturation: Blue
5E 6 axis saturation: Magenta
60 Input Source
62 Audio speaker volume
63 Speaker Select
64 Audio: Microphone Volume
66 Ambient light sensor
6B Backlight Level: White
6C Video black level: Red
6D Backlight Level: Red
6E Video black level: Green
6F Backlight Level: Green
70 Video black level: Blue
71 Backlight Level: Blue
72 Gamma
73 LUT Size
74 Single point LUT operation
75 Block LUT operation
76 Remote Procedure Call
78 EDID operation
7A Adjust Focal Plane
7C Adjust Zoom
7E Trapezoid
80 Keystone
82 Horizontal Mirror (Flip)
84 Vertical Mirror (Flip)
86 Display Scaling
87 Sharpness
88 Velocity Scan Modulation
8A Color Saturation
8B TV Channel Up/Down
8C TV Sharpness
8D Audio Mute
8E TV Contrast
8F Audio Treble
90 Hue
91 Audio Bass
92 TV Black level/Brightness
93 Audio Balance L/R
94 Audio Stereo Mode
95 Window Position(TL_X)
96 Window Position(TL_Y)
97 Window Position(BR_X)
98 Window Position(BR_Y)
99 Window control on/off
9A Window background
9B 6 axis hue control: Red
9C 6 axis hue control: Yellow
9D 6 axis hue control: Green
9E 6 axis hue control: Cyan
9F 6 axis hue control: Blue
A0 6 axis hue control: Magenta
A2 Auto setup on/off
A4 Window mask control
A5 Change the selected window
AA Screen Orientation
AC Horizontal frequency
AE Vertical frequency
B0 Settings
B2 Flat panel sub-pixel layout
B4 Source Timing Mode
B6 Display technology type
B7 Monitor status
B8 Packet count
B9 Monitor X origin
BA Monitor Y origin
BB Header error count
BC Body CRC error count
BD Client ID
BE Link control
C0 Display usage time
C2 Display descriptor length
C3 Transmit display descriptor
C4 Enable display of 'display descriptor'
C6 Application enable key
C8 Display controller type
C9 Display firmware level
CA OSD
CC OSD Language
CD Status Indicators
CE Auxiliary display size
CF Auxiliary display data
D0 Output select
D2 Asset Tag
D4 Stereo video mode
D6 Power mode
D7 Auxiliary power output
DA Scan format
DB Image Mode
DC Display Mode
DE Operation Mode
DF VCP Version
""")

# Values of the non-continuous features a claim or a person sets, read from SL
# (docs/ddc.md §5; ddcutil's value tables, monitorcontrol's enums agree).
INPUT_SOURCES: Final = _table("""
01 VGA-1
02 VGA-2
03 DVI-1
04 DVI-2
05 Composite-1
06 Composite-2
07 S-Video-1
08 S-Video-2
09 Tuner-1
0A Tuner-2
0B Tuner-3
0C Component-1
0D Component-2
0E Component-3
0F DisplayPort-1
10 DisplayPort-2
11 HDMI-1
12 HDMI-2
""")

POWER_MODES: Final = _table("""
01 On
02 Standby
03 Suspend
04 Off (soft)
05 Off (hard)
""")

COLOR_PRESETS: Final = _table("""
01 sRGB
02 Display Native
03 4000 K
04 5000 K
05 6500 K
06 7500 K
07 8200 K
08 9300 K
09 10000 K
0A 11500 K
0B User 1
0C User 2
0D User 3
""")

AUDIO_MUTE_STATES: Final = _table("""
01 Mute
02 Unmute
""")

NEW_CONTROL_VALUES: Final = _table("""
01 No new control values
02 New control values saved
FF No user controls
""")

VALUE_NAMES: Final[Mapping[int, Mapping[int, str]]] = MappingProxyType({
    0x02: NEW_CONTROL_VALUES,
    COLOR_PRESET: COLOR_PRESETS,
    INPUT_SOURCE: INPUT_SOURCES,
    AUDIO_MUTE: AUDIO_MUTE_STATES,
    POWER_MODE: POWER_MODES,
})


def feature_name(code: int) -> str:
    """The MCCS name of a feature code; E0-FF are the manufacturer's own."""
    if code in FEATURE_NAMES:
        return FEATURE_NAMES[code]
    if 0xE0 <= code <= 0xFF:
        return f"Manufacturer specific 0x{code:02X}"
    return f"Unknown feature 0x{code:02X}"


def value_name(code: int, value: int) -> str | None:
    """The name of a non-continuous feature's value (its low byte, SL), if MCCS gives one."""
    return VALUE_NAMES.get(code, {}).get(value & 0xFF)
