"""The user guide (docs/guide) held to the code it documents: the CDI spec a consumer gets,
the attributes the slice publishes, and the DisplayConfig values the driver accepts."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path, PurePosixPath

import pytest

from draplugin.driver import claimconfig
from draplugin.driver.delivery import LayoutDelivery
from draplugin.node import slices
from libdisplay.cdi import ClaimedOutput
from libdisplay.compositor.weston import TRANSFORMS
from libdisplay.hardware import drm
from libdisplay.hardware.modes import parse_mode
from libdisplay.sim import sysfs as sysfs_tree
from libdisplay.sim.edid import EdidParams, build_edid
from tests.deploy import displayconfig

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide"
UID = "4f6c2a3e-9d1b-4c1e-8f3a-2b7d5e6a9c01"


def _text(page: str) -> str:
    return (GUIDE / page).read_text()


def _code_blocks(page: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", _text(page), flags=re.DOTALL)


def _table(page: str) -> dict[str, list[str]]:
    """The rows of a page's tables whose first cell is one `code` word: word -> other cells."""
    rows = {}
    for line in _text(page).splitlines():
        found = re.match(r"^\| `([^`]+)` \|(.*)\|$", line)
        if found:
            rows[found[1]] = [cell.strip() for cell in found[2].split("|")]
    return rows


def test_consumer_page_shows_the_spec_the_driver_writes() -> None:
    delivery = LayoutDelivery(control=Path("/etc/weston/layout.sock"),
                              host_dir=Path("/var/run/display.liken.sh"),
                              container_dir=PurePosixPath("/var/run/display.liken.sh"),
                              cdi_dir=Path("/var/run/cdi"))
    built = delivery.build_spec(UID, [ClaimedOutput("card0-hdmi-a-1", "HDMI-A-1")])
    (shown,) = _code_blocks("consumer.md", "json")
    assert json.loads(shown) == json.loads(json.dumps(built).replace(UID, "<uid>"))


def test_consumer_page_names_every_variable_of_a_two_monitor_claim() -> None:
    delivery = LayoutDelivery(control=Path("/c"), host_dir=Path("/h"),
                              container_dir=PurePosixPath("/var/run/display.liken.sh"),
                              cdi_dir=Path("/cdi"))
    built = delivery.build_spec(UID, [ClaimedOutput("card0-hdmi-a-1", "HDMI-A-1"),
                                      ClaimedOutput("card0-dp-1", "DP-1")])
    names = {entry.split("=")[0] for device in built["devices"]  # type: ignore[attr-defined]
             for entry in device["containerEdits"]["env"]}
    generic = {re.sub(r"_CARD0_.*", "_<DEVICE>", name) for name in names}
    table = _table("consumer.md")
    assert generic | {"DISPLAY_OUTPUT"} == set(table)


def _full_device() -> dict[str, dict[str, object]]:
    """A monitor that states everything an EDID can, on a card with a PCI address."""
    edid = build_edid(EdidParams(manufacturer="DEL", product_code=0x411A, serial_number=77,
                                 serial_string="SN123", name="U2720Q", size_mm=(600, 340),
                                 preferred=parse_mode("3840x2160@60")))
    return _device(edid, ("3840x2160",))


def _device(edid: bytes, modes: tuple[str, ...]) -> dict[str, dict[str, object]]:
    with tempfile.TemporaryDirectory() as root:
        sysfs_tree.write_tree(Path(root), sysfs_tree.SimCard(connectors=(
            sysfs_tree.SimConnector(type="HDMI-A", edid=edid, modes=modes),)))
        cards = drm.enumerate_cards(sysfs_root=sysfs_tree.sysfs_root(Path(root)),
                                    dev_root=sysfs_tree.dev_root(Path(root)))
        (device,) = slices.build_devices(cards, ddc={"card0-hdmi-a-1": True})
    attributes: dict[str, dict[str, object]] = device["attributes"]
    return attributes


def test_attributes_page_lists_every_attribute_with_its_type() -> None:
    published = {name: next(iter(value)) for name, value in _full_device().items()}
    listed = {name: cells[0] for name, cells in _table("attributes.md").items()}
    assert listed == published


def test_attributes_page_says_which_are_always_there() -> None:
    """The page's advice (test before reading) rests on which attributes a bare monitor has."""
    bare = set(_device(b"", ()))
    always = {name for name, cells in _table("attributes.md").items() if cells[1] == "always"}
    assert always == bare - {slices.ADDRESS_ATTRIBUTE}


def _values(field: str) -> list[str]:
    return re.findall(r"`([^`]+)`", _table("displayconfig.md")[field][0])


@pytest.mark.parametrize(("field", "accepted"), [
    ("transform", TRANSFORMS),
    ("power", claimconfig.POWER_STATES),
    ("input", claimconfig.INPUTS),
])
def test_displayconfig_page_lists_the_values_the_driver_accepts(
        field: str, accepted: tuple[str, ...]) -> None:
    assert _values(field) == list(accepted)
    for value in accepted:
        assert displayconfig.violations({"apiVersion": displayconfig.API_VERSION,
                                         "kind": displayconfig.KIND, field: value}) == []


@pytest.mark.parametrize("field", list(displayconfig.RANGES))
def test_displayconfig_page_states_the_admission_ranges(field: str) -> None:
    low, high = displayconfig.RANGES[field]
    assert f"integer {low}-{high}" in _table("displayconfig.md")[field][0]


def test_displayconfig_page_covers_every_field() -> None:
    fields = set(displayconfig.FIELDS) - {"apiVersion", "kind"}
    assert fields == set(_table("displayconfig.md"))


def test_displayconfig_page_examples_of_mode_parse() -> None:
    for text in _values("mode"):
        if text != "preferred" and "WIDTH" not in text:
            parse_mode(text)
