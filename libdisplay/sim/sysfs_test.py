from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from libdisplay import fsutil
from libdisplay.hardware import drm
from libdisplay.hardware.modes import Mode, parse_mode
from libdisplay.sim.sysfs import (
    SimCard,
    SimConnector,
    SysfsTreeError,
    dev_root,
    hotplug,
    sysfs_root,
    write_tree,
)

# Two corpus EDIDs for hotplug tests: a 1080p monitor and a 4K television.
SMALL = "ACR-S240HL-b177db0a.bin"
LARGE = "AMZ-FireTV-a22703b2.bin"


@pytest.mark.parametrize(
    ("link", "target"),
    [
        ("sys/class/drm/card0", "../../devices/pci0000:00/0000:00:02.0/drm/card0"),
        ("sys/class/drm/card0-HDMI-A-1",
         "../../devices/pci0000:00/0000:00:02.0/drm/card0/card0-HDMI-A-1"),
        ("sys/class/drm/renderD128", "../../devices/pci0000:00/0000:00:02.0/drm/renderD128"),
        ("sys/devices/pci0000:00/0000:00:02.0/drm/card0/device", "../../../0000:00:02.0"),
        ("sys/devices/pci0000:00/0000:00:02.0/drm/renderD128/device", "../../../0000:00:02.0"),
        ("sys/devices/pci0000:00/0000:00:02.0/drm/card0/card0-HDMI-A-1/device", "../../card0"),
        ("sys/devices/pci0000:00/0000:00:02.0/drm/card0/card0-HDMI-A-1/ddc", "../../../i2c-3"),
        ("sys/devices/pci0000:00/0000:00:02.0/driver", "../../../bus/pci/drivers/i915"),
        ("sys/bus/pci/devices/0000:00:02.0", "../../../devices/pci0000:00/0000:00:02.0"),
        ("sys/bus/i2c/devices/i2c-3", "../../../devices/pci0000:00/0000:00:02.0/i2c-3"),
        ("sys/class/i2c-dev/i2c-3",
         "../../devices/pci0000:00/0000:00:02.0/i2c-3/i2c-dev/i2c-3"),
    ],
    ids=["class-card", "class-connector", "class-render", "card-device", "render-device",
         "connector-device", "connector-ddc", "pci-driver", "bus-pci", "bus-i2c", "class-i2c-dev"],
)  # fmt: skip
def test_links_are_spelled_as_the_kernel_spells_them(
    tmp_path: Path, link: str, target: str
) -> None:
    write_tree(tmp_path, SimCard(connectors=(SimConnector("HDMI-A", i2c_bus=3),)))
    assert os.readlink(tmp_path / link) == target
    assert (tmp_path / link).exists()


@pytest.mark.parametrize(
    ("path", "content"),
    [
        ("sys/class/drm/version", b"drm 1.1.0 20060810\n"),
        ("sys/class/drm/card0/dev", b"226:0\n"),
        ("sys/class/drm/card0/uevent",
         b"MAJOR=226\nMINOR=0\nDEVNAME=dri/card0\nDEVTYPE=drm_minor\n"),
        ("sys/class/drm/renderD128/dev", b"226:128\n"),
        ("sys/class/drm/card0-HDMI-A-1/status", b"connected\n"),
        ("sys/class/drm/card0-HDMI-A-1/enabled", b"enabled\n"),
        ("sys/class/drm/card0-HDMI-A-1/dpms", b"On\n"),
        ("sys/class/drm/card0-HDMI-A-1/modes", b"1920x1080\n1280x720\n"),
        ("sys/class/drm/card0-HDMI-A-1/connector_id", b"95\n"),
        ("sys/class/drm/card0-HDMI-A-1/uevent", b"DEVTYPE=drm_connector\n"),
        ("sys/class/drm/card0-HDMI-A-1/ddc/i2c-dev/i2c-3/dev", b"89:3\n"),
        ("sys/class/drm/card0/device/vendor", b"0x8086\n"),
        ("sys/class/drm/card0/device/class", b"0x030000\n"),
        ("dev/dri/card0", b""),
        ("dev/dri/renderD128", b""),
        ("dev/i2c-3", b""),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)  # fmt: skip
def test_attribute_contents(tmp_path: Path, path: str, content: bytes) -> None:
    write_tree(
        tmp_path,
        SimCard(connectors=(SimConnector("HDMI-A", enabled=True, dpms="On", i2c_bus=3,
                                         modes=("1920x1080", "1280x720"), connector_id=95),)),
    )  # fmt: skip
    assert (tmp_path / path).read_bytes() == content


def test_card_behind_a_bridge(tmp_path: Path) -> None:
    write_tree(tmp_path, SimCard(pci_address="0000:03:00.0", pci_bridge="0000:00:01.0"))
    assert os.readlink(tmp_path / "sys/class/drm/card0") == (
        "../../devices/pci0000:00/0000:00:01.0/0000:03:00.0/drm/card0"
    )


@pytest.mark.parametrize("i2c_nodes", [True, False], ids=["dev-i2c-written", "dev-i2c-left-out"])
def test_i2c_dev_nodes_can_be_left_to_the_caller(tmp_path: Path, i2c_nodes: bool) -> None:
    write_tree(tmp_path, SimCard(connectors=(SimConnector("HDMI-A", i2c_bus=3),)),
               i2c_nodes=i2c_nodes)
    assert (dev_root(tmp_path) / "i2c-3").exists() is i2c_nodes
    assert (dev_root(tmp_path) / "dri" / "card0").is_file()
    (card,) = drm.enumerate_cards(sysfs_root=sysfs_root(tmp_path), dev_root=dev_root(tmp_path))
    assert card.connectors[0].i2c_bus == 3, "sysfs still names the bus"


def test_aux_adapter_sits_under_the_connector_without_a_ddc_link(tmp_path: Path) -> None:
    write_tree(tmp_path, SimCard(connectors=(SimConnector("DP", i2c_bus=8, aux_bus=True),)))
    connector = tmp_path / "sys/devices/pci0000:00/0000:00:02.0/drm/card0/card0-DP-1"
    assert (connector / "i2c-8" / "name").is_file()
    assert not (connector / "ddc").exists()
    assert os.readlink(tmp_path / "sys/bus/i2c/devices/i2c-8") == (
        "../../../devices/pci0000:00/0000:00:02.0/drm/card0/card0-DP-1/i2c-8"
    )


def test_every_real_edid_reads_back_exactly(tmp_path: Path, testdata: Path) -> None:
    """All 430 corpus EDIDs and the 25 broken ones, each behind its own connector."""
    edid_dir = testdata / "edid"
    oracle = {f["file"]: f for f in json.loads((edid_dir / "oracle.json").read_text())["files"]}
    files = sorted(edid_dir.glob("*.bin")) + sorted((edid_dir / "broken").glob("*.bin"))
    assert len(files) == 455
    expected: dict[str, tuple[str, bytes, tuple[Mode, ...]]] = {}
    cards: dict[int, list[SimConnector]] = {}
    for number, path in enumerate(files):
        card, slot = divmod(number, 200)
        # The oracle writes a mode `WIDTHxHEIGHT[i]@HZ`; sysfs names it without the rate.
        dtd = oracle.get(path.name, {}).get("preferred_first_dtd")
        names = (dtd.split("@")[0],) if dtd else ()
        connector = SimConnector("HDMI-A", slot + 1, edid=path.read_bytes(), modes=names)
        cards.setdefault(card, []).append(connector)
        expected[f"card{card}-HDMI-A-{slot + 1}"] = (
            path.name, connector.edid, tuple(parse_mode(m) for m in names),
        )  # fmt: skip
    for card, connectors in cards.items():
        write_tree(
            tmp_path,
            SimCard(index=card, pci_address=f"0000:{card + 1:02x}:00.0",
                    render_minor=128 + card, connectors=tuple(connectors)),
        )  # fmt: skip
    cards_read = drm.enumerate_cards(sysfs_root=sysfs_root(tmp_path), dev_root=dev_root(tmp_path))
    found = {c.name: c for card in cards_read for c in card.connectors}
    assert found.keys() == expected.keys()
    for name, (file, edid, modes) in expected.items():
        assert (found[name].edid, found[name].modes) == (edid, modes), file
    assert sum(1 for c in found.values() if not c.edid) == 1  # broken/empty.bin


def _read(root: Path, connector: str) -> drm.Connector:
    found = drm.read_connector(connector, sysfs_root=sysfs_root(root))
    assert found is not None
    return found


def test_hotplug_plug_and_unplug(tmp_path: Path, testdata: Path) -> None:
    small = (testdata / "edid" / SMALL).read_bytes()
    large = (testdata / "edid" / LARGE).read_bytes()
    write_tree(tmp_path, SimCard(connectors=(SimConnector("HDMI-A", status="disconnected"),)))
    assert _read(tmp_path, "card0-HDMI-A-1").status == "disconnected"

    hotplug(tmp_path, "card0-HDMI-A-1", status="connected", edid=small, modes=["1920x1080"])
    plugged = _read(tmp_path, "card0-HDMI-A-1")
    assert (plugged.status, plugged.edid, plugged.modes) == (
        "connected", small, (Mode(1920, 1080),),
    )  # fmt: skip

    hotplug(tmp_path, "card0-HDMI-A-1", status="disconnected")
    pulled = _read(tmp_path, "card0-HDMI-A-1")
    assert (pulled.status, pulled.edid, pulled.modes) == ("disconnected", b"", ())

    hotplug(tmp_path, "card0-HDMI-A-1", status="connected", edid=large,
            modes=["3840x2160", "1920x1080"])  # fmt: skip
    replugged = _read(tmp_path, "card0-HDMI-A-1")
    assert (replugged.edid, replugged.modes[0]) == (large, Mode(3840, 2160))
    leftovers = [p.name for p in (sysfs_root(tmp_path) / "class/drm/card0-HDMI-A-1").iterdir()]
    assert not [name for name in leftovers if name.endswith(".tmp")]


@pytest.mark.parametrize(
    ("status", "order"),
    [("connected", ["edid", "modes", "status"]), ("disconnected", ["status", "modes", "edid"]),
     ("unknown", ["status", "modes", "edid"])],
    ids=["plug-status-last", "unplug-status-first", "unknown-status-first"],
)  # fmt: skip
def test_hotplug_write_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, status: str, order: list[str]
) -> None:
    """A reader that sees `connected` finds the new EDID; one that sees the old EDID is not
    told `disconnected` after it."""
    write_tree(tmp_path, SimCard(connectors=(SimConnector("HDMI-A"),)))
    written: list[str] = []
    real_write = fsutil.atomic_write

    def record(path: os.PathLike[str], data: bytes | str, *, mode: int = 0o644) -> None:
        written.append(Path(path).name)
        real_write(path, data, mode=mode)

    monkeypatch.setattr(fsutil, "atomic_write", record)
    hotplug(tmp_path, "card0-HDMI-A-1", status=status, edid=b"x")  # type: ignore[arg-type]
    assert written == order


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"connector": "card0-DP-1", "status": "connected"}, "no connector 'card0-DP-1'"),
        ({"connector": "card0-HDMI-A-1", "status": "plugged"}, "hotplug status 'plugged'"),
        ({"connector": "card0-HDMI-A-1", "status": "connected", "modes": ["1920x1080@60"]},
         "names no refresh"),
    ],
    ids=["missing-connector", "bad-status", "mode-with-refresh"],
)  # fmt: skip
def test_hotplug_errors(tmp_path: Path, kwargs: dict[str, object], message: str) -> None:
    write_tree(tmp_path, SimCard(connectors=(SimConnector("HDMI-A"),)))
    with pytest.raises(SysfsTreeError, match=message):
        hotplug(tmp_path, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: SimConnector("HDMI"), "connector type 'HDMI' is not a kernel connector type"),
        (lambda: SimConnector("DP", 0), "connector index 0"),
        (lambda: SimConnector("DP", status="on"), "connector status 'on'"),  # type: ignore[arg-type]
        (lambda: SimConnector("DP", dpms="on"), "connector dpms 'on'"),  # type: ignore[arg-type]
        (lambda: SimConnector("DP", modes=("1920x1080@60",)), "names no refresh"),
        (lambda: SimConnector("DP", modes=("big",)), "mode 'big'"),
        (lambda: SimConnector("DP", aux_bus=True), "aux_bus needs an i2c_bus"),
        (lambda: SimConnector("DP", i2c_bus=-1), "connector i2c_bus -1"),
        (lambda: SimConnector("DP", connector_id=0), "connector_id 0"),
        (lambda: SimCard(index=64), "card index 64"),
        (lambda: SimCard(pci_address="00:02.0"), "pci_address '00:02.0'"),
        (lambda: SimCard(pci_bridge="bridge"), "pci_bridge 'bridge'"),
        (lambda: SimCard(driver="i 915"), "driver 'i 915'"),
        (lambda: SimCard(render_minor=127), "render_minor 127"),
        (lambda: SimCard(vendor_id=0x10000), "vendor_id 65536"),
        (lambda: SimCard(connectors=(SimConnector("DP"), SimConnector("DP"))),
         "two connectors of one name"),
        (lambda: SimCard(connectors=(SimConnector("DP", 1, i2c_bus=3),
                                     SimConnector("DP", 2, i2c_bus=3))), "one i2c bus"),
    ],
    ids=["type", "index", "status", "dpms", "mode-refresh", "mode-garbage", "aux-without-bus",
         "bus-negative", "connector-id", "card-index", "pci-address", "pci-bridge", "driver",
         "render-minor", "vendor-id", "duplicate-connector", "shared-bus"],
)  # fmt: skip
def test_impossible_hardware_is_refused(make: object, message: str) -> None:
    with pytest.raises(SysfsTreeError, match=message):
        make()  # type: ignore[operator]


def test_a_card_is_written_once(tmp_path: Path) -> None:
    write_tree(tmp_path, SimCard())
    with pytest.raises(SysfsTreeError, match="card0 already exists"):
        write_tree(tmp_path, SimCard(pci_address="0000:05:00.0"))
