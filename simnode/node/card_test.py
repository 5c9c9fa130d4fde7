"""card: the simulated monitors, their lookup by any of their names, plugging them, and the
DDC/CI each one answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from draplugin.node import ddcmap
from libdisplay.hardware import drm
from libdisplay.hardware.ddc import DdcClient
from libdisplay.hardware.edid import decode_edid
from libdisplay.sim import sysfs as sysfs_tree
from libdisplay.sim.ddc import FakeClock
from simnode.node import card


@pytest.mark.parametrize("count", [0, 17], ids=["too-few", "too-many"])
def test_monitor_count_out_of_range_is_refused(count: int) -> None:
    with pytest.raises(card.CardError, match=f"--monitors must be 1-16, got {count}"):
        card.monitors(count)


def test_sixteen_monitors_are_apart_in_every_name(tmp_path: Path) -> None:
    chosen = card.monitors(16)
    for key in ("device", "connector", "output", "i2c_bus", "name"):
        values = [getattr(m, key) for m in chosen]
        assert len(set(values)) == 16, (key, values)
    assert [m.output for m in chosen] == [f"X{n}" for n in range(1, 17)]
    assert chosen[:3] == card.monitors(3)
    card.write_card(tmp_path, chosen)
    for monitor in chosen:
        assert monitor.status_file(tmp_path).read_text().strip() == "connected"
        assert decode_edid(monitor.edid()).monitor_name == monitor.name


@pytest.mark.parametrize(
    "name", ["card0-dp-1", "DP-1", "X2", "CARD0-DP-1"], ids=["device", "connector", "output",
                                                             "upper"]
)
def test_find_takes_device_connector_or_output(name: str) -> None:
    assert card.find(card.monitors(3), name).device == "card0-dp-1"


def test_find_names_the_devices_it_has() -> None:
    with pytest.raises(card.CardError, match="no device 'card0-dp-2' on this node"):
        card.find(card.monitors(2), "card0-dp-2")


def test_every_monitor_prefers_its_own_mode() -> None:
    chosen = card.monitors(3)
    preferred = {decode_edid(m.edid()).preferred_mode for m in chosen}
    assert len(preferred) == len(chosen)


def test_plug_out_and_in_changes_what_sysfs_says(tmp_path: Path) -> None:
    chosen = card.monitors(2)
    card.write_card(tmp_path, chosen)
    card.plug(tmp_path, chosen[1], connected=False)
    status = tmp_path / "sys" / "class" / "drm" / "card0-DP-1" / "status"
    assert status.read_text() == "disconnected\n"
    card.plug(tmp_path, chosen[1], connected=True)
    assert status.read_text() == "connected\n"
    found = drm.read_card("card0", sysfs_root=tmp_path / "sys")
    assert {c.name for c in found.connectors if c.connected} == {"card0-HDMI-A-1", "card0-DP-1"}


def test_each_connector_names_its_bus_and_the_dev_node_is_left_free(tmp_path: Path) -> None:
    chosen = card.monitors(3)
    card.write_card(tmp_path, chosen)
    (found,) = drm.enumerate_cards(sysfs_root=tmp_path / "sys", dev_root=tmp_path / "dev")
    buses = {c.device_name: c.i2c_bus for c in found.connectors}
    assert buses == {m.device: m.i2c_bus for m in chosen}
    assert [m.i2c_node(tmp_path) for m in chosen if m.i2c_node(tmp_path).exists()] == []
    assert ddcmap.delivered_buses(sysfs_tree.dev_root(tmp_path)) == ()


@pytest.mark.parametrize(
    ("device", "inputs", "current"),
    [("card0-hdmi-a-1", ("DisplayPort-1", "HDMI-1", "HDMI-2"), "HDMI-1"),
     ("card0-dp-1", ("DisplayPort-1", "DisplayPort-2", "HDMI-1"), "DisplayPort-1")],
    ids=["hdmi", "dp"],
)
def test_the_operators_probe_reads_each_monitor_on_its_own_input(
    device: str, inputs: tuple[str, ...], current: str
) -> None:
    monitor = card.find(card.monitors(3), device)
    clock = FakeClock()
    client = DdcClient(monitor.ddc(clock=clock), sleep=clock.sleep, clock=clock)
    state = ddcmap.probe(client)
    assert state.supported and state.capabilities == monitor.capabilities()
    assert {0x10, 0x12, 0x60, 0xD6} <= set(state.vcp_codes)
    assert (state.inputs, state.input) == (inputs, current)
    assert (state.brightness, state.contrast, state.power) == (card.BRIGHTNESS, card.CONTRAST,
                                                               "on")
    assert client.read_edid() == monitor.edid()
