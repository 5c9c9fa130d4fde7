"""EDID decoding: the base block, CTA-861 and DisplayID extensions, and the modes a monitor offers.

`decode_edid(data)` turns raw EDID bytes into an `Edid`: the monitor's identity (vendor PNP id,
product code, serial number and serial string), its name, version, manufacture date, size and
features, and every video timing the EDID lists, in the order edid-decode prints them.
Refreshes are kept as edid-decode prints them (six decimals, field rate for interlaced modes)
so that this decoder can be checked line by line against edid-decode; `Edid.modes` turns them
into deduplicated `libdisplay.hardware.modes.Mode` values, and `Edid.preferred_mode` is the first
detailed timing of block 0 (falling back to the other blocks' preferred or detailed timings).

Input that is not an EDID at all raises a subclass of `EdidError` (empty, length not a multiple
of 128, no header). Damage that real i2c reads produce - a bad checksum, an extension count
that does not match the blocks present (wrap-around dumps that repeat block 0) - is reported as
flags on the result instead. Any other malformed content still decodes, or raises `EdidError`.

`python3 -m libdisplay.hardware.edid [--json] FILE...` prints a summary (or one JSON array whose
objects
use the keys of edid-decode's oracle in the shared test data); only the standard library is used.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from libdisplay.hardware.modes import Mode

EDID_BLOCK_SIZE: Final = 128
_HEADER: Final = b"\x00\xff\xff\xff\xff\xff\xff\x00"

# (width, height, refresh in µHz as edid-decode prints it, interlaced)
_Row = tuple[int, int, int, bool]


class EdidError(Exception):
    """Bytes that cannot be decoded as an EDID."""


class EdidEmptyError(EdidError):
    """No bytes at all, or nothing but zero bytes (no monitor answered)."""

    def __init__(self, length: int) -> None:
        super().__init__(f"EDID is empty ({length} bytes, all zero)" if length else "EDID is empty")
        self.length = length


class EdidLengthError(EdidError):
    """A length that is not a whole number of 128-byte blocks."""

    def __init__(self, length: int) -> None:
        super().__init__(f"EDID length {length} is not a multiple of {EDID_BLOCK_SIZE}")
        self.length = length


class EdidHeaderError(EdidError):
    """Block 0 does not start with the fixed EDID header 00 ff ff ff ff ff ff 00."""

    def __init__(self, first_bytes: bytes) -> None:
        super().__init__(f"no EDID header: block 0 starts with {first_bytes.hex(' ')}")
        self.first_bytes = first_bytes

# VESA DMT ID -> (width, height, refresh in µHz, interlaced).
_DMTS: Final[dict[int, _Row]] = {
    0x01: (640, 350, 85079948, False),
    0x02: (640, 400, 85079948, False),
    0x03: (720, 400, 85038902, False),
    0x04: (640, 480, 59940476, False),
    0x05: (640, 480, 72808802, False),
    0x06: (640, 480, 75000000, False),
    0x07: (640, 480, 85008312, False),
    0x08: (800, 600, 56250000, False),
    0x09: (800, 600, 60316541, False),
    0x0a: (800, 600, 72187572, False),
    0x0b: (800, 600, 75000000, False),
    0x0c: (800, 600, 85061274, False),
    0x0d: (800, 600, 119971829, False),
    0x0e: (848, 480, 60000427, False),
    0x0f: (1024, 768, 86957532, True),
    0x10: (1024, 768, 60003840, False),
    0x11: (1024, 768, 70069359, False),
    0x12: (1024, 768, 75028582, False),
    0x13: (1024, 768, 84996690, False),
    0x14: (1024, 768, 119988531, False),
    0x15: (1152, 864, 75000000, False),
    0x16: (1280, 768, 59994726, False),
    0x17: (1280, 768, 59870228, False),
    0x18: (1280, 768, 74893062, False),
    0x19: (1280, 768, 84837055, False),
    0x1a: (1280, 768, 119798073, False),
    0x1b: (1280, 800, 59909545, False),
    0x1c: (1280, 800, 59810326, False),
    0x1d: (1280, 800, 74934142, False),
    0x1e: (1280, 800, 84879879, False),
    0x1f: (1280, 800, 119908501, False),
    0x20: (1280, 960, 60000000, False),
    0x21: (1280, 960, 85002473, False),
    0x22: (1280, 960, 119837758, False),
    0x23: (1280, 1024, 60019740, False),
    0x24: (1280, 1024, 75024675, False),
    0x25: (1280, 1024, 85024098, False),
    0x26: (1280, 1024, 119958231, False),
    0x27: (1360, 768, 60015162, False),
    0x28: (1360, 768, 119966660, False),
    0x29: (1400, 1050, 59947768, False),
    0x2a: (1400, 1050, 59978442, False),
    0x2b: (1400, 1050, 74866680, False),
    0x2c: (1400, 1050, 84959958, False),
    0x2d: (1400, 1050, 119904077, False),
    0x2e: (1440, 900, 59901458, False),
    0x2f: (1440, 900, 59887445, False),
    0x30: (1440, 900, 74984427, False),
    0x31: (1440, 900, 84842118, False),
    0x32: (1440, 900, 119851784, False),
    0x33: (1600, 1200, 60000000, False),
    0x34: (1600, 1200, 65000000, False),
    0x35: (1600, 1200, 70000000, False),
    0x36: (1600, 1200, 75000000, False),
    0x37: (1600, 1200, 85000000, False),
    0x38: (1600, 1200, 119917209, False),
    0x39: (1680, 1050, 59883253, False),
    0x3a: (1680, 1050, 59954250, False),
    0x3b: (1680, 1050, 74892027, False),
    0x3c: (1680, 1050, 84940512, False),
    0x3d: (1680, 1050, 119985533, False),
    0x3e: (1792, 1344, 59999789, False),
    0x3f: (1792, 1344, 74996724, False),
    0x40: (1792, 1344, 119973532, False),
    0x41: (1856, 1392, 59995184, False),
    0x42: (1856, 1392, 75000000, False),
    0x43: (1856, 1392, 120051132, False),
    0x44: (1920, 1200, 59950171, False),
    0x45: (1920, 1200, 59884600, False),
    0x46: (1920, 1200, 74930340, False),
    0x47: (1920, 1200, 84931608, False),
    0x48: (1920, 1200, 119908612, False),
    0x49: (1920, 1440, 60000000, False),
    0x4a: (1920, 1440, 75000000, False),
    0x4b: (1920, 1440, 120113390, False),
    0x4c: (2560, 1600, 59971589, False),
    0x4d: (2560, 1600, 59986588, False),
    0x4e: (2560, 1600, 74972193, False),
    0x4f: (2560, 1600, 84950918, False),
    0x50: (2560, 1600, 119962758, False),
    0x51: (1366, 768, 59789541, False),
    0x52: (1920, 1080, 60000000, False),
    0x53: (1600, 900, 60000000, False),
    0x54: (2048, 1152, 60000000, False),
    0x55: (1280, 720, 60000000, False),
    0x56: (1366, 768, 60000000, False),
    0x57: (4096, 2160, 59999966, False),
    0x58: (4096, 2160, 59940046, False),
}
# Standard Timing code (byte 1 << 8 | byte 2) -> the DMT it names exactly.
_DMT_BY_STD_CODE: Final[dict[int, int]] = {
    0x3119: 0x02, 0x3140: 0x04, 0x314c: 0x05, 0x314f: 0x06, 0x3159: 0x07, 0x4540: 0x09,
    0x454c: 0x0a, 0x454f: 0x0b, 0x4559: 0x0c, 0x6140: 0x10, 0x614c: 0x11, 0x614f: 0x12,
    0x6159: 0x13, 0x714f: 0x15, 0x8100: 0x1c, 0x810f: 0x1d, 0x8119: 0x1e, 0x8140: 0x20,
    0x8159: 0x21, 0x8180: 0x23, 0x818f: 0x24, 0x8199: 0x25, 0x81c0: 0x55, 0x9040: 0x2a,
    0x904f: 0x2b, 0x9059: 0x2c, 0x9500: 0x2f, 0x950f: 0x30, 0x9519: 0x31, 0xa940: 0x33,
    0xa945: 0x34, 0xa94a: 0x35, 0xa94f: 0x36, 0xa959: 0x37, 0xa9c0: 0x53, 0xb300: 0x3a,
    0xb30f: 0x3b, 0xb319: 0x3c, 0xc140: 0x3e, 0xc14f: 0x3f, 0xc940: 0x41, 0xc94f: 0x42,
    0xd100: 0x45, 0xd10f: 0x46, 0xd119: 0x47, 0xd140: 0x49, 0xd14f: 0x4a, 0xd1c0: 0x52,
    0xe1c0: 0x54,
}
# CTA-861 VIC -> (width, height, refresh in µHz, interlaced); VICs 128-192 are reserved.
VIC_TIMINGS: Final[dict[int, _Row]] = {
    1: (640, 480, 59940476, False),
    2: (720, 480, 59940060, False),
    3: (720, 480, 59940060, False),
    4: (1280, 720, 60000000, False),
    5: (1920, 1080, 60000000, True),
    6: (1440, 480, 59940060, True),
    7: (1440, 480, 59940060, True),
    8: (1440, 240, 60054449, False),
    9: (1440, 240, 60054449, False),
    10: (2880, 480, 59940060, True),
    11: (2880, 480, 59940060, True),
    12: (2880, 240, 60054449, False),
    13: (2880, 240, 60054449, False),
    14: (1440, 480, 59940060, False),
    15: (1440, 480, 59940060, False),
    16: (1920, 1080, 60000000, False),
    17: (720, 576, 50000000, False),
    18: (720, 576, 50000000, False),
    19: (1280, 720, 50000000, False),
    20: (1920, 1080, 50000000, True),
    21: (1440, 576, 50000000, True),
    22: (1440, 576, 50000000, True),
    23: (1440, 288, 50080128, False),
    24: (1440, 288, 50080128, False),
    25: (2880, 576, 50000000, True),
    26: (2880, 576, 50000000, True),
    27: (2880, 288, 50080128, False),
    28: (2880, 288, 50080128, False),
    29: (1440, 576, 50000000, False),
    30: (1440, 576, 50000000, False),
    31: (1920, 1080, 50000000, False),
    32: (1920, 1080, 24000000, False),
    33: (1920, 1080, 25000000, False),
    34: (1920, 1080, 30000000, False),
    35: (2880, 480, 59940060, False),
    36: (2880, 480, 59940060, False),
    37: (2880, 576, 50000000, False),
    38: (2880, 576, 50000000, False),
    39: (1920, 1080, 50000000, True),
    40: (1920, 1080, 100000000, True),
    41: (1280, 720, 100000000, False),
    42: (720, 576, 100000000, False),
    43: (720, 576, 100000000, False),
    44: (1440, 576, 100000000, True),
    45: (1440, 576, 100000000, True),
    46: (1920, 1080, 120000000, True),
    47: (1280, 720, 120000000, False),
    48: (720, 480, 119880120, False),
    49: (720, 480, 119880120, False),
    50: (1440, 480, 119880120, True),
    51: (1440, 480, 119880120, True),
    52: (720, 576, 200000000, False),
    53: (720, 576, 200000000, False),
    54: (1440, 576, 200000000, True),
    55: (1440, 576, 200000000, True),
    56: (720, 480, 239760240, False),
    57: (720, 480, 239760240, False),
    58: (1440, 480, 239760240, True),
    59: (1440, 480, 239760240, True),
    60: (1280, 720, 24000000, False),
    61: (1280, 720, 25000000, False),
    62: (1280, 720, 30000000, False),
    63: (1920, 1080, 120000000, False),
    64: (1920, 1080, 100000000, False),
    65: (1280, 720, 24000000, False),
    66: (1280, 720, 25000000, False),
    67: (1280, 720, 30000000, False),
    68: (1280, 720, 50000000, False),
    69: (1280, 720, 60000000, False),
    70: (1280, 720, 100000000, False),
    71: (1280, 720, 120000000, False),
    72: (1920, 1080, 24000000, False),
    73: (1920, 1080, 25000000, False),
    74: (1920, 1080, 30000000, False),
    75: (1920, 1080, 50000000, False),
    76: (1920, 1080, 60000000, False),
    77: (1920, 1080, 100000000, False),
    78: (1920, 1080, 120000000, False),
    79: (1680, 720, 24000000, False),
    80: (1680, 720, 25000000, False),
    81: (1680, 720, 30000000, False),
    82: (1680, 720, 50000000, False),
    83: (1680, 720, 60000000, False),
    84: (1680, 720, 100000000, False),
    85: (1680, 720, 120000000, False),
    86: (2560, 1080, 24000000, False),
    87: (2560, 1080, 25000000, False),
    88: (2560, 1080, 30000000, False),
    89: (2560, 1080, 50000000, False),
    90: (2560, 1080, 60000000, False),
    91: (2560, 1080, 100000000, False),
    92: (2560, 1080, 120000000, False),
    93: (3840, 2160, 24000000, False),
    94: (3840, 2160, 25000000, False),
    95: (3840, 2160, 30000000, False),
    96: (3840, 2160, 50000000, False),
    97: (3840, 2160, 60000000, False),
    98: (4096, 2160, 24000000, False),
    99: (4096, 2160, 25000000, False),
    100: (4096, 2160, 30000000, False),
    101: (4096, 2160, 50000000, False),
    102: (4096, 2160, 60000000, False),
    103: (3840, 2160, 24000000, False),
    104: (3840, 2160, 25000000, False),
    105: (3840, 2160, 30000000, False),
    106: (3840, 2160, 50000000, False),
    107: (3840, 2160, 60000000, False),
    108: (1280, 720, 48000000, False),
    109: (1280, 720, 48000000, False),
    110: (1680, 720, 48000000, False),
    111: (1920, 1080, 48000000, False),
    112: (1920, 1080, 48000000, False),
    113: (2560, 1080, 48000000, False),
    114: (3840, 2160, 48000000, False),
    115: (4096, 2160, 48000000, False),
    116: (3840, 2160, 48000000, False),
    117: (3840, 2160, 100000000, False),
    118: (3840, 2160, 120000000, False),
    119: (3840, 2160, 100000000, False),
    120: (3840, 2160, 120000000, False),
    121: (5120, 2160, 24000000, False),
    122: (5120, 2160, 25000000, False),
    123: (5120, 2160, 30000000, False),
    124: (5120, 2160, 48000000, False),
    125: (5120, 2160, 50000000, False),
    126: (5120, 2160, 60000000, False),
    127: (5120, 2160, 100000000, False),
    193: (5120, 2160, 120000000, False),
    194: (7680, 4320, 24000000, False),
    195: (7680, 4320, 25000000, False),
    196: (7680, 4320, 30000000, False),
    197: (7680, 4320, 48000000, False),
    198: (7680, 4320, 50000000, False),
    199: (7680, 4320, 60000000, False),
    200: (7680, 4320, 100000000, False),
    201: (7680, 4320, 120000000, False),
    202: (7680, 4320, 24000000, False),
    203: (7680, 4320, 25000000, False),
    204: (7680, 4320, 30000000, False),
    205: (7680, 4320, 48000000, False),
    206: (7680, 4320, 50000000, False),
    207: (7680, 4320, 60000000, False),
    208: (7680, 4320, 100000000, False),
    209: (7680, 4320, 120000000, False),
    210: (10240, 4320, 24000000, False),
    211: (10240, 4320, 25000000, False),
    212: (10240, 4320, 30000000, False),
    213: (10240, 4320, 48000000, False),
    214: (10240, 4320, 50000000, False),
    215: (10240, 4320, 60000000, False),
    216: (10240, 4320, 100000000, False),
    217: (10240, 4320, 120000000, False),
    218: (4096, 2160, 100000000, False),
    219: (4096, 2160, 120000000, False),
}

# HDMI VIC 1-4 (HDMI 1.4 VSDB) -> the CTA-861 VIC with the same timing.
_HDMI_VIC_TO_VIC: Final = (95, 94, 93, 98)

# Established Timings I & II (bytes 0x23-0x25, most significant bit first): a DMT ID, or the
# label and timing of the IBM/Apple modes that have no DMT ID.
_ESTABLISHED_I_II: Final[tuple[int | tuple[str, _Row], ...]] = (
    ("IBM", (720, 400, 70081663, False)),
    ("IBM", (720, 400, 87849542, False)),
    0x04,
    ("Apple", (640, 480, 66666667, False)),
    0x05, 0x06, 0x08, 0x09, 0x0a, 0x0b,
    ("Apple", (832, 624, 74551266, False)),
    0x0f, 0x10, 0x11, 0x12, 0x24,
    ("Apple", (1152, 870, 75061550, False)),
)

# Established Timings III descriptor (0xF7), bytes 6-11 most significant bit first -> DMT ID.
_ESTABLISHED_III: Final = (
    0x01, 0x02, 0x03, 0x07, 0x0e, 0x0c, 0x13, 0x15, 0x16, 0x17, 0x18, 0x19, 0x20, 0x21, 0x23,
    0x25, 0x27, 0x2e, 0x2f, 0x30, 0x31, 0x29, 0x2a, 0x2b, 0x2c, 0x39, 0x3a, 0x3b, 0x3c, 0x33,
    0x34, 0x35, 0x36, 0x37, 0x3e, 0x3f, 0x41, 0x42, 0x44, 0x45, 0x46, 0x47, 0x49, 0x4a,
)

_INTERFACES_1_4: Final = ("undefined", "DVI", "HDMI-a", "HDMI-b", "MDDI", "DisplayPort")
_HDR_EOTFS: Final = ("SDR", "HDR", "SMPTE ST 2084", "HLG", "reserved 4", "reserved 5")
_OUI_HDMI: Final = 0x000C03
_OUI_HDMI_FORUM: Final = 0xC45DD8
_EXTENSION_NAMES: Final = {
    0x02: "CTA-861",
    0x10: "VTB-EXT",
    0x40: "DI-EXT",
    0x50: "LS-EXT",
    0x70: "DisplayID",
    0xF0: "Block Map",
    0xFF: "Manufacturer",
}


@dataclass(frozen=True, slots=True)
class Timing:
    """One video timing as edid-decode lists it: size, refresh (µHz, six decimals), origin."""

    width: int
    height: int
    refresh_uhz: int
    interlaced: bool
    source: str
    block: int

    @property
    def refresh_hz(self) -> float:
        return self.refresh_uhz / 1_000_000

    @property
    def mode(self) -> Mode:
        return Mode(self.width, self.height, (self.refresh_uhz + 500) // 1000, self.interlaced)


@dataclass(frozen=True, slots=True)
class MonitorIdentity:
    """What tells one monitor from another: vendor, product and serial (number and string).

    `str()` gives a stable name such as `DEL-411A-73K0275ACK7L`: PNP id, product code in hex,
    then the serial string (or, without one, the serial number), in `[A-Za-z0-9._-]` only.
    """

    manufacturer: str
    product_code: int
    serial_number: int = 0
    serial_string: str | None = None

    def __str__(self) -> str:
        # The serial string is what vendors print on the label; the number is the fallback.
        serial = (self.serial_string or "").strip() or str(self.serial_number)
        text = f"{self.manufacturer}-{self.product_code:04X}-{serial}"
        return "".join(c if c.isalnum() and c.isascii() or c in "-._" else "_" for c in text)


@dataclass(frozen=True, slots=True)
class Features:
    """Basic display features (byte 0x18) and gamma (byte 0x17)."""

    gamma: float | None
    dpms_standby: bool
    dpms_suspend: bool
    dpms_off: bool
    srgb_default: bool
    preferred_timing_native: bool
    continuous_frequency: bool


@dataclass(frozen=True, slots=True)
class RangeLimits:
    """The Display Range Limits descriptor (0xFD)."""

    min_vertical_hz: int
    max_vertical_hz: int
    min_horizontal_khz: int
    max_horizontal_khz: int
    max_pixel_clock_mhz: int | None
    timing_class: str


@dataclass(frozen=True, slots=True)
class HdmiVsdb:
    """The HDMI 1.4 Vendor-Specific Data Block."""

    physical_address: str
    max_tmds_mhz: int | None
    hdmi_vics: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class HdmiForumVsdb:
    """The HDMI Forum VSDB (or SCDB) of HDMI 2.x sinks."""

    version: int
    max_tmds_mhz: int | None
    scdc_present: bool
    max_frl_rate: int


@dataclass(frozen=True, slots=True)
class HdrStaticMetadata:
    """The HDR Static Metadata Data Block: transfer functions and luminance (cd/m²)."""

    eotfs: tuple[str, ...]
    max_luminance: float | None
    max_frame_average_luminance: float | None
    min_luminance: float | None


@dataclass(frozen=True, slots=True)
class CtaInfo:
    """What the CTA-861 extension blocks say, merged over all of them."""

    revision: int
    vics: tuple[int, ...]
    native_vics: tuple[int, ...]
    ycbcr420_only_vics: tuple[int, ...]
    ycbcr420_capable_vics: tuple[int, ...]
    hdmi: HdmiVsdb | None
    hdmi_forum: HdmiForumVsdb | None
    hdr: HdrStaticMetadata | None


@dataclass(frozen=True, slots=True)
class DisplayIdProduct:
    """A DisplayID Product Identification data block (0x00 in 1.x, 0x20 in 2.0)."""

    vendor: str
    product_code: int
    serial_number: int
    year: int
    week: int | None
    model_year: bool
    name: str


@dataclass(frozen=True, slots=True)
class DisplayIdInfo:
    """The DisplayID extension blocks: version and product identification."""

    version: str
    product: DisplayIdProduct | None


@dataclass(frozen=True, slots=True)
class Edid:
    """A decoded EDID. `timings` lists every timing in edid-decode's order, duplicates kept;
    lines edid-decode prints without a usable refresh (EDID 1.0/1.1 "Unknown" standard
    timings, zero-sized timings at "inf Hz") are left out. Identity and strings come from
    block 0 only."""

    identity: MonitorIdentity
    monitor_name: str | None
    alphanumeric_strings: tuple[str, ...]
    version: str
    digital: bool
    interface: str | None
    bits_per_color: int | None
    image_size_cm: tuple[int, int] | None
    aspect_ratio: str | None
    manufacture_week: int | None
    manufacture_year: int | None
    model_year: int | None
    features: Features
    range_limits: RangeLimits | None
    timings: tuple[Timing, ...]
    preferred: Timing | None
    extensions: tuple[str, ...]
    declared_extensions: int
    bad_checksum_blocks: tuple[int, ...]
    extension_count_mismatch: bool
    repeated_base_blocks: tuple[int, ...]
    cta: CtaInfo | None
    displayid: DisplayIdInfo | None

    @property
    def manufacturer(self) -> str:
        return self.identity.manufacturer

    @property
    def product_code(self) -> int:
        return self.identity.product_code

    @property
    def serial_number(self) -> int:
        return self.identity.serial_number

    @property
    def serial_string(self) -> str | None:
        return self.identity.serial_string

    @property
    def checksum_valid(self) -> bool:
        return not self.bad_checksum_blocks

    @property
    def unique_timings(self) -> tuple[Timing, ...]:
        """`timings` without repeats of the same size, scan and printed refresh."""
        seen: set[tuple[int, int, bool, int]] = set()
        unique = []
        for t in self.timings:
            key = (t.width, t.height, t.interlaced, t.refresh_uhz)
            if key not in seen:
                seen.add(key)
                unique.append(t)
        return tuple(unique)

    @property
    def modes(self) -> tuple[Mode, ...]:
        """Every mode the monitor offers, each once, in the order the EDID lists them."""
        return tuple(dict.fromkeys(t.mode for t in self.timings))

    @property
    def preferred_mode(self) -> Mode | None:
        return self.preferred.mode if self.preferred else None


# --- formula timings (GTF, CVT) as edid-decode computes them ---------------------------------


def _c_round(value: float) -> int:
    """C's round(): halves go away from zero (Python's round() goes to even)."""
    whole = math.floor(value)
    return whole + 1 if value - whole >= 0.5 else whole


def _gtf(hact: int, vact: int, refresh: float) -> tuple[int, int, int, int]:
    """VESA GTF default curve, progressive: (hact, pixel clock kHz, htotal, vtotal)."""
    h_pixels = _c_round(hact / 8.0) * 8.0
    h_period_est = ((1.0 / refresh) - 550.0 / 1000000.0) / (vact + 1.0) * 1000000.0
    v_sync_bp = _c_round(550.0 / h_period_est)
    total_v_lines = vact + v_sync_bp + 1.0
    v_field_rate_est = 1.0 / h_period_est / total_v_lines * 1000000.0
    h_period = h_period_est / (refresh / v_field_rate_est)
    duty = 30.0 - (300.0 * h_period / 1000.0)
    h_blank = _c_round(h_pixels * duty / (100.0 - duty) / 16.0) * 16.0
    total_pixels = h_pixels + h_blank
    pixclk_khz = _c_round(1000.0 * (total_pixels / h_period))
    return int(h_pixels), pixclk_khz, int(total_pixels), vact + v_sync_bp + 1


def _cvt_vsync(hact: int, vact: int) -> int:
    if vact * 4 // 3 == hact:
        return 4
    if vact * 16 // 9 == hact:
        return 5
    if vact * 16 // 10 == hact:
        return 6
    if vact % 4 == 0 and vact * 5 // 4 == hact:
        return 7
    if vact * 15 // 9 == hact:
        return 7
    return 10


@dataclass(frozen=True, slots=True)
class CvtTiming:
    """A progressive VESA CVT timing: pixel clock and porches around the active area."""

    pixel_clock_khz: int
    hfront: int
    hsync: int
    hback: int
    vfront: int
    vsync: int
    vback: int

    @property
    def hblank(self) -> int:
        return self.hfront + self.hsync + self.hback

    @property
    def vblank(self) -> int:
        return self.vfront + self.vsync + self.vback


def cvt_timing(hact: int, vact: int, refresh: float, *, rb: int = 0, alt: bool = False,
               rb3_hblank: int = 0, rb3_vblank_us: int = 460) -> CvtTiming:
    """VESA CVT for a progressive mode, computed the way edid-decode computes it.

    `rb` is 0 (standard blanking) or the reduced blanking version 1-3. `alt` asks for the
    1000/1001 video-optimised rate (RB2) or a 160-pixel blank (RB3); `rb3_hblank` and
    `rb3_vblank_us` set an RB3 blank of another width or duration.
    """
    cell = 1.0 if rb == 2 else 8.0
    h_pixels = math.floor(hact / cell) * cell
    clock_step = 0.001 if rb == 2 else 0.25
    h_sync = 32.0
    v_sync = 8 if rb >= 2 else _cvt_vsync(hact, vact)
    if rb == 0:
        h_period_est = ((1.0 / refresh) - 550.0 / 1000000.0) / (vact + 3 + 0.0) * 1000000.0
        v_sync_bp = max(math.floor(550.0 / h_period_est) + 1, v_sync + 7)
        v_blank = v_sync_bp + 3
        duty = max(30.0 - (300.0 * h_period_est / 1000.0), 20.0)
        h_blank = math.floor(h_pixels * duty / (100.0 - duty) / 16.0) * 16.0
        total_pixels = h_pixels + h_blank
        h_sync = math.floor(total_pixels * 0.08 / 8.0) * 8.0
        pixel_freq = math.floor((total_pixels / h_period_est) / clock_step) * clock_step
        hfront = int(h_blank / 2.0 - h_sync)
    else:
        if rb == 3:
            h_blank = float(rb3_hblank or (160 if alt else 80))
            min_vblank = float(rb3_vblank_us)
        else:
            h_blank = 160.0 if rb == 1 else 80.0
            min_vblank = 460.0
        v_fporch = 3 if rb == 1 else 1
        multiplier = 1000.0 / 1001.0 if rb == 2 and alt else 1.0
        h_period_est = ((1000000.0 / refresh) - min_vblank) / vact
        vbi_lines = math.floor(min_vblank / h_period_est) + 1
        v_bporch = 7 if rb == 1 else 6
        v_blank = max(vbi_lines, v_fporch + v_sync + v_bporch)
        v_sync_bp = v_blank - v_fporch if rb == 1 else v_sync + v_bporch
        total_pixels = h_blank + h_pixels
        freq = refresh * (v_blank + vact + 0.0) * total_pixels / 1000000.0 * multiplier
        # RB3 rounds the clock up so the refresh never falls below the one asked for.
        steps = math.ceil(freq / clock_step) if rb == 3 else math.floor(freq / clock_step)
        pixel_freq = steps * clock_step
        hfront = 8 if rb >= 2 else int(h_blank / 2.0 - h_sync)
    vback = v_sync_bp - v_sync
    return CvtTiming(
        pixel_clock_khz=_c_round(1000.0 * pixel_freq),
        hfront=hfront,
        hsync=int(h_sync),
        hback=int(h_blank) - hfront - int(h_sync),
        vfront=v_blank - vback - v_sync,
        vsync=v_sync,
        vback=vback,
    )


def _refresh_uhz(pixclk_khz: int, htotal: int, vtotal: float) -> int | None:
    """Refresh in µHz, rounded to six decimals exactly as printf("%.6f") does; None if 1/0."""
    denominator = htotal * vtotal
    if denominator == 0:
        return None
    whole, _, fraction = f"{pixclk_khz * 1000.0 / denominator:.6f}".partition(".")
    return int(whole) * 1_000_000 + int(fraction)


# --- the decoder ------------------------------------------------------------------------------

_MASK32: Final = 0xFFFFFFFF
_PADDING: Final = bytes(3 * EDID_BLOCK_SIZE)
_WINDOW: Final = 3 * EDID_BLOCK_SIZE


def _u16(b: bytes, i: int) -> int:
    return b[i] | b[i + 1] << 8


def _half(value: int) -> int:
    """C's int / 2: truncates toward zero."""
    return -(-value // 2) if value < 0 else value // 2


def _field_total(vact: int, vblank: int, vfp: int, vsync: int) -> float:
    """Lines per field of a DisplayID interlaced timing as edid-decode counts them: each
    porch halved on its own (back porch signed), the sum wrapped to 32 bits, plus half a line."""
    lines = vact // 2 + _half(vfp) + _half(vsync) + _half(vblank - vfp - vsync)
    return (lines & _MASK32) + 0.5


_PRINTABLE_PREFIX: Final = re.compile(rb"[\x20-\x7e]*")


def _edid_string(raw: bytes) -> str:
    """A descriptor string as edid-decode shows it: printable ASCII up to a newline or any
    other unprintable byte."""
    match = _PRINTABLE_PREFIX.match(raw)
    return match.group().decode("ascii") if match else ""


@functools.cache
def _manufacturer(b0: int, b1: int) -> str:
    return "".join(
        chr(v + 64) for v in ((b0 & 0x7C) >> 2, (b0 & 0x03) << 3 | (b1 & 0xE0) >> 5, b1 & 0x1F)
    )


@dataclass(frozen=True, slots=True)
class _BaseFacts:
    """The fixed fields of block 0 that are not timings."""

    version: str
    digital: bool
    interface: str | None
    bits_per_color: int | None
    image_size_cm: tuple[int, int] | None
    aspect_ratio: str | None
    manufacture_week: int | None
    manufacture_year: int | None
    model_year: int | None
    features: Features


@functools.lru_cache(maxsize=4096)
def _base_facts(fields: bytes, effective_minor: int) -> _BaseFacts:
    """Facts from block 0 bytes 0x10-0x18 (date, version, basic parameters, features)."""
    b = bytes(0x10) + fields  # so that offsets read as in the EDID standard
    major, minor = b[0x12], b[0x13]
    week, year = b[0x10], 1990 + b[0x11]
    digital = bool(b[0x14] & 0x80)
    interface: str | None = None
    bpc: int | None = None
    if digital and effective_minor >= 4:
        depth = b[0x14] & 0x70
        bpc = depth // 8 + 4 if depth and depth != 0x70 else None
        code = b[0x14] & 0x0F
        interface = _INTERFACES_1_4[code] if code < len(_INTERFACES_1_4) else f"reserved {code}"
    elif digital and effective_minor >= 2 and b[0x14] & 0x01:
        interface = "DFP 1.x compatible TMDS"
    aspect = None
    if not (b[0x15] and b[0x16]) and effective_minor >= 4 and (b[0x15] or b[0x16]):
        aspect = (f"{(b[0x15] + 99) / 100:.2f} (landscape)" if b[0x15]
                  else f"{100 / (b[0x16] + 99):.2f} (portrait)")
    f = b[0x18]
    return _BaseFacts(
        version=f"{major}.{minor}",
        digital=digital,
        interface=interface,
        bits_per_color=bpc,
        image_size_cm=(b[0x15], b[0x16]) if b[0x15] and b[0x16] else None,
        aspect_ratio=aspect,
        manufacture_week=None if week == 0xFF else week,
        manufacture_year=None if week == 0xFF else year,
        model_year=year if week == 0xFF else None,
        features=Features(
            gamma=None if b[0x17] == 0xFF else (b[0x17] + 100) / 100,
            dpms_standby=bool(f & 0x80),
            dpms_suspend=bool(f & 0x40),
            dpms_off=bool(f & 0x20),
            srgb_default=bool(f & 0x04),
            preferred_timing_native=bool(f & 0x02),
            continuous_frequency=bool(f & 0x01) and effective_minor >= 4,
        ),
    )


# Timings from the fixed tables are the same objects every time: the caches are bounded by
# the tables' sizes times 256 block numbers.
@functools.cache
def _dmt_timing(dmt: int, block: int) -> Timing | None:
    row = _DMTS.get(dmt)
    return None if row is None else Timing(*row, f"DMT 0x{dmt:02x}", block)


@functools.cache
def _vic_timing(vic: int, block: int) -> Timing | None:
    row = VIC_TIMINGS.get(vic)
    return None if row is None else Timing(*row, f"VIC {vic}", block)


@functools.cache
def _hdmi_vic_timing(hdmi_vic: int, block: int) -> Timing:
    return Timing(*VIC_TIMINGS[_HDMI_VIC_TO_VIC[hdmi_vic - 1]], f"HDMI VIC {hdmi_vic}", block)


@functools.cache
def _established_timings(b23: int, b24: int, b25: int) -> tuple[Timing, ...]:
    timings = []
    for i, entry in enumerate(_ESTABLISHED_I_II):
        if (b23, b24, b25)[i // 8] & (0x80 >> (i % 8)):
            if isinstance(entry, int):
                timings.append(Timing(*_DMTS[entry], f"DMT 0x{entry:02x}", 0))
            else:
                timings.append(Timing(*entry[1], entry[0], 0))
    return tuple(timings)


@dataclass(slots=True)
class _CtaState:
    """What the CTA-861 blocks contribute, collected while walking them."""

    revision: int = 0
    vics: list[int] = field(default_factory=list)
    native_vics: list[int] = field(default_factory=list)
    y420_vics: list[int] = field(default_factory=list)
    y420_capable: list[int] = field(default_factory=list)
    hdmi: HdmiVsdb | None = None
    hdmi_forum: HdmiForumVsdb | None = None
    hdr: HdrStaticMetadata | None = None
    vtdb_count: int = 0
    first_vic_block: int = 0


class _Decoder:
    """Walks the blocks once, in edid-decode's order, collecting timings and facts."""

    def __init__(self, data: bytes) -> None:
        self.blocks = [data[i:i + EDID_BLOCK_SIZE] for i in range(0, len(data), EDID_BLOCK_SIZE)]
        # A structure that claims more bytes than its block holds reads on into the next
        # blocks (as edid-decode does), then zeros: never an IndexError.
        padded = data + _PADDING
        self.padded = [padded[i:i + _WINDOW] for i in range(0, len(data), EDID_BLOCK_SIZE)]
        self.minor = 0
        self.timings: list[Timing] = []
        self.block_nr = 0
        self.dtd_count = 0
        self.names: list[str] = []
        self.serials: list[str] = []
        self.alnum: list[str] = []
        self.range_limits: RangeLimits | None = None
        self.supports_cvt = False
        self.spwg = False
        self.svds = self._preparse_svds()
        self.cta = _CtaState()
        self.has_cta = False
        self.displayid_version: str | None = None
        self.displayid_product: DisplayIdProduct | None = None
        self.displayid_preferred: Timing | None = None
        self.first_detailed: Timing | None = None
        self.eeodb_blocks = 0

    # -- timing output ---------------------------------------------------------------------

    def emit(self, source: str, width: int, height: int, interlaced: bool, uhz: int | None) -> None:
        if uhz is not None:
            self.timings.append(Timing(width, height, uhz, interlaced, source, self.block_nr))

    def emit_detailed(self, source: str, width: int, height: int, interlaced: bool,
                      uhz: int | None) -> None:
        """A detailed timing (DTD or DisplayID detailed), remembered for the preferred mode."""
        if uhz is None:
            return
        t = Timing(width, height, uhz, interlaced, source, self.block_nr)
        self.timings.append(t)
        if self.first_detailed is None:
            self.first_detailed = t

    def emit_dmt(self, dmt: int) -> None:
        t = _dmt_timing(dmt, self.block_nr)
        if t is not None:
            self.timings.append(t)

    def emit_vic(self, vic: int) -> None:
        t = _vic_timing(vic, self.block_nr)
        if t is not None:
            self.timings.append(t)

    def emit_hdmi_vic(self, hdmi_vic: int) -> None:
        if 1 <= hdmi_vic <= len(_HDMI_VIC_TO_VIC):
            self.timings.append(_hdmi_vic_timing(hdmi_vic, self.block_nr))

    def emit_formula(self, source: str, hact: int, vact: int, pixclk: int, htotal: int,
                     vtotal: int) -> None:
        self.emit(source, hact, vact, False, _refresh_uhz(pixclk, htotal, vtotal))

    def emit_cvt(self, source: str, hact: int, vact: int, refresh: int, *, rb: int = 0,
                 alt: bool = False, rb3_hblank: int = 0, rb3_vblank_us: int = 460) -> None:
        if refresh <= 0 or vact <= 0:
            return
        t = cvt_timing(hact, vact, refresh, rb=rb, alt=alt, rb3_hblank=rb3_hblank,
                       rb3_vblank_us=rb3_vblank_us)
        # edid-decode keeps the clock in a 32-bit unsigned: absurd modes wrap around.
        self.emit_formula(source, hact, vact, t.pixel_clock_khz & _MASK32, hact + t.hblank,
                          vact + t.vblank)

    def emit_gtf(self, source: str, hact: int, vact: int, refresh: int) -> None:
        if refresh <= 0:
            return
        hrnd, pixclk, htotal, vtotal = _gtf(hact, vact, refresh)
        self.emit_formula(source, hrnd, vact, pixclk & _MASK32, htotal, vtotal)

    # -- base block -------------------------------------------------------------------------

    def base_block(self) -> _BaseFacts:
        b = self.padded[0]
        major, minor = b[0x12], b[0x13]
        self.minor = minor if major == 1 else 0
        for off in (0x36, 0x48, 0x5A, 0x6C):
            if not b[off] and not b[off + 1] and b[off + 3] == 0xFD and b[off + 10] == 0x04:
                self.supports_cvt = self.supports_cvt or self.minor >= 4
        self.established(b)
        self.standard_timings(b, 0x26, 8)
        self.spwg = bool(
            (b[0x36] or b[0x37]) and (b[0x48] or b[0x49]) and not b[0x5A] and not b[0x5B]
            and b[0x5D] == 0xFE and not b[0x6C] and not b[0x6D] and b[0x6F] == 0xFE
            and b[0x79] in (1, 2) and b[0x7A] <= 1
        )
        for n, off in enumerate((0x36, 0x48, 0x5A, 0x6C)):
            self.descriptor(b, off, n + 1)
        self.spwg = False
        return _base_facts(b[0x10:0x19], self.minor)

    def established(self, b: bytes) -> None:
        if b[0x23] or b[0x24] or b[0x25] & 0x80:
            self.timings += _established_timings(b[0x23], b[0x24], b[0x25] & 0x80)

    def standard_timings(self, b: bytes, offset: int, count: int) -> None:
        for i in range(offset, offset + 2 * count, 2):
            self.standard_timing(b[i], b[i + 1])

    def standard_timing(self, b1: int, b2: int, *, gtf_only: bool = False) -> None:
        if b1 <= 0x01:
            return
        dmt = _DMT_BY_STD_CODE.get(b1 << 8 | b2)
        if dmt is not None:
            self.emit_dmt(dmt)
            return
        hact = (b1 + 31) * 8
        ratio = b2 >> 6
        if ratio == 0:
            hratio, vratio = (16, 10) if gtf_only or self.minor >= 3 else (1, 1)
        else:
            hratio, vratio = ((4, 3), (5, 4), (16, 9))[ratio - 1]
        vact = int(hact * vratio / hratio)
        refresh = (b2 & 0x3F) + 60
        if self.minor >= 4 and not gtf_only:
            if self.supports_cvt:
                self.emit_cvt("CVT", hact, vact, refresh)
            self.emit_gtf("GTF", hact, vact, refresh)
        elif gtf_only or self.minor >= 2:
            self.emit_gtf("GTF", hact, vact, refresh)
        # EDID 1.0 and 1.1 define no formula: edid-decode prints "Unknown", with no timing.

    def descriptor(self, b: bytes, off: int, number: int) -> None:
        if b[off] or b[off + 1]:
            self.detailed_timing(b, off, base_or_cta=True, spwg_second=self.spwg and number == 2)
            return
        kind = b[off + 3]
        if kind == 0xF7:
            for i, dmt in enumerate(_ESTABLISHED_III):
                if b[off + 6 + i // 8] & (0x80 >> (i % 8)):
                    self.emit_dmt(dmt)
        elif kind == 0xF8:
            if b[off + 5] == 0x01:
                for i in range(4):
                    self.cvt_code(b, off + 6 + 3 * i, first=i == 0)
        elif kind == 0xFA:
            self.standard_timings(b, off + 5, 6)
        elif self.block_nr:
            # Strings and limits count in block 0 only (identity is a base block matter).
            return
        elif kind == 0xFC:
            self.names.append(_edid_string(b[off + 5:off + 18]))
        elif kind == 0xFD:
            self.range_limits = self.range_limits or self.parse_range_limits(b, off)
        elif kind == 0xFE and not (self.spwg and number >= 3):
            self.alnum.append(_edid_string(b[off + 5:off + 18]))
        elif kind == 0xFF:
            self.serials.append(_edid_string(b[off + 5:off + 18]))

    def parse_range_limits(self, b: bytes, off: int) -> RangeLimits:
        flags = b[off + 4] if self.minor >= 4 else 0
        v_max = 255 if flags & 0x02 else 0
        v_min = 255 if flags & 0x03 == 0x03 else 0
        h_max = 255 if flags & 0x08 else 0
        h_min = 255 if flags & 0x0C == 0x0C else 0
        classes = {0: "GTF", 1: "Range Limits Only", 2: "Secondary GTF", 4: "CVT"}
        return RangeLimits(
            min_vertical_hz=b[off + 5] + v_min,
            max_vertical_hz=b[off + 6] + v_max,
            min_horizontal_khz=b[off + 7] + h_min,
            max_horizontal_khz=b[off + 8] + h_max,
            max_pixel_clock_mhz=b[off + 9] * 10 or None,
            timing_class=classes.get(b[off + 10], f"unknown 0x{b[off + 10]:02x}"),
        )

    def cvt_code(self, b: bytes, off: int, *, first: bool) -> None:
        x0, x1, x2 = b[off], b[off + 1], b[off + 2]
        if not first and not (x0 or x1 or x2):
            return
        vact = ((x0 | (x1 & 0xF0) << 4) + 1) * 2
        hratio, vratio = ((4, 3), (16, 9), (16, 10), (15, 9))[(x1 & 0x0C) >> 2]
        hact = 8 * ((vact * hratio // vratio) // 8)
        for bit, rate in ((0x10, 50), (0x08, 60), (0x04, 75), (0x02, 85)):
            if x2 & bit:
                self.emit_cvt("CVT", hact, vact, rate)
        if x2 & 0x01:
            self.emit_cvt("CVT", hact, vact, 60, rb=1)

    def detailed_timing(self, b: bytes, off: int, *, base_or_cta: bool,
                        spwg_second: bool = False) -> None:
        if base_or_cta:
            self.dtd_count += 1
        pixclk = _u16(b, off) * 10
        if pixclk < 10000:
            return
        hact = b[off + 2] | (b[off + 4] & 0xF0) << 4
        hblank = b[off + 3] | (b[off + 4] & 0x0F) << 8
        vact = b[off + 5] | (b[off + 7] & 0xF0) << 4
        vblank = b[off + 6] | (b[off + 7] & 0x0F) << 8
        flags = b[off - 1] if spwg_second else b[off + 17]
        htotal = (hact + hblank) & _MASK32
        label = f"DTD {self.dtd_count}" if base_or_cta else "DTD"
        if not flags & 0x80:
            self.emit_detailed(label, hact, vact, False,
                               _refresh_uhz(pixclk, htotal, vact + vblank))
            return
        vborder = b[off + 16]
        hfp = b[off + 8] | (b[off + 11] & 0xC0) << 2
        hsync = b[off + 9] | (b[off + 11] & 0x30) << 4
        vfp = b[off + 10] >> 4 | (b[off + 11] & 0x0C) << 2
        vsync = b[off + 10] & 0x0F | (b[off + 11] & 0x03) << 4
        field_total = (vact + vblank - 2 * vborder) & _MASK32
        # VIC 39 (1920x1080i, 1250 lines) has an even total that edid-decode special-cases.
        even = (hact == 1920 and vact == 540 and pixclk == 72000 and hfp == 32
                and hsync == 168 and hblank - b[off + 15] * 2 - hfp - hsync == 184
                and not b[off + 15] and vfp == 23 and vsync == 5 and vblank - vfp - vsync == 57
                and not vborder and 39 in self.svds and flags & 0x1E == 0x1A)
        vtotal = field_total if even else field_total + 0.5
        self.emit_detailed(label, hact, vact * 2, True, _refresh_uhz(pixclk, htotal, vtotal))

    # -- extension blocks ---------------------------------------------------------------------

    def extension(self, b: bytes) -> str:
        tag = b[0]
        if tag == 0x02:
            self.cta_block(b)
        elif tag == 0x10:
            self.vtb_block(b)
        elif tag == 0x70:
            self.displayid_block(b)
        if tag == 0x00 and b[:8] == _HEADER:
            return "Base EDID"
        return _EXTENSION_NAMES.get(tag, f"unknown 0x{tag:02x}")

    def vtb_block(self, b: bytes) -> None:
        off = 5
        for _ in range(b[2]):
            if off + 18 > EDID_BLOCK_SIZE:
                return
            self.detailed_timing(b, off, base_or_cta=False)
            off += 18
        for _ in range(b[3]):
            if off + 3 > EDID_BLOCK_SIZE:
                return
            self.cvt_code(b, off, first=False)
            off += 3
        for _ in range(b[4]):
            if off + 2 > EDID_BLOCK_SIZE:
                return
            self.standard_timing(b[off], b[off + 1], gtf_only=True)
            off += 2

    def _preparse_svds(self) -> list[int]:
        """The SVDs of every CTA Video Data Block, which later blocks refer to by index."""
        svds: list[int] = []
        for b in self.blocks[1:]:
            if b[0] != 0x02 or b[1] < 3:
                continue
            end = min(b[2], EDID_BLOCK_SIZE)
            i = 4
            while i < end:
                length = b[i] & 0x1F
                if b[i] >> 5 == 2:
                    for svd in b[i + 1:i + 1 + length]:
                        svds.append(svd & 0x7F if (svd & 0x7F) <= 64 else svd)
                i += length + 1
        return svds

    def cta_block(self, b: bytes) -> None:
        self.has_cta = True
        version, offset = b[1], b[2]
        self.cta.revision = self.cta.revision or version
        if version < 1 or offset < 4:
            return
        if version >= 3:
            i = 4
            while i < offset:
                length = b[i] & 0x1F
                self.cta_data_block(b[i], b[i + 1:], first_in_block=i == 4)
                i += length + 1
        off = offset
        while off + 17 < 127:
            if not any(b[off:off + 18]):
                break
            self.descriptor(b, off, 0)
            off += 18

    def cta_data_block(self, header: int, rest: bytes, *, first_in_block: bool) -> None:
        """One CTA-861 data block; `rest` is the block from its payload on (a block that
        claims more than it has reads on into what follows, as edid-decode does)."""
        tag, length = header >> 5, header & 0x1F
        payload = rest[:length]
        if tag == 7 and length:
            self.cta_extended_block(payload[0], payload[1:], first_in_block=first_in_block)
        elif tag == 2:
            self.svd_list(payload, ycbcr420=False)
        elif tag == 3 and length >= 3:
            oui = payload[2] << 16 | payload[1] << 8 | payload[0]
            if oui == _OUI_HDMI:
                self.hdmi_vsdb(rest[3:], length - 3)
            elif oui == _OUI_HDMI_FORUM:
                self.cta.hdmi_forum = self.cta.hdmi_forum or self.hdmi_forum(payload[3:])

    def cta_extended_block(self, ext_tag: int, data: bytes, *, first_in_block: bool) -> None:
        if ext_tag == 0x0E:
            self.svd_list(data, ycbcr420=True)
        elif ext_tag == 0x0F:
            self.y420_capability_map(data)
        elif ext_tag == 0x0D:
            for svr in data:
                self.short_video_reference(svr)
        elif ext_tag == 0x08 and data:
            self.short_video_reference(data[0])
        elif ext_tag == 0x06 and len(data) >= 2:
            self.cta.hdr = self.cta.hdr or _hdr_static_metadata(data)
        elif ext_tag == 0x22:
            sz = 20 + ((data[0] & 0x70) >> 4) if data else 20
            if len(data) >= sz + 1:
                self.cta.vtdb_count += 1
                self.displayid_detailed(data, 1, kilohertz=1,
                                        label=f"VTDB {self.cta.vtdb_count}")
        elif ext_tag == 0x23 and data and not data[0] >> 6:
            self.enumerated_codes(data[0], data[1:])
        elif ext_tag == 0x2A and data:
            sz = 6 + ((data[0] & 0x70) >> 4)
            for i in range(1, len(data) - sz + 1, sz):
                self.cta.vtdb_count += 1
                self.formula_timing_10(data, i, sz, label=f"VTDB {self.cta.vtdb_count}")
        elif ext_tag == 0x79 and len(data) >= 2:
            self.cta.hdmi_forum = self.cta.hdmi_forum or self.hdmi_forum(data[2:])
        elif ext_tag == 0x78 and first_in_block and data and self.block_nr == 1:
            self.eeodb_blocks = data[0]

    def short_video_reference(self, svr: int) -> None:
        """An SVR of the Video Format Preference or Native Video Resolution blocks: a VIC,
        or a reference to a DTD or VTDB that is listed elsewhere already."""
        if 0 < svr < 128 or 192 < svr < 254:
            self.emit_vic(svr)

    def svd_list(self, data: bytes, *, ycbcr420: bool) -> None:
        for svd in data:
            if not svd & 0x7F:
                continue
            if (svd - 1) & 0x40:
                vic, native = svd, False
            else:
                vic, native = svd & 0x7F, bool(svd & 0x80)
            if vic not in VIC_TIMINGS:
                continue
            self.emit_vic(vic)
            if ycbcr420:
                self.cta.y420_vics.append(vic)
            else:
                if not self.cta.vics:
                    self.cta.first_vic_block = self.block_nr
                self.cta.vics.append(vic)
                if native:
                    self.cta.native_vics.append(vic)

    def vic_by_index(self, index: int, *, ycbcr420: bool = False) -> None:
        if index < len(self.svds):
            vic = self.svds[index]
            if vic in VIC_TIMINGS:
                self.emit_vic(vic)
                if ycbcr420:
                    self.cta.y420_capable.append(vic)

    def y420_capability_map(self, data: bytes) -> None:
        if not data:
            # An empty map means every SVD; edid-decode lists no timings for it.
            self.cta.y420_capable += [vic for vic in self.svds if vic in VIC_TIMINGS]
            return
        if not any(data):
            return
        for i, byte in enumerate(data):
            for bit in range(8):
                if byte & 1 << bit:
                    self.vic_by_index(i * 8 + bit, ycbcr420=True)

    def hdmi_vsdb(self, x: bytes, n: int) -> None:
        """The HDMI 1.4 VSDB: `n` payload bytes after the OUI at the start of `x`."""
        if n < 1:
            return
        address = f"{x[0] >> 4:x}.{x[0] & 0x0F:x}.{x[1] >> 4:x}.{x[1] & 0x0F:x}"
        tmds = x[3] * 5 if n >= 4 else None
        hdmi_vics: list[int] = []
        if n >= 5 and x[4] & 0x20:
            hdmi_vics = self.hdmi_video(x)
        if self.cta.hdmi is None:
            self.cta.hdmi = HdmiVsdb(address, tmds or None, tuple(hdmi_vics))

    def hdmi_video(self, x: bytes) -> list[int]:
        """The HDMI_Video_present part: HDMI VICs, then the 3D VIC lists (by SVD index)."""
        pad = x + bytes(64)
        b = 5
        if x[4] & 0x80:
            b += 4 if x[4] & 0x40 else 2
        flags = pad[b]
        b += 1
        len_vic, len_3d = pad[b] >> 5, pad[b] & 0x1F
        b += 1
        hdmi_vics = []
        for vic in pad[b:b + len_vic]:
            if 1 <= vic <= len(_HDMI_VIC_TO_VIC):
                hdmi_vics.append(vic)
                self.emit_hdmi_vic(vic)
        b += len_vic
        if not len_3d:
            return hdmi_vics
        structure = flags & 0x60
        if structure in (0x20, 0x40):
            b += 2
            len_3d -= 2
        if structure == 0x40:
            for i in range(8):
                if pad[b + 1] & 1 << i:
                    self.vic_by_index(i)
            for i in range(8):
                if pad[b] & 1 << i:
                    self.vic_by_index(i + 8)
            b += 2
            len_3d -= 2
        if len_3d <= 0:
            return hdmi_vics
        end = min(b + len_3d, len(pad))
        while b < end:
            self.vic_by_index(pad[b] >> 4)
            b += 2 if pad[b] & 0x0F >= 8 else 1
        return hdmi_vics

    @staticmethod
    def hdmi_forum(x: bytes) -> HdmiForumVsdb | None:
        if len(x) < 3:
            return None
        return HdmiForumVsdb(
            version=x[0],
            max_tmds_mhz=x[1] * 5 or None,
            scdc_present=bool(x[2] & 0x80),
            max_frl_rate=x[3] >> 4 if len(x) > 3 else 0,
        )

    # -- DisplayID ----------------------------------------------------------------------------

    def displayid_block(self, b: bytes) -> None:
        version, length = b[1], min(b[2], 121)
        if self.displayid_version is None:
            self.displayid_version = f"{version >> 4}.{version & 0x0F}"
        pos = 5
        while length > 0:
            if length < 3:
                return
            tag, size = b[pos], b[pos + 2]
            if length < size + 3 or (not tag and not size):
                return
            self.displayid_data_block(tag, b[pos:pos + 3 + size + 32], size)
            length -= size + 3
            pos += size + 3

    def displayid_data_block(self, tag: int, x: bytes, size: int) -> None:
        """One DisplayID data block: `x` starts at its tag, `size` is its payload length."""
        if tag in (0x00, 0x20):
            self.displayid_product = self.displayid_product or _displayid_product(tag, x)
        elif tag == 0x03:
            for i in range(size // 20):
                self.displayid_detailed(x, 3 + i * 20, kilohertz=10)
        elif tag == 0x22:
            sz = 20 + ((x[1] & 0x70) >> 4)
            for i in range(size // sz):
                self.displayid_detailed(x, 3 + i * sz, kilohertz=1)
        elif tag == 0x04:
            for i in range(size // 11):
                self.displayid_type_2(x, 3 + i * 11)
        elif tag == 0x05:
            for i in range(size // 3):
                self.displayid_type_3(x, 3 + i * 3)
        elif tag == 0x06:
            for code in x[3:3 + size]:
                self.timing_code((x[1] & 0xC0) >> 6, code)
        elif tag == 0x07:
            for i in range(min(size, 10) * 8):
                if x[3 + i // 8] & 1 << i % 8:
                    self.emit_dmt(i + 1)
        elif tag == 0x08:
            for i in range(min(size, 8) * 8):
                if x[3 + i // 8] & 1 << i % 8:
                    self.emit_vic(i + 1)
        elif tag == 0x11:
            for i in range(size // 7):
                self.displayid_type_5(x, 3 + i * 7)
        elif tag == 0x13:
            self.displayid_type_6_list(x, size)
        elif tag == 0x23:
            self.enumerated_codes(x[1], x[3:3 + size])
        elif tag == 0x24:
            for i in range(size // 6):
                self.displayid_type_9(x, 3 + i * 6)
        elif tag in (0x10, 0x27) and x[1] & 0x40:
            self.stereo_timing_codes(x, size)
        elif tag == 0x81:
            i = 0
            while i < size:
                self.cta_data_block(x[3 + i], x[4 + i:], first_in_block=False)
                i += (x[3 + i] & 0x1F) + 1

    def stereo_timing_codes(self, x: bytes, size: int) -> None:
        """The timing code lists after a Stereo Display Interface block's parameters."""
        if size < x[3] + 1:
            return
        left = size - 1 - x[3]
        o = 4 + x[3]
        while 1 + (x[o] & 0x1F) <= left:
            count = x[o] & 0x1F
            for code in x[o + 1:o + 1 + count]:
                self.timing_code(x[o] >> 6, code)
            left -= 1 + count
            o += 1 + count

    def timing_code(self, kind: int, code: int) -> None:
        # edid-decode looks two-byte codes up as one byte: only the low byte counts.
        code &= 0xFF
        if kind == 0:
            self.emit_dmt(code)
        elif kind == 1:
            self.emit_vic(code)
        elif kind == 2:
            self.emit_hdmi_vic(code)

    def enumerated_codes(self, flags: int, codes: bytes) -> None:
        kind = flags >> 6
        if flags & 0x08:
            for i in range(0, len(codes) - 1, 2):
                self.timing_code(kind, codes[i] | codes[i + 1] << 8)
        else:
            for code in codes:
                self.timing_code(kind, code)

    def displayid_detailed(self, x: bytes, o: int, *, kilohertz: int, label: str = "DTD") -> None:
        """Type I (10 kHz) and type VII (1 kHz) detailed timings, 20 bytes at `o`."""
        pixclk = kilohertz * (1 + (x[o] | x[o + 1] << 8 | x[o + 2] << 16))
        hact = 1 + _u16(x, o + 4)
        hblank = 1 + _u16(x, o + 6)
        vact = 1 + _u16(x, o + 12)
        vblank = 1 + _u16(x, o + 14)
        interlaced = bool(x[o + 3] & 0x10)
        if interlaced:
            vfp = 1 + (x[o + 16] | (x[o + 17] & 0x7F) << 8)
            vtotal: float = _field_total(vact, vblank, vfp, 1 + _u16(x, o + 18))
        else:
            vtotal = vact + vblank
        uhz = _refresh_uhz(pixclk, hact + hblank, vtotal)
        if label != "DTD":
            self.emit(label, hact, vact, interlaced, uhz)
            return
        self.emit_detailed(label, hact, vact, interlaced, uhz)
        if x[o + 3] & 0x80 and uhz is not None and not self.displayid_preferred:
            self.displayid_preferred = self.timings[-1]

    def displayid_type_2(self, x: bytes, o: int) -> None:
        pixclk = 10 * (1 + (x[o] | x[o + 1] << 8 | x[o + 2] << 16))
        hact = 8 + 8 * (x[o + 4] | (x[o + 5] & 0x01) << 8)
        hblank = 8 + 8 * ((x[o + 5] & 0xFE) >> 1)
        vact = 1 + (x[o + 7] | (x[o + 8] & 0x0F) << 8)
        vblank = 1 + x[o + 9]
        interlaced = bool(x[o + 3] & 0x10)
        if interlaced:
            vtotal: float = _field_total(vact, vblank, 1 + (x[o + 10] >> 4),
                                         1 + (x[o + 10] & 0x0F))
        else:
            vtotal = vact + vblank
        self.emit_detailed("DTD", hact, vact, interlaced,
                           _refresh_uhz(pixclk, hact + hblank, vtotal))

    def displayid_type_3(self, x: bytes, o: int) -> None:
        aspect = x[o] & 0x0F
        ratios = ((1, 1), (5, 4), (4, 3), (15, 9), (16, 9), (16, 10), (64, 27), (256, 135))
        hratio, vratio = ratios[aspect] if aspect < len(ratios) else (1, 1)
        hact = 8 + 8 * x[o + 1]
        vact = hact * vratio // hratio
        rb = 1 if (x[o] & 0x70) >> 4 == 1 else 0
        self.emit_cvt("CVT", hact, vact, 1 + (x[o + 2] & 0x7F), rb=rb)

    def displayid_type_5(self, x: bytes, o: int) -> None:
        self.emit_cvt("CVT", 1 + _u16(x, o + 2), 1 + _u16(x, o + 4), 1 + x[o + 6], rb=2)

    def displayid_type_6_list(self, x: bytes, size: int) -> None:
        i = 0
        while i < size:
            o = 3 + i
            pixclk = 1 + (x[o] | x[o + 1] << 8 | (x[o + 2] & 0x3F) << 16)
            hact = 1 + (x[o + 3] | (x[o + 4] & 0x3F) << 8)
            vact = 1 + (x[o + 5] | (x[o + 6] & 0x3F) << 8)
            hblank = 1 + (x[o + 7] | (x[o + 9] & 0x0F) << 8)
            vblank = 1 + x[o + 11]
            interlaced = bool(x[o + 13] & 0x80)
            if interlaced:
                vtotal: float = _field_total(vact, vblank, 1 + x[o + 12], 1 + (x[o + 13] & 0x0F))
            else:
                vtotal = vact + vblank
            self.emit_detailed("DTD", hact, vact, interlaced,
                           _refresh_uhz(pixclk, hact + hblank, vtotal))
            i += 17 if x[o + 2] & 0x40 else 14

    def displayid_type_9(self, x: bytes, o: int) -> None:
        rb = x[o] & 0x07
        self.emit_cvt("CVT", 1 + _u16(x, o + 1), 1 + _u16(x, o + 3), 1 + x[o + 5],
                      rb=rb if rb in (1, 2) else 0)

    def formula_timing_10(self, x: bytes, o: int, sz: int, *, label: str) -> None:
        """A type X formula-based timing (CVT, reduced blanking 1-3), `sz` bytes at `o`."""
        rb = x[o] & 0x07
        rb = rb if rb in (1, 2, 3) else 0
        alt = bool(x[o] & 0x10) and rb in (2, 3)
        refresh = 1 + x[o + 5] + ((x[o + 6] & 0x03) << 8 if sz > 6 else 0)
        hblank, vblank_us = 0, 460
        if rb == 3:
            hblank = 160 if alt else 80
            if sz > 6:
                delta = (x[o + 6] >> 2) & 0x07
                if hblank == 80:
                    hblank += 8 * delta
                else:
                    hblank = 160 + 8 * delta if delta <= 5 else 160 - (delta - 5) * 8
                vblank_us += ((x[o + 6] >> 5) & 0x07) * 35
        self.emit_cvt(label, 1 + _u16(x, o + 1), 1 + _u16(x, o + 3), refresh, rb=rb, alt=alt,
                      rb3_hblank=hblank, rb3_vblank_us=vblank_us)

    # -- the whole EDID -----------------------------------------------------------------------

    def cta_info(self) -> CtaInfo | None:
        if not self.has_cta:
            return None
        cta = self.cta
        return CtaInfo(
            revision=cta.revision,
            vics=tuple(cta.vics),
            native_vics=tuple(cta.native_vics),
            ycbcr420_only_vics=tuple(cta.y420_vics),
            ycbcr420_capable_vics=tuple(cta.y420_capable),
            hdmi=cta.hdmi,
            hdmi_forum=cta.hdmi_forum,
            hdr=cta.hdr,
        )

    def preferred(self) -> Timing | None:
        """Block 0's first DTD; else DisplayID's preferred timing, the first detailed timing
        anywhere, the first VIC, or the largest mode."""
        first = self.first_detailed
        if first is not None and first.block == 0:
            return first
        if self.displayid_preferred or first:
            return self.displayid_preferred or first
        if self.cta.vics:
            return _vic_timing(self.cta.vics[0], self.cta.first_vic_block)
        if not self.timings:
            return None
        return max(self.timings, key=lambda t: (t.width * t.height, t.refresh_uhz))


def _hdr_static_metadata(x: bytes) -> HdrStaticMetadata:
    eotfs = tuple(name for bit, name in enumerate(_HDR_EOTFS) if x[0] & 1 << bit)
    max_lum = 50.0 * 2 ** (x[2] / 32) if len(x) > 2 and x[2] else None
    avg_lum = 50.0 * 2 ** (x[3] / 32) if len(x) > 3 and x[3] else None
    min_lum = max_lum * (x[4] / 255) ** 2 / 100 if len(x) > 4 and max_lum else None
    return HdrStaticMetadata(eotfs, max_lum, avg_lum, min_lum)


def _displayid_product(tag: int, x: bytes) -> DisplayIdProduct | None:
    if len(x) < 3 + 12:
        return None
    if tag == 0x20:
        vendor = f"{x[3]:02X}-{x[4]:02X}-{x[5]:02X}"
    else:
        vendor = "".join(chr(c) if 0x20 <= c <= 0x7E else "?" for c in x[3:6])
    week = x[12]
    name_len = min(x[14], len(x) - 15)
    return DisplayIdProduct(
        vendor=vendor,
        product_code=_u16(x, 6),
        serial_number=x[8] | x[9] << 8 | x[10] << 16 | x[11] << 24,
        year=2000 + x[13],
        week=week if 0 < week <= 0x36 else None,
        model_year=week == 0xFF,
        name=_edid_string(x[15:15 + name_len]),
    )


def _check_container(data: bytes) -> None:
    if not data:
        raise EdidEmptyError(0)
    if len(data) % EDID_BLOCK_SIZE:
        raise EdidLengthError(len(data))
    if not any(data):
        raise EdidEmptyError(len(data))
    if data[:8] != _HEADER:
        raise EdidHeaderError(data[:8])


def decode_edid(data: bytes) -> Edid:
    """Decode raw EDID bytes (block 0 and any extension blocks).

    Raises a subclass of `EdidError` for input that is not an EDID; checksum and extension
    count problems are reported on the result (`bad_checksum_blocks`, ...).
    """
    data = bytes(data)
    _check_container(data)
    try:
        return _decode(data)
    except (IndexError, ValueError, ZeroDivisionError, OverflowError) as e:
        # Reads are padded and arithmetic is bounded, so this is not expected; but callers are
        # promised EdidError for any content, and a monitor's EEPROM is untrusted input.
        raise EdidError(f"malformed EDID content: {e}") from e


def _decode(data: bytes) -> Edid:
    decoder = _Decoder(data)
    blocks = decoder.blocks
    facts = decoder.base_block()
    extensions = []
    for nr in range(1, len(blocks)):
        decoder.block_nr = nr
        extensions.append(decoder.extension(decoder.padded[nr]))
    base = blocks[0]
    declared = base[0x7E]
    expected = decoder.eeodb_blocks if declared == 1 and decoder.eeodb_blocks else declared
    return Edid(
        identity=MonitorIdentity(
            manufacturer=_manufacturer(base[8], base[9]),
            product_code=_u16(base, 10),
            serial_number=base[12] | base[13] << 8 | base[14] << 16 | base[15] << 24,
            serial_string=decoder.serials[0] if decoder.serials else None,
        ),
        monitor_name=decoder.names[0] if decoder.names else None,
        alphanumeric_strings=tuple(decoder.alnum),
        version=facts.version,
        digital=facts.digital,
        interface=facts.interface,
        bits_per_color=facts.bits_per_color,
        image_size_cm=facts.image_size_cm,
        aspect_ratio=facts.aspect_ratio,
        manufacture_week=facts.manufacture_week,
        manufacture_year=facts.manufacture_year,
        model_year=facts.model_year,
        features=facts.features,
        range_limits=decoder.range_limits,
        timings=tuple(decoder.timings),
        preferred=decoder.preferred(),
        extensions=tuple(extensions),
        declared_extensions=declared,
        bad_checksum_blocks=tuple(i for i, b in enumerate(blocks) if sum(b) & 0xFF),
        extension_count_mismatch=expected != len(blocks) - 1,
        repeated_base_blocks=tuple(i for i in range(1, len(blocks)) if blocks[i] == base),
        cta=decoder.cta_info(),
        displayid=DisplayIdInfo(decoder.displayid_version, decoder.displayid_product)
        if decoder.displayid_version is not None else None,
    )


# --- output: the oracle-shaped JSON record and the readable summary ----------------------------


def _mode_record(t: Timing) -> dict[str, object]:
    return {
        "width": t.width,
        "height": t.height,
        "interlaced": t.interlaced,
        "refresh_hz": t.refresh_uhz / 1_000_000,
    }


def json_record(edid: Edid) -> dict[str, object]:
    """The fields of edid-decode's oracle (shared data `edid/oracle.json`), in its formats.

    `model_year` is a string as edid-decode prints it; `modes` lists every distinct timing
    (size, scan, printed refresh) in edid-decode's order; refreshes carry six decimals.
    """
    return {
        "manufacturer": edid.manufacturer,
        "product_code": edid.product_code,
        "serial_number": edid.serial_number,
        "serial_string": edid.serial_string,
        "monitor_name": edid.monitor_name,
        "edid_version": edid.version,
        "digital": edid.digital,
        "image_size_cm": list(edid.image_size_cm) if edid.image_size_cm else None,
        "manufacture_week": edid.manufacture_week,
        "manufacture_year": edid.manufacture_year,
        "model_year": None if edid.model_year is None else str(edid.model_year),
        "checksum_valid": edid.checksum_valid,
        "preferred_mode": _mode_record(edid.preferred) if edid.preferred else None,
        "modes": [_mode_record(t) for t in edid.unique_timings],
    }


def summary(edid: Edid) -> str:
    """A few readable lines: identity, basics, flags and the modes."""
    made = (f"model year {edid.model_year}" if edid.model_year is not None
            else f"week {edid.manufacture_week} of {edid.manufacture_year}")
    size = (f"{edid.image_size_cm[0]} cm x {edid.image_size_cm[1]} cm" if edid.image_size_cm
            else f"aspect {edid.aspect_ratio}" if edid.aspect_ratio else "size undefined")
    kind = "digital" + (f" ({edid.interface})" if edid.interface else "") if edid.digital \
        else "analog"
    lines = [
        f"Monitor: {edid.monitor_name or '(no name)'}  [{edid.identity}]",
        f"  EDID {edid.version}, {kind}, {size}, made {made}",
        f"  Extensions: {', '.join(edid.extensions) or 'none'}",
    ]
    if edid.bad_checksum_blocks:
        lines.append(f"  Bad checksum in block(s): {', '.join(map(str, edid.bad_checksum_blocks))}")
    if edid.extension_count_mismatch:
        lines.append(f"  Extension count {edid.declared_extensions} does not match "
                     f"{len(edid.extensions)} extension block(s) present")
    if edid.preferred:
        lines.append(f"  Preferred: {edid.preferred.mode} ({edid.preferred.source})")
    lines.append(f"  Modes ({len(edid.modes)}): {' '.join(str(m) for m in edid.modes)}")
    return "\n".join(lines)


def read_edid(path: Path) -> Edid:
    """Decode an EDID file; unreadable files raise EdidError too."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise EdidError(f"cannot read {path}: {e.strerror or e}") from e
    return decode_edid(data)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m libdisplay.hardware.edid",
        description="Decode EDID files: identity, basics and the modes each monitor offers.",
    )
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE", help="binary EDID file")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON array, one object per file, in argument order")
    args = parser.parse_args(argv)
    failed = False
    records: list[dict[str, object]] = []
    for path in args.files:
        try:
            edid = read_edid(path)
        except EdidError as e:
            failed = True
            records.append({"error": f"{path}: {e}"})
            if not args.json:
                print(f"{path}: error: {e}", file=sys.stderr)
            continue
        if args.json:
            records.append(json_record(edid))
        else:
            print(f"{path}:\n{summary(edid)}")
    if args.json:
        json.dump(records, sys.stdout, indent=1)
        sys.stdout.write("\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
