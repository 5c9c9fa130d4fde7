"""Building valid EDIDs from a few parameters, for simulated monitors and tests.

`build_edid(EdidParams(...))` returns an EDID 1.4 base block (digital, sRGB) and, when VICs are
asked for or the detailed timings do not fit in block 0, one CTA-861 extension with a Video
Data Block. The preferred mode becomes the first detailed timing, with CVT reduced blanking
stretched by a few pixels and lines so that its refresh comes as close as a 10 kHz pixel
clock allows to the one asked for. Checksums are always right; impossible requests (a name
too long, a mode no DTD can hold, an unknown VIC) raise `EdidBuildError` naming the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Literal

from libdisplay.hardware.edid import EDID_BLOCK_SIZE, VIC_TIMINGS, cvt_timing
from libdisplay.hardware.modes import Mode

Interface = Literal["undefined", "dvi", "hdmi-a", "hdmi-b", "mddi", "displayport"]

_INTERFACE_CODES: Final[dict[str, int]] = {
    "undefined": 0, "dvi": 1, "hdmi-a": 2, "hdmi-b": 3, "mddi": 4, "displayport": 5,
}
_SRGB_CHROMATICITY: Final = bytes.fromhex("ee91a3544c99260f5054")
_STANDARD_ASPECTS: Final = ((16, 10), (4, 3), (5, 4), (16, 9))
_DESCRIPTOR_SLOTS: Final = 4
_DTD_SIZE: Final = 18
_MAX_DTD_CLOCK_KHZ: Final = 655350
_MIN_DTD_CLOCK_KHZ: Final = 10000
_DEFAULT_REFRESH_MHZ: Final = 60000
_DEFAULT_PREFERRED: Final = Mode(1920, 1080, 60000)
# The DTD porches used: 48/32 pixels front porch/sync, 3 lines front porch, sync <= 15 lines.
_MIN_VBLANK: Final = 3 + 15 + 1


class EdidBuildError(ValueError):
    """Parameters that no valid EDID can express."""


@dataclass(frozen=True, slots=True)
class EdidParams:
    """What a built EDID says. Sizes are in millimetres (block 0 stores whole centimetres).

    `detailed` modes become extra detailed timings, `standard` modes Standard Timings
    (width a multiple of 8, aspect 16:10, 4:3, 5:4 or 16:9, a whole refresh of 60-123 Hz) and
    `vics` the CTA-861 Video Data Block, in the order given.
    """

    manufacturer: str = "LKN"
    product_code: int = 0x0001
    serial_number: int = 0
    serial_string: str | None = None
    name: str | None = "Display"
    size_mm: tuple[int, int] = (600, 340)
    year: int = 2024
    week: int = 1
    model_year: bool = False
    preferred: Mode = _DEFAULT_PREFERRED
    detailed: tuple[Mode, ...] = ()
    standard: tuple[Mode, ...] = ()
    vics: tuple[int, ...] = ()
    interface: Interface = "hdmi-a"
    bits_per_color: int = 8


@dataclass(frozen=True, slots=True)
class _Dtd:
    data: bytes
    pixel_clock_khz: int
    refresh_hz: float


def build_edid(params: EdidParams) -> bytes:
    """The EDID bytes for `params`: 128 bytes, or 256 with a CTA-861 extension."""
    _check_params(params)
    dtds = [_detailed_timing(params.preferred, params.size_mm, field="preferred")]
    dtds += [_detailed_timing(m, params.size_mm, field=f"detailed[{i}]")
             for i, m in enumerate(params.detailed)]
    descriptors = _display_descriptors(params, dtds)
    base_dtd_count = min(len(dtds), _DESCRIPTOR_SLOTS - len(descriptors))
    in_base, in_extension = dtds[:base_dtd_count], dtds[base_dtd_count:]
    extension = _cta_extension(params, in_extension) if params.vics or in_extension else None
    base = _base_block(params, [d.data for d in in_base] + descriptors,
                       extensions=1 if extension else 0)
    return base + (extension or b"")


def _check_params(p: EdidParams) -> None:
    if len(p.manufacturer) != 3 or not all("A" <= c <= "Z" for c in p.manufacturer):
        raise EdidBuildError(f"manufacturer {p.manufacturer!r}: need three letters A-Z")
    _check_range("product_code", p.product_code, 0, 0xFFFF)
    _check_range("serial_number", p.serial_number, 0, 0xFFFFFFFF)
    _check_range("year", p.year, 1990, 2245)
    _check_range("week", p.week, 0, 54)
    _check_range("size_mm width", p.size_mm[0], 0, 4095)
    _check_range("size_mm height", p.size_mm[1], 0, 4095)
    if p.bits_per_color not in (6, 8, 10, 12, 14, 16):
        raise EdidBuildError(f"bits_per_color {p.bits_per_color}: need 6, 8, 10, 12, 14 or 16")
    if p.interface not in _INTERFACE_CODES:
        raise EdidBuildError(f"interface {p.interface!r}: need one of {sorted(_INTERFACE_CODES)}")
    for label, text in (("name", p.name), ("serial_string", p.serial_string)):
        if text is not None and (len(text) > 13 or not all(" " <= c <= "~" for c in text)):
            raise EdidBuildError(f"{label} {text!r}: need at most 13 printable ASCII characters")
    if len(p.standard) > 8:
        raise EdidBuildError(f"standard: {len(p.standard)} modes, block 0 holds 8")
    for vic in p.vics:
        if vic not in VIC_TIMINGS:
            raise EdidBuildError(f"vics: {vic} is not a CTA-861 VIC (1-127, 193-219)")


def _check_range(label: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise EdidBuildError(f"{label} {value}: need {low}-{high}")


def _base_block(p: EdidParams, descriptors: list[bytes], *, extensions: int) -> bytes:
    b = bytearray(EDID_BLOCK_SIZE)
    b[0:8] = b"\x00\xff\xff\xff\xff\xff\xff\x00"
    letters = [ord(c) - 64 for c in p.manufacturer]
    vendor = letters[0] << 10 | letters[1] << 5 | letters[2]
    b[8:10] = vendor.to_bytes(2, "big")
    b[10:12] = p.product_code.to_bytes(2, "little")
    b[12:16] = p.serial_number.to_bytes(4, "little")
    b[16] = 0xFF if p.model_year else p.week
    b[17] = p.year - 1990
    b[18:20] = b"\x01\x04"
    b[20] = 0x80 | (p.bits_per_color - 4) // 2 << 4 | _INTERFACE_CODES[p.interface]
    if p.size_mm[0] and p.size_mm[1]:
        b[21] = min(max(round(p.size_mm[0] / 10), 1), 255)
        b[22] = min(max(round(p.size_mm[1] / 10), 1), 255)
    b[23] = 120  # gamma 2.2
    # sRGB is the default colour space; the first DTD is the native mode and refresh.
    b[24] = 0x06
    b[25:35] = _SRGB_CHROMATICITY
    b[38:54] = b"\x01" * 16
    for i, mode in enumerate(p.standard):
        b[38 + 2 * i:40 + 2 * i] = _standard_timing(mode, field=f"standard[{i}]")
    for i, descriptor in enumerate(descriptors):
        b[54 + _DTD_SIZE * i:54 + _DTD_SIZE * (i + 1)] = descriptor
    b[126] = extensions
    return _with_checksum(b)


def _display_descriptors(p: EdidParams, dtds: list[_Dtd]) -> list[bytes]:
    """Name, serial string and range limits, then dummies up to the free slots."""
    descriptors = []
    if p.name is not None:
        descriptors.append(_string_descriptor(0xFC, p.name))
    if p.serial_string is not None:
        descriptors.append(_string_descriptor(0xFF, p.serial_string))
    descriptors.append(_range_limits(dtds, p.vics))
    # Block 0 keeps one slot for the preferred timing; extra DTDs take the slots left.
    free = _DESCRIPTOR_SLOTS - len(descriptors) - len(dtds)
    descriptors += [bytes([0, 0, 0, 0x10]) + bytes(14)] * max(free, 0)
    return descriptors


def _string_descriptor(tag: int, text: str) -> bytes:
    body = text.encode("ascii")
    if len(body) < 13:
        body = (body + b"\n").ljust(13, b" ")
    return bytes([0, 0, 0, tag, 0]) + body


def _range_limits(dtds: list[_Dtd], vics: tuple[int, ...]) -> bytes:
    """Range limits wide enough for every timing, "range limits only" (no formula)."""
    max_refresh = max([d.refresh_hz for d in dtds] + [VIC_TIMINGS[v][2] / 1e6 for v in vics])
    # The VIC table has no pixel clocks: with VICs, allow the largest clock a byte holds.
    max_clock_10mhz = 255 if vics else math.ceil(max(d.pixel_clock_khz for d in dtds) / 10000)
    return bytes([
        0, 0, 0, 0xFD, 0,
        1, min(max(math.ceil(max_refresh) + 1, 61), 255),
        1, 255,
        min(max(max_clock_10mhz, 1), 255),
        0x01, 0x0A, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    ])


def _standard_timing(mode: Mode, *, field: str) -> bytes:
    refresh, rest = divmod(mode.refresh_mhz, 1000)
    if mode.interlaced or rest or not 60 <= refresh <= 123:
        raise EdidBuildError(f"{field} {mode}: a standard timing needs a whole 60-123 Hz refresh")
    if mode.width % 8 or not 256 <= mode.width <= 2288:
        raise EdidBuildError(f"{field} {mode}: width must be a multiple of 8 in 256-2288")
    for code, (hr, vr) in enumerate(_STANDARD_ASPECTS):
        if mode.width * vr // hr == mode.height:
            return bytes([mode.width // 8 - 31, code << 6 | (refresh - 60)])
    raise EdidBuildError(f"{field} {mode}: aspect must be 16:10, 4:3, 5:4 or 16:9")


def _detailed_timing(mode: Mode, size_mm: tuple[int, int], *, field: str) -> _Dtd:
    """An 18-byte DTD: CVT RB1 blanking, widened until the refresh is as close as it gets."""
    if mode.interlaced and mode.height % 2:
        raise EdidBuildError(f"{field} {mode}: an interlaced height must be even")
    lines = mode.height // 2 if mode.interlaced else mode.height
    if not 1 <= mode.width <= 4095 or not 1 <= lines <= 4095:
        raise EdidBuildError(f"{field} {mode}: a DTD holds at most 4095x4095 active pixels")
    target = (mode.refresh_mhz or _DEFAULT_REFRESH_MHZ) / 1000
    if not 1 <= target <= 1000:
        raise EdidBuildError(f"{field} {mode}: refresh must be 1-1000 Hz")
    frame_rate = target / 2 if mode.interlaced else target
    cvt = cvt_timing(mode.width, mode.height, frame_rate, rb=1)
    field_extra = 0.5 if mode.interlaced else 0.0
    best: tuple[float, int, int, int] | None = None
    for extra_lines in range(16):
        vblank = max(cvt.vblank // 2 if mode.interlaced else cvt.vblank, _MIN_VBLANK)
        vblank += extra_lines
        for extra_pixels in range(96):
            htotal = mode.width + cvt.hblank + extra_pixels
            vtotal = lines + vblank + field_extra
            clock_10khz = max(round(target * htotal * vtotal / 10000), 1)
            error = abs(clock_10khz * 10000 / (htotal * vtotal) - target)
            if best is None or error < best[0] - 1e-9:
                best = (error, clock_10khz, htotal - mode.width, vblank)
    assert best is not None
    _, clock_10khz, hblank, vblank = best
    if clock_10khz * 10 < _MIN_DTD_CLOCK_KHZ:
        # edid-decode (and the kernel) take a DTD under 10 MHz for garbage.
        raise EdidBuildError(f"{field} {mode}: needs only a {clock_10khz / 100:.2f} MHz pixel "
                             f"clock, a DTD needs at least {_MIN_DTD_CLOCK_KHZ / 1000:.0f} MHz")
    if clock_10khz * 10 > _MAX_DTD_CLOCK_KHZ:
        raise EdidBuildError(f"{field} {mode}: needs a {clock_10khz / 100:.2f} MHz pixel clock, "
                             f"a DTD holds at most {_MAX_DTD_CLOCK_KHZ / 1000:.2f} MHz")
    vsync = min(cvt.vsync, 15)
    data = _dtd_bytes(mode, lines, clock_10khz, hblank, vblank, vsync, size_mm)
    refresh = clock_10khz * 10000 / ((mode.width + hblank) * (lines + vblank + field_extra))
    return _Dtd(data, clock_10khz * 10, refresh)


def _dtd_bytes(mode: Mode, lines: int, clock_10khz: int, hblank: int, vblank: int, vsync: int,
               size_mm: tuple[int, int]) -> bytes:
    hfront, hsync, vfront = 48, 32, 3
    w, h = size_mm
    # Digital separate sync, +hsync -vsync as reduced blanking has it.
    flags = 0x1A | (0x80 if mode.interlaced else 0)
    return bytes([
        clock_10khz & 0xFF, clock_10khz >> 8,
        mode.width & 0xFF, hblank & 0xFF, (mode.width >> 8) << 4 | hblank >> 8,
        lines & 0xFF, vblank & 0xFF, (lines >> 8) << 4 | vblank >> 8,
        hfront, hsync, vfront << 4 | vsync, 0,
        w & 0xFF, h & 0xFF, (w >> 8) << 4 | h >> 8,
        0, 0, flags,
    ])


def _cta_extension(p: EdidParams, dtds: list[_Dtd]) -> bytes:
    # A Video Capability Data Block: RGB quantization selectable, IT and CE underscanned.
    blocks = bytearray([0xE2, 0x00, 0x4A])
    for start in range(0, len(p.vics), 31):
        chunk = p.vics[start:start + 31]
        blocks += bytes([0x40 | len(chunk)]) + bytes(chunk)
    room = EDID_BLOCK_SIZE - 1 - 4 - len(blocks)
    if len(dtds) * _DTD_SIZE > room:
        raise EdidBuildError(f"detailed: {len(dtds)} timings do not fit beside the VICs "
                             f"(room for {room // _DTD_SIZE} in the CTA-861 block)")
    b = bytearray(EDID_BLOCK_SIZE)
    # Underscanned IT formats; the first DTD is native, so no VIC overrides it as preferred.
    b[0:4] = bytes([0x02, 0x03, 4 + len(blocks), 0x81])
    b[4:4 + len(blocks)] = blocks
    for i, dtd in enumerate(dtds):
        start = 4 + len(blocks) + _DTD_SIZE * i
        b[start:start + _DTD_SIZE] = dtd.data
    return _with_checksum(b)


def _with_checksum(block: bytearray) -> bytes:
    block[127] = -sum(block[:127]) & 0xFF
    return bytes(block)
