from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from libdisplay.hardware import drm
from libdisplay.hardware.drm import Card, Connector
from libdisplay.hardware.modes import Mode
from libdisplay.sim.sysfs import SimCard, SimConnector, dev_root, sysfs_root, write_tree

REPO = Path(__file__).resolve().parents[2]
EDID = bytes([0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x00]) + bytes(120)


def _enumerate(root: Path) -> tuple[Card, ...]:
    return drm.enumerate_cards(sysfs_root=sysfs_root(root), dev_root=dev_root(root))


def _connector_dir(root: Path, name: str) -> Path:
    return sysfs_root(root) / "class" / "drm" / name


@pytest.mark.parametrize(
    ("sim", "expected"),
    [
        (
            SimConnector("HDMI-A", 1, enabled=True, dpms="On", edid=EDID,
                         modes=("1920x1080", "1280x720"), i2c_bus=3, connector_id=95),
            Connector("card0", "HDMI-A", 1, "connected", True, "On", EDID,
                      (Mode(1920, 1080), Mode(1280, 720)), 3, 95),
        ),
        (
            SimConnector("DP", 2, status="disconnected", i2c_bus=6, connector_id=101),
            Connector("card0", "DP", 2, "disconnected", False, "Off", b"", (), 6, 101),
        ),
        (
            SimConnector("eDP", 1, status="unknown", dpms="Standby"),
            Connector("card0", "eDP", 1, "unknown", False, "Standby", b"", (), None, None),
        ),
        (
            SimConnector("DVI-I", 1, edid=b"", modes=("1024x768",), i2c_bus=4),
            Connector("card0", "DVI-I", 1, "connected", False, "Off", b"",
                      (Mode(1024, 768),), 4, None),
        ),
        (
            SimConnector("DP", 1, i2c_bus=7, aux_bus=True, modes=("1920x1080i",)),
            Connector("card0", "DP", 1, "connected", False, "Off", b"",
                      (Mode(1920, 1080, interlaced=True),), 7, None),
        ),
    ],
    ids=["hdmi-connected", "dp-disconnected", "edp-unknown-no-ddc", "connected-empty-edid",
         "dp-aux-adapter-child"],
)  # fmt: skip
def test_connector_states_read_back(tmp_path: Path, sim: SimConnector, expected: Connector) -> None:
    write_tree(tmp_path, SimCard(connectors=(sim,)))
    (card,) = _enumerate(tmp_path)
    assert card.connectors == (expected,)


def test_card_identity_and_render_node(tmp_path: Path) -> None:
    write_tree(tmp_path, SimCard())
    write_tree(
        tmp_path,
        SimCard(index=1, pci_address="0000:03:00.0", pci_bridge="0000:00:01.0",
                driver="amdgpu", vendor_id=0x1002, render_minor=129),
    )  # fmt: skip
    assert _enumerate(tmp_path) == (
        Card("card0", 0, "0000:00:02.0", "i915", "renderD128", ()),
        Card("card1", 1, "0000:03:00.0", "amdgpu", "renderD129", ()),
    )


def test_card_without_render_node(tmp_path: Path) -> None:
    write_tree(tmp_path, SimCard(render_minor=None))
    (card,) = _enumerate(tmp_path)
    assert card.render_node is None


def test_only_delivered_cards_are_enumerated(tmp_path: Path) -> None:
    write_tree(tmp_path, SimCard(index=0))
    write_tree(tmp_path, SimCard(index=1, pci_address="0000:01:00.0", render_minor=129))
    (dev_root(tmp_path) / "dri" / "card0").unlink()
    assert [c.name for c in _enumerate(tmp_path)] == ["card1"]


def test_connectors_sorted_and_other_cards_excluded(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        SimCard(index=1, connectors=(SimConnector("HDMI-A", 2), SimConnector("DP", 1),
                                     SimConnector("HDMI-A", 1))),
    )  # fmt: skip
    write_tree(
        tmp_path,
        SimCard(index=10, pci_address="0000:04:00.0", render_minor=138,
                connectors=(SimConnector("DP", 3),)),
    )  # fmt: skip
    card1, card10 = _enumerate(tmp_path)
    assert [c.name for c in card1.connectors] == ["card1-DP-1", "card1-HDMI-A-1", "card1-HDMI-A-2"]
    assert [c.name for c in card10.connectors] == ["card10-DP-3"]


def test_missing_attribute_files_are_normal_states(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        SimCard(connectors=(SimConnector("HDMI-A", edid=EDID, modes=("1920x1080",), i2c_bus=3,
                                         connector_id=7, enabled=True, dpms="On"),)),
    )  # fmt: skip
    path = _connector_dir(tmp_path, "card0-HDMI-A-1")
    for name in ("status", "enabled", "dpms", "edid", "modes", "connector_id", "ddc"):
        (path / name).unlink()
    (card,) = _enumerate(tmp_path)
    assert card.connectors == (
        Connector("card0", "HDMI-A", 1, "unknown", False, None, b"", (), None, None),
    )


def test_missing_driver_and_device_links(tmp_path: Path) -> None:
    write_tree(tmp_path, SimCard())
    card_dir = sysfs_root(tmp_path) / "class" / "drm" / "card0"
    (card_dir / "device" / "driver").unlink()
    assert _enumerate(tmp_path)[0].driver is None
    (card_dir / "device").unlink()
    assert _enumerate(tmp_path)[0] == Card("card0", 0, None, None, None, ())


def test_modes_file_repeats_and_custom_names(tmp_path: Path) -> None:
    write_tree(tmp_path, SimCard(connectors=(SimConnector("HDMI-A"),)))
    modes = _connector_dir(tmp_path, "card0-HDMI-A-1") / "modes"
    # One line per refresh rate in the kernel's list, so sizes repeat; drivers may add odd names.
    modes.write_text("3840x2160\n3840x2160\n1920x1080\n1920x1080i\nFAKE-MODE\n1920x1080\n720x480\n")
    (card,) = _enumerate(tmp_path)
    assert card.connectors[0].modes == (
        Mode(3840, 2160), Mode(1920, 1080), Mode(1920, 1080, interlaced=True), Mode(720, 480),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("content", "status", "dpms"),
    [("connected\n", "connected", "On"), ("detecting\n", "unknown", None), ("", "unknown", None)],
    ids=["known", "strange-value", "empty-file"],
)
def test_unexpected_attribute_values(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: str, status: str, dpms: str | None
) -> None:
    write_tree(tmp_path, SimCard(connectors=(SimConnector("HDMI-A"),)))
    path = _connector_dir(tmp_path, "card0-HDMI-A-1")
    (path / "status").write_text(content)
    (path / "dpms").write_text(content.replace("connected", "On"))
    with caplog.at_level(logging.WARNING, logger="libdisplay.hardware.drm"):
        (card,) = _enumerate(tmp_path)
    assert (card.connectors[0].status, card.connectors[0].dpms) == (status, dpms)
    assert ("detecting" in caplog.text) == (content == "detecting\n")


def test_ddc_link_wins_over_an_aux_child(tmp_path: Path) -> None:
    write_tree(tmp_path, SimCard(connectors=(SimConnector("DP", i2c_bus=9, aux_bus=True),)))
    path = _connector_dir(tmp_path, "card0-DP-1")
    (path / "i2c-5").mkdir()  # a second adapter, sorting before i2c-9
    assert _enumerate(tmp_path)[0].connectors[0].i2c_bus == 5
    (path / "ddc").symlink_to("i2c-9")
    assert _enumerate(tmp_path)[0].connectors[0].i2c_bus == 9


def _no_class_drm(root: Path) -> None:
    (root / "sys").mkdir()


def _no_dev_dri(root: Path) -> None:
    (root / "sys" / "class" / "drm").mkdir(parents=True)


def _render_node_only(root: Path) -> None:
    write_tree(root, SimCard())
    (root / "dev/dri/card0").unlink()


def _card_not_in_sysfs(root: Path) -> None:
    write_tree(root, SimCard())
    (root / "dev/dri/card3").touch()


@pytest.mark.parametrize(
    ("make_tree", "error", "message"),
    [
        (lambda root: None, drm.SysfsNotFoundError, "does not exist"),
        (_no_class_drm, drm.SysfsNotFoundError, "no DRM driver"),
        (_no_dev_dri, drm.NoCardDeliveredError, "dri does not exist"),
        (_render_node_only, drm.NoCardDeliveredError, "holds no cardN node"),
        (_card_not_in_sysfs, drm.CardNotInSysfsError, "does not describe card3"),
    ],
    ids=["no-sysfs", "no-class-drm", "no-dev-dri", "render-node-only", "card-not-in-sysfs"],
)
def test_errors_are_typed_and_clear(
    tmp_path: Path, make_tree: Callable[[Path], None], error: type[drm.DrmError], message: str
) -> None:
    make_tree(tmp_path)
    with pytest.raises(error, match=message):
        _enumerate(tmp_path)


def test_unreadable_attribute_is_an_error_not_an_absence(tmp_path: Path) -> None:
    write_tree(tmp_path, SimCard(connectors=(SimConnector("HDMI-A"),)))
    status = _connector_dir(tmp_path, "card0-HDMI-A-1") / "status"
    status.unlink()
    status.mkdir()  # reading it fails with EISDIR, as an EIO from a driver would
    with pytest.raises(drm.SysfsReadError, match="cannot read .*status"):
        _enumerate(tmp_path)


def test_read_connector_and_card(tmp_path: Path) -> None:
    write_tree(tmp_path, SimCard(connectors=(SimConnector("HDMI-A", connector_id=3),)))
    root = sysfs_root(tmp_path)
    connector = drm.read_connector("card0-HDMI-A-1", sysfs_root=root)
    assert connector is not None and connector.connector_id == 3
    assert drm.read_connector("card0-DP-9", sysfs_root=root) is None
    assert drm.read_card("card0", sysfs_root=root).connectors == (connector,)
    with pytest.raises(drm.CardNotInSysfsError):
        drm.read_card("card1", sysfs_root=root)


@pytest.mark.parametrize(
    ("name", "parts", "label"),
    [
        ("card0-HDMI-A-1", ("card0", "HDMI-A", 1), "card0-hdmi-a-1"),
        ("card12-DP-3", ("card12", "DP", 3), "card12-dp-3"),
        ("card0-eDP-1", ("card0", "eDP", 1), "card0-edp-1"),
        ("card1-DVI-I-2", ("card1", "DVI-I", 2), "card1-dvi-i-2"),
        ("card0-Virtual-1", ("card0", "Virtual", 1), "card0-virtual-1"),
    ],
    ids=["hdmi", "two-digit-card", "edp", "dvi-i", "virtual"],
)
def test_connector_names_and_device_names(
    name: str, parts: tuple[str, str, int], label: str
) -> None:
    assert drm.split_connector_name(name) == parts
    assert drm.device_name(name) == label
    card, type_name, index = parts
    connector = Connector(card, type_name, index, "connected", False, None, b"", (), None, None)
    assert (connector.name, connector.device_name) == (name, label)
    assert connector.output_name == name.split("-", 1)[1]


@pytest.mark.parametrize(
    "name",
    ["card0", "card0-HDMI-A", "gpu0-HDMI-A-1", "card0-HDMI-A-x", "card0--1", "renderD128", "ttm"],
)
def test_bad_connector_names(name: str) -> None:
    with pytest.raises(drm.BadConnectorNameError, match="not a connector name"):
        drm.split_connector_name(name)


def _tree(root: Path) -> dict[str, str | bytes]:
    """Every path under root: a link's target, a file's bytes, or 'dir'."""
    found: dict[str, str | bytes] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            key = str(path.relative_to(root))
            if path.is_symlink():
                found[key] = "-> " + os.readlink(path)
            elif path.is_dir():
                found[key] = "dir"
            else:
                found[key] = path.read_bytes()
    return found


def _machine(root: Path) -> None:
    write_tree(
        root,
        SimCard(connectors=(
            SimConnector("HDMI-A", 1, edid=EDID, modes=("1920x1080",), i2c_bus=3,
                         connector_id=95, enabled=True, dpms="On"),
            SimConnector("DP", 1, status="disconnected", i2c_bus=6, aux_bus=True),
            SimConnector("eDP", 1, status="unknown"),
        )),
    )  # fmt: skip
    write_tree(
        root,
        SimCard(index=1, pci_address="0000:03:00.0", pci_bridge="0000:00:01.0",
                driver="amdgpu", render_minor=129,
                connectors=(SimConnector("DP", 2, i2c_bus=7, connector_id=120),)),
    )  # fmt: skip


def test_snapshot_reproduces_the_tree_exactly(tmp_path: Path) -> None:
    source, copy = tmp_path / "machine", tmp_path / "copy"
    _machine(source)
    # What a real sysfs also has and a snapshot leaves out.
    (source / "sys/class/drm/ttm").symlink_to("../../devices/virtual/drm/ttm")
    (source / "sys/devices/virtual/drm/ttm").mkdir(parents=True)
    status = drm.main(["snapshot", "--sysfs-root", str(sysfs_root(source)),
                       "--dev-root", str(dev_root(source)), str(copy)])  # fmt: skip
    assert status == 0
    expected = {k: v for k, v in _tree(source).items() if "ttm" not in k and "virtual" not in k}
    assert _tree(copy) == expected
    assert _enumerate(copy) == _enumerate(source)


def test_snapshot_refuses_a_used_destination(tmp_path: Path) -> None:
    _machine(tmp_path / "machine")
    (tmp_path / "copy" / "sys").mkdir(parents=True)
    with pytest.raises(drm.DrmError, match="already exists"):
        drm.snapshot(sysfs_root=tmp_path / "machine/sys", dev_root=tmp_path / "machine/dev",
                     dest=tmp_path / "copy")  # fmt: skip


def test_list_command_prints_cards_and_connectors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _machine(tmp_path)
    status = drm.main(["list", "--sysfs-root", str(sysfs_root(tmp_path)),
                       "--dev-root", str(dev_root(tmp_path))])  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    assert status == 0
    assert out[0].split() == ["card0", "pci", "0000:00:02.0", "driver", "i915", "render",
                              "renderD128"]  # fmt: skip
    hdmi = next(line for line in out if "card0-HDMI-A-1" in line).split()
    assert hdmi[:3] == ["card0-HDMI-A-1", "connected", "enabled"]
    assert "i2c-3" in hdmi and hdmi[-1] == "1920x1080"
    assert any(line.split()[:2] == ["card1-DP-2", "connected"] for line in out)


def test_list_command_error_exit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert drm.main(["list", "--sysfs-root", str(tmp_path / "nope")]) == 1
    assert "error: sysfs root" in capsys.readouterr().err


def test_module_runs_as_a_command() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "libdisplay.hardware.drm", "snapshot", "--help"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "DEST/sys and DEST/dev" in result.stdout


def test_a_connector_that_vanishes_while_read_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An MST connector is removed on unplug; half-read attributes are not a state of it."""
    write_tree(tmp_path, SimCard(connectors=(SimConnector("DP", 1), SimConnector("DP", 2))))
    real_modes = drm._modes

    def unplug_while_reading(path: Path) -> tuple[Mode, ...]:
        modes = real_modes(path)
        if path.parent.name == "card0-DP-2":
            shutil.rmtree(path.parent.resolve())
        return modes

    monkeypatch.setattr(drm, "_modes", unplug_while_reading)
    (card,) = _enumerate(tmp_path)
    assert [c.name for c in card.connectors] == ["card0-DP-1"]
