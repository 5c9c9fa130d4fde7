from __future__ import annotations

import pytest

from libdisplay.hardware.modes import Mode, ModeError, find_mode, parse_mode


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("1920x1080@60", Mode(1920, 1080, 60000)),
        ("3840x2160@59.94", Mode(3840, 2160, 59940)),
        ("1920x1080i@60", Mode(1920, 1080, 60000, interlaced=True)),
        ("1280x720", Mode(1280, 720)),
    ],
    ids=["integer-hz", "decimal-hz", "interlaced", "no-refresh"],
)
def test_parse_and_format_round_trip(text: str, mode: Mode) -> None:
    assert parse_mode(text) == mode
    assert str(mode) == text


@pytest.mark.parametrize(
    "text",
    ["", "1920x", "x1080", "0x1080@60", "1920x1080@", "1920*1080", "1920x1080@60Hz", "preferred"],
)
def test_bad_mode_strings_raise(text: str) -> None:
    with pytest.raises(ModeError, match="not a mode"):
        parse_mode(text)


def test_find_mode_tolerates_ntsc_rates_and_picks_highest_without_refresh() -> None:
    offered = [
        Mode(1920, 1080, 60000),
        Mode(1920, 1080, 59940),
        Mode(1920, 1080, 50000),
        Mode(1280, 720, 60000),
    ]
    assert find_mode(parse_mode("1920x1080@59.94"), offered) == Mode(1920, 1080, 59940)
    assert find_mode(parse_mode("1920x1080@60"), offered) == Mode(1920, 1080, 60000)
    assert find_mode(parse_mode("1920x1080"), offered) == Mode(1920, 1080, 60000)
    assert find_mode(parse_mode("1920x1080@75"), offered) is None
    assert find_mode(parse_mode("2560x1440@60"), offered) is None
    assert find_mode(parse_mode("1920x1080i@60"), offered) is None


def test_find_mode_matches_sysfs_modes_without_refresh_only_after_known_rates() -> None:
    sysfs = Mode(1920, 1080)
    assert find_mode(parse_mode("1920x1080@60"), [sysfs]) == sysfs
    assert find_mode(parse_mode("1920x1080@60"), [sysfs, Mode(1920, 1080, 60000)]) == Mode(
        1920, 1080, 60000
    )
    assert find_mode(parse_mode("1280x720@60"), [sysfs]) is None
