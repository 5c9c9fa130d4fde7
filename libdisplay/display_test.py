from __future__ import annotations

import re

import pytest

from libdisplay.display import (
    DEVICE_LABEL,
    NODE_LABEL,
    DisplaySpec,
    DisplaySpecError,
    display_name,
    labels,
    parse_spec,
)
from libdisplay.hardware.modes import Mode


def test_display_name_joins_node_and_device() -> None:
    assert display_name("kiosk-3", "card0-hdmi-a-1") == "kiosk-3.card0-hdmi-a-1"


def test_display_name_of_long_nodes_stays_valid_and_distinct() -> None:
    a = display_name("n" * 250 + "a", "card0-dp-1")
    b = display_name("n" * 250 + "b", "card0-dp-1")
    assert len(a) <= 253 and len(b) <= 253
    assert a != b
    assert a.endswith(".card0-dp-1")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (None, DisplaySpec()),
        ({}, DisplaySpec()),
        ({"mode": "preferred"}, DisplaySpec()),
        ({"mode": "1280x720@60"}, DisplaySpec(mode=Mode(1280, 720, 60000))),
        ({"transform": "rotate-90", "scale": 2}, DisplaySpec(transform="rotate-90", scale=2)),
        ({"power": "Off"}, DisplaySpec(power="Off")),
        ({"power": "Standby"}, DisplaySpec(power="Standby")),
    ],
    ids=["none", "empty", "preferred", "mode", "transform-scale", "power-off", "power-standby"],
)
def test_parse_spec_accepts(spec: dict[str, object] | None, expected: DisplaySpec) -> None:
    assert parse_spec(spec) == expected


@pytest.mark.parametrize(
    ("spec", "names"),
    [
        ({"mode": "1920x1080@"}, "spec.mode"),
        ({"mode": 60}, "spec.mode"),
        ({"transform": "upside-down"}, "spec.transform"),
        ({"scale": 0}, "spec.scale"),
        ({"scale": True}, "spec.scale"),
        ({"brightness": 50}, "brightness"),
        # The claim's lower-case words are not the Display's values (the CRD's enum).
        ({"power": "off"}, "spec.power must be one of On, Off, Standby, not 'off'"),
        ({"power": True}, "spec.power"),
    ],
    ids=["bad-mode", "mode-not-string", "bad-transform", "scale-zero", "scale-bool", "unknown",
         "power-lower-case", "power-bool"],
)
def test_parse_spec_rejects_naming_the_field(spec: dict[str, object], names: str) -> None:
    with pytest.raises(DisplaySpecError, match=names):
        parse_spec(spec)


# The apiserver's label value rule: at most 63 characters, alphanumeric at both ends.
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def test_labels_of_short_names_are_the_names() -> None:
    assert labels("kiosk-3", "card0-hdmi-a-1") == {NODE_LABEL: "kiosk-3",
                                                   DEVICE_LABEL: "card0-hdmi-a-1"}


def test_labels_of_long_node_names_stay_valid_and_distinct() -> None:
    base = "rack-7." + "a" * 60
    first = labels(base + ".example.com", "card0-dp-1")[NODE_LABEL]
    second = labels(base + ".example.org", "card0-dp-1")[NODE_LABEL]
    assert first != second
    for value in (first, second, labels("n-" * 126 + "x", "card0-dp-1")[NODE_LABEL]):
        assert _LABEL_VALUE.match(value), value
