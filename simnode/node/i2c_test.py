"""i2c: the simulated monitors `up` serves on the card's i2c buses, where the operator looks."""

from __future__ import annotations

from pathlib import Path

import pytest

from draplugin.node import ddcmap
from libdisplay.hardware import mccs
from libdisplay.hardware.ddc import DdcClient
from libdisplay.hardware.ddc_socket import SocketI2c
from libdisplay.sim import sysfs as sysfs_tree
from simnode.node import card, i2c
from simnode.node.checkout import UpError


def test_monitors_are_served_where_the_operator_looks_and_stop_with_up(tmp_path: Path) -> None:
    chosen = card.monitors(2)
    card.write_card(tmp_path, chosen)
    servers = i2c.serve_monitors(tmp_path, chosen)
    try:
        dev = sysfs_tree.dev_root(tmp_path)
        assert ddcmap.delivered_buses(dev) == tuple(m.i2c_bus for m in chosen)
        for monitor in chosen:
            with SocketI2c(monitor.i2c_node(tmp_path)) as bus:
                assert DdcClient(bus).get_vcp(mccs.BRIGHTNESS).current == card.BRIGHTNESS
    finally:
        i2c.stop_monitors(servers)
    assert servers == {}
    assert [m for m in chosen if m.i2c_node(tmp_path).exists()] == []


def test_a_bus_that_cannot_be_served_stops_the_others(tmp_path: Path) -> None:
    chosen = card.monitors(3)
    card.write_card(tmp_path, chosen)
    chosen[1].i2c_node(tmp_path).touch()  # a plain file, as an older tree had there
    with pytest.raises(UpError, match="cannot serve the DDC/CI of card0-dp-1: .*i2c-4"):
        i2c.serve_monitors(tmp_path, chosen)
    assert not chosen[0].i2c_node(tmp_path).exists(), "the first one's socket is removed"
    assert not chosen[2].i2c_node(tmp_path).exists(), "the last one was never started"
