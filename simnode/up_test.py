"""up: what it checks before starting anything, with the message a user acts on, and the
simulated monitors it serves on the card's i2c buses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from draplugin.node import ddcmap
from libdisplay.hardware import mccs
from libdisplay.hardware.ddc import DdcClient
from libdisplay.hardware.ddc_socket import SocketI2c
from libdisplay.sim import sysfs as sysfs_tree
from simnode import card, up


def test_missing_tools_say_where_they_come_from(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(up.UpError) as caught:
        up.check_tools()
    message = str(caught.value)
    assert message.startswith("not found on PATH: Xvfb (from the Debian package xvfb); weston")
    assert "run ./pants once to make the trixie root" in message


def test_the_checkouts_weston_14_goes_first_on_path(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    bin_dir = tmp_path / "build-support" / "trixie" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "weston").write_text("#!/bin/sh\n")
    monkeypatch.setenv("PATH", "/usr/bin")
    up.use_trixie_compositor(tmp_path / "dist")
    up.use_trixie_compositor(tmp_path / "dist")
    assert os.environ["PATH"] == f"{bin_dir}:/usr/bin"


def test_a_missing_pex_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(up.UpError, match=r"declare\.pex is missing: .*`./pants package ::`"):
        up.pex(tmp_path, "declare")


@pytest.mark.parametrize(
    ("pex", "expected"),
    [("/repo/dist/simnode/simnode.pex", Path("/repo/dist")), (None, Path("dist"))],
    ids=["beside-this-pex", "cwd"],
)
def test_default_dist(monkeypatch: pytest.MonkeyPatch, pex: str | None, expected: Path) -> None:
    if pex is None:
        monkeypatch.delenv("PEX", raising=False)
    else:
        monkeypatch.setenv("PEX", pex)
    assert up.default_dist() == expected


def test_monitors_are_served_where_the_operator_looks_and_stop_with_up(tmp_path: Path) -> None:
    chosen = card.monitors(2)
    card.write_card(tmp_path, chosen)
    servers = up.serve_monitors(tmp_path, chosen)
    try:
        dev = sysfs_tree.dev_root(tmp_path)
        assert ddcmap.delivered_buses(dev) == tuple(m.i2c_bus for m in chosen)
        for monitor in chosen:
            with SocketI2c(monitor.i2c_node(tmp_path)) as bus:
                assert DdcClient(bus).get_vcp(mccs.BRIGHTNESS).current == card.BRIGHTNESS
    finally:
        up.stop_monitors(servers)
    assert servers == {}
    assert [m for m in chosen if m.i2c_node(tmp_path).exists()] == []


def test_a_bus_that_cannot_be_served_stops_the_others(tmp_path: Path) -> None:
    chosen = card.monitors(3)
    card.write_card(tmp_path, chosen)
    chosen[1].i2c_node(tmp_path).touch()  # a plain file, as an older tree had there
    with pytest.raises(up.UpError, match="cannot serve the DDC/CI of card0-dp-1: .*i2c-4"):
        up.serve_monitors(tmp_path, chosen)
    assert not chosen[0].i2c_node(tmp_path).exists(), "the first one's socket is removed"
    assert not chosen[2].i2c_node(tmp_path).exists(), "the last one was never started"
