"""Display modes and their one string form, shared by EDID, sysfs, weston.ini and claims.

A mode string is `WIDTHxHEIGHT` with an optional `@REFRESH` in Hz (an integer or a
decimal such as `59.94`) and an optional `i` for interlaced: `1920x1080@60`,
`1920x1080i@60`, `3840x2160@59.94`. Refresh is kept in millihertz so that equality is
exact; matching a requested mode to a monitor's modes tolerates rounding (`59.94` asked,
`59.940` offered; `60` asked, `60.000` or `59.94` offered).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_MODE_RE = re.compile(
    r"^(?P<w>[1-9][0-9]{0,4})x(?P<h>[1-9][0-9]{0,4})(?P<i>i)?(?:@(?P<r>[0-9]{1,3}(?:\.[0-9]{1,3})?))?$"
)

# A requested refresh matches an offered one within this many millihertz: 60 ~ 59.94.
_REFRESH_TOLERANCE_MHZ = 500


class ModeError(ValueError):
    """A mode string that does not parse, or that names nothing the monitor offers."""


@dataclass(frozen=True, slots=True, order=True)
class Mode:
    """One video mode. `refresh_mhz` is the frame rate (field rate for interlaced), 0 if unknown."""

    width: int
    height: int
    refresh_mhz: int = 0
    interlaced: bool = False

    @property
    def refresh_hz(self) -> float:
        return self.refresh_mhz / 1000

    def __str__(self) -> str:
        text = f"{self.width}x{self.height}{'i' if self.interlaced else ''}"
        if self.refresh_mhz:
            hz = f"{self.refresh_mhz / 1000:.3f}".rstrip("0").rstrip(".")
            text += f"@{hz}"
        return text


def parse_mode(text: str) -> Mode:
    """Parse `1920x1080@60`; raises ModeError naming the text when it is not a mode."""
    match = _MODE_RE.match(text.strip())
    if match is None:
        raise ModeError(f"not a mode: {text!r} (expected WIDTHxHEIGHT[@HZ], e.g. 1920x1080@60)")
    refresh = match.group("r")
    return Mode(
        width=int(match.group("w")),
        height=int(match.group("h")),
        refresh_mhz=round(float(refresh) * 1000) if refresh else 0,
        interlaced=match.group("i") is not None,
    )


def find_mode(wanted: Mode, offered: Iterable[Mode]) -> Mode | None:
    """The offered mode that `wanted` names: same size and scan; nearest refresh within tolerance.

    A `wanted` without refresh takes the highest refresh offered at that size. An offered
    mode without refresh (sysfs `modes` lists none) matches any refresh asked at its size,
    after every mode whose refresh is known.
    """
    same_size = [
        m
        for m in offered
        if (m.width, m.height, m.interlaced) == (wanted.width, wanted.height, wanted.interlaced)
    ]
    if not same_size:
        return None
    if not wanted.refresh_mhz:
        return max(same_size, key=lambda m: m.refresh_mhz)
    known = [m for m in same_size if m.refresh_mhz]
    if known:
        best = min(known, key=lambda m: abs(m.refresh_mhz - wanted.refresh_mhz))
        if abs(best.refresh_mhz - wanted.refresh_mhz) <= _REFRESH_TOLERANCE_MHZ:
            return best
    return next((m for m in same_size if not m.refresh_mhz), None)
