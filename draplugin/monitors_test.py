"""monitors: a connector's EDID is decoded once per distinct sysfs read of it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from draplugin import monitors
from libdisplay.compositor import outputs
from libdisplay.hardware import drm
from libdisplay.hardware.edid import Edid, decode_edid
from libdisplay.sim import sysfs as sysfs_tree
from libdisplay.sim.edid import EdidParams, build_edid


@pytest.fixture(name="decodes")
def decodes_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bytes]]:
    """The EDIDs decoded while the test runs, through a cache emptied before and after."""
    seen: list[bytes] = []

    def counting(raw: bytes) -> Edid:
        seen.append(raw)
        return decode_edid(raw)

    # read_monitor looks decode_edid up in its own module at each call.
    monkeypatch.setattr(outputs, "decode_edid", counting)
    monitors.read_monitor.cache_clear()
    yield seen
    monitors.read_monitor.cache_clear()


def _connector(root: Path, edid: bytes) -> drm.Connector:
    sysfs_tree.write_tree(root, sysfs_tree.SimCard(connectors=(
        sysfs_tree.SimConnector(type="HDMI-A", edid=edid,
                                 modes=("1920x1080", "1280x720")),)))
    (card,) = drm.enumerate_cards(sysfs_root=sysfs_tree.sysfs_root(root),
                                  dev_root=sysfs_tree.dev_root(root))
    (connector,) = card.connectors
    return connector


def test_equal_reads_share_one_decode(tmp_path: Path, decodes: list[bytes]) -> None:
    edid = build_edid(EdidParams(name="A", serial_number=1))
    first = _connector(tmp_path / "a", edid)
    again = _connector(tmp_path / "b", edid)  # another read, equal by value
    assert first is not again and first == again
    monitor = monitors.read_monitor(first)
    assert monitors.read_monitor(again) is monitor
    assert monitor == outputs.read_monitor(first)
    assert decodes == [edid, edid]  # the cached one, then the uncached check above


def test_another_monitor_or_mode_list_is_decoded_again(tmp_path: Path,
                                                       decodes: list[bytes]) -> None:
    a = build_edid(EdidParams(name="A", serial_number=1))
    b = build_edid(EdidParams(name="B", serial_number=2))
    connector = _connector(tmp_path / "a", a)
    swapped = _connector(tmp_path / "b", b)
    monitors.read_monitor(connector)
    assert monitors.read_monitor(swapped).edid == outputs.read_monitor(swapped).edid
    fewer_modes = replace(connector, modes=connector.modes[:1])
    assert fewer_modes != connector
    assert monitors.read_monitor(fewer_modes).offered == outputs.read_monitor(fewer_modes).offered
    assert decodes == [a, b, b, a, a]
