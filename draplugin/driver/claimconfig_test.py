from __future__ import annotations

import pytest

from draplugin.driver.claimconfig import (
    API_VERSION,
    KIND,
    ClaimConfigError,
    DisplayConfig,
    decode,
    from_json,
    from_stored,
)
from libdisplay.hardware.modes import Mode


def params(**fields: object) -> dict[str, object]:
    return {"apiVersion": API_VERSION, "kind": KIND, **fields}


GOOD = {
    "empty": (params(), DisplayConfig()),
    "mode": (params(mode="1920x1080@60"), DisplayConfig(mode=Mode(1920, 1080, 60000))),
    "preferred": (params(mode="preferred"), DisplayConfig(mode="preferred")),
    "output": (params(transform="rotate-90", scale=2),
               DisplayConfig(transform="rotate-90", scale=2)),
    "ddc-bounds": (params(brightness=0, contrast=100),
                   DisplayConfig(brightness=0, contrast=100)),
    "input-any-case": (params(input="hdmi-1"), DisplayConfig(input="HDMI-1")),
    "power": (params(power="standby"), DisplayConfig(power="standby")),
}


@pytest.mark.parametrize("case", list(GOOD), ids=list(GOOD))
def test_decode_good(case: str) -> None:
    raw, expected = GOOD[case]
    assert decode(raw, source="claim config 0") == expected


BAD = {
    "not-object": (["mode"], "parameters must be an object, not ['mode']"),
    "unknown-field": (params(rotation=90), "unknown field 'rotation'"),
    "no-kind": (
        {"apiVersion": API_VERSION, "mode": "preferred"}, "'display.liken.sh/v1alpha1'/None"
    ),
    "old-version": ({"apiVersion": "display.liken.sh/v1", "kind": KIND}, "'display.liken.sh/v1'"),
    "mode-type": (params(mode=60), "field 'mode' must be a string"),
    "mode-text": (params(mode="1920x"), "field 'mode' value '1920x'"),
    "transform": (params(transform="90"), "field 'transform' value '90'"),
    "scale-zero": (params(scale=0), "field 'scale' value 0 is out of range 1-4"),
    "scale-bool": (
        params(scale=True), "field 'scale' must be a whole number from 1 to 4, not True"
    ),
    "scale-float": (params(scale=1.5), "field 'scale' must be a whole number"),
    "brightness": (params(brightness=101), "field 'brightness' value 101 is out of range 0-100"),
    "contrast": (params(contrast=-5), "field 'contrast' value -5 is out of range 0-100"),
    "input": (params(input="USB-C"), "field 'input' value 'USB-C' is not an input source"),
    "input-type": (params(input=17), "field 'input' value 17"),
    "power": (params(power="sleep"), "field 'power' value 'sleep' is not one of on, standby"),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_decode_bad_names_source_field_and_value(case: str) -> None:
    raw, message = BAD[case]
    with pytest.raises(ClaimConfigError, match="^class config 2: ") as err:
        decode(raw, source="class config 2")
    assert message in str(err.value)


def test_overlay_later_stated_fields_win() -> None:
    cls = DisplayConfig(mode=Mode(1920, 1080, 60000), brightness=50, scale=2)
    claim = DisplayConfig(mode="preferred", scale=1)
    assert cls.overlay(claim) == DisplayConfig(mode="preferred", brightness=50, scale=1)


def test_json_round_trip_and_groups() -> None:
    config = DisplayConfig(mode=Mode(1280, 720, 60000), transform="flipped", power="off")
    assert config.to_json() == {"mode": "1280x720@60", "transform": "flipped", "power": "off"}
    assert from_json(config.to_json()) == config
    assert config.states_output
    assert config.ddc_settings == ("power",)
    assert not DisplayConfig(brightness=3).states_output


def test_stored_configs_leave_out_what_no_longer_decodes() -> None:
    config, dropped = from_stored({"mode": "1920x1080@60", "scale": 9, "colour": "red"},
                                  source="checkpointed config")
    assert config == DisplayConfig(mode=Mode(1920, 1080, 60000))
    assert [d.split(":")[0] for d in dropped] == ["checkpointed config"] * 2
    assert any("'scale' value 9" in d for d in dropped)
    assert any("unknown field 'colour'" in d for d in dropped)
    assert from_stored("junk", source="s")[0] == DisplayConfig()
