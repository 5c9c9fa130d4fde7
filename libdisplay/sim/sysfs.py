"""Simulated DRM hardware: sysfs and /dev trees in the kernel's own layout, for tests and demos.

`write_tree(root, card)` writes `root/sys` and `root/dev` as the kernel and udev would show one
card: the PCI device directory with its `driver` link, the `drm/cardN` and `drm/renderDN`
minors with `dev` numbers, every connector as a child of its card with `status`, `enabled`,
`dpms`, `edid`, `modes`, `connector_id` and a `ddc` link to its i2c adapter (or, for a
DisplayPort AUX adapter of an older kernel, the adapter as a child of the connector), the
`/sys/class/drm`, `/sys/bus/...` and `/sys/class/i2c-dev` symlinks, and plain files standing in
for `/dev/dri/cardN`, `/dev/dri/renderDN` and `/dev/i2c-N`. `libdisplay.hardware.drm` reads it with
no
knowledge that it is simulated; `python3 -m libdisplay.hardware.drm snapshot` writes the same layout
from a real machine.

`hotplug` changes one connector's status, EDID and modes the way a monitor being plugged in or
pulled out does, each file replaced atomically.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from libdisplay import fsutil
from libdisplay.hardware.drm import CONNECTOR_TYPES, ConnectorStatus, Dpms
from libdisplay.hardware.modes import ModeError, parse_mode

DRM_MAJOR = 226
I2C_DEV_MAJOR = 89
# What /sys/class/drm/version has said since 2006.
DRM_CLASS_VERSION = "drm 1.1.0 20060810\n"

_PCI_ADDRESS_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_DRIVER_RE = re.compile(r"^[A-Za-z0-9_-]+$")
_STATUSES: tuple[ConnectorStatus, ...] = ("connected", "disconnected", "unknown")
_DPMS_STATES: tuple[Dpms, ...] = ("On", "Standby", "Suspend", "Off")


class SysfsTreeError(Exception):
    """A simulated card that the kernel could not have, or a tree that cannot take it."""


@dataclass(frozen=True, slots=True)
class SimConnector:
    """One connector. `modes` are kernel mode names (`1920x1080`, `1920x1080i`), preferred first.

    `i2c_bus` is the DDC adapter's number; with `aux_bus` the adapter is a DisplayPort AUX
    channel that sits under the connector directory with no `ddc` link (kernels before the
    DP drivers set one). `connector_id=None` leaves the file out, as older kernels do.
    """

    type: str
    index: int = 1
    status: ConnectorStatus = "connected"
    enabled: bool = False
    dpms: Dpms = "Off"
    edid: bytes = b""
    modes: tuple[str, ...] = ()
    i2c_bus: int | None = None
    aux_bus: bool = False
    connector_id: int | None = None

    def __post_init__(self) -> None:
        if self.type not in CONNECTOR_TYPES:
            raise SysfsTreeError(
                f"connector type {self.type!r} is not a kernel connector type "
                f"(one of {', '.join(CONNECTOR_TYPES)})"
            )
        _check_range("connector index", self.index, 1, 255)
        if self.status not in _STATUSES:
            raise SysfsTreeError(f"connector status {self.status!r} is not one of {_STATUSES}")
        if self.dpms not in _DPMS_STATES:
            raise SysfsTreeError(f"connector dpms {self.dpms!r} is not one of {_DPMS_STATES}")
        for name in self.modes:
            _check_mode_name(name)
        if self.i2c_bus is not None:
            _check_range("connector i2c_bus", self.i2c_bus, 0, 255)
        elif self.aux_bus:
            raise SysfsTreeError(f"connector {self.name}: aux_bus needs an i2c_bus number")
        if self.connector_id is not None:
            _check_range("connector_id", self.connector_id, 1, 2**31 - 1)

    @property
    def name(self) -> str:
        """`HDMI-A-1`: the connector's name without its card."""
        return f"{self.type}-{self.index}"


@dataclass(frozen=True, slots=True)
class SimCard:
    """One card. `pci_bridge` puts it behind a root port, as a discrete card is."""

    index: int = 0
    pci_address: str = "0000:00:02.0"
    pci_bridge: str | None = None
    driver: str = "i915"
    vendor_id: int = 0x8086
    device_id: int = 0x9BC8
    render_minor: int | None = 128
    connectors: tuple[SimConnector, ...] = ()

    def __post_init__(self) -> None:
        _check_range("card index", self.index, 0, 63)
        for field, address in (("pci_address", self.pci_address), ("pci_bridge", self.pci_bridge)):
            if address is not None and not _PCI_ADDRESS_RE.match(address):
                raise SysfsTreeError(
                    f"card {field} {address!r} is not a PCI address like 0000:00:02.0"
                )
        if not _DRIVER_RE.match(self.driver):
            raise SysfsTreeError(f"card driver {self.driver!r} is not a kernel driver name")
        _check_range("card vendor_id", self.vendor_id, 0, 0xFFFF)
        _check_range("card device_id", self.device_id, 0, 0xFFFF)
        if self.render_minor is not None:
            _check_range("card render_minor", self.render_minor, 128, 255)
        names = [c.name for c in self.connectors]
        if len(set(names)) != len(names):
            raise SysfsTreeError(f"card{self.index} has two connectors of one name: {names}")
        buses = [c.i2c_bus for c in self.connectors if c.i2c_bus is not None]
        if len(set(buses)) != len(buses):
            raise SysfsTreeError(f"card{self.index} gives two connectors one i2c bus: {buses}")

    @property
    def name(self) -> str:
        return f"card{self.index}"


def sysfs_root(root: Path) -> Path:
    """Where `write_tree(root, ...)` puts sysfs: pass it to `drm` as `sysfs_root`."""
    return root / "sys"


def dev_root(root: Path) -> Path:
    """Where `write_tree(root, ...)` puts the device nodes: pass it to `drm` as `dev_root`."""
    return root / "dev"


def write_tree(root: Path, card: SimCard, *, i2c_nodes: bool = True) -> None:
    """Add `card` to the simulated machine at `root`; other cards already there stay.

    `i2c_nodes=False` leaves the `/dev/i2c-N` files out, for a caller that puts its own
    there (the simulated node serves a simulated monitor on a socket at each).
    """
    sys_dir = sysfs_root(root)
    device = sys_dir / "devices" / _pci_path(card)
    card_dir = device / "drm" / card.name
    if card_dir.exists() or (sys_dir / "class" / "drm" / card.name).is_symlink():
        raise SysfsTreeError(f"{card.name} already exists under {root}")
    class_drm = sys_dir / "class" / "drm"
    class_drm.mkdir(parents=True, exist_ok=True)
    _write(class_drm / "version", DRM_CLASS_VERSION)
    _write_pci_device(sys_dir, device, card)
    _write_minor(class_drm, card_dir, card.index, card.name)
    if card.render_minor is not None:
        _write_minor(
            class_drm,
            device / "drm" / f"renderD{card.render_minor}",
            card.render_minor,
            f"renderD{card.render_minor}",
        )
    for connector in card.connectors:
        _write_connector(sys_dir, device, card_dir, connector)
    nodes = [f"dri/{card.name}"]
    if card.render_minor is not None:
        nodes.append(f"dri/renderD{card.render_minor}")
    if i2c_nodes:
        nodes += [f"i2c-{c.i2c_bus}" for c in card.connectors if c.i2c_bus is not None]
    for node in nodes:
        path = dev_root(root) / node
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()


def hotplug(
    root: Path,
    connector: str,
    *,
    status: ConnectorStatus,
    edid: bytes = b"",
    modes: Iterable[str] = (),
) -> None:
    """Plug a monitor into `connector` (`card0-HDMI-A-1`) or pull it out.

    The status is the gate a reader trusts: whenever it says `connected`, the EDID and modes
    beside it are that monitor's. So on plug-in they are written before the status, and on
    pull-out the status changes first.
    """
    if status not in _STATUSES:
        raise SysfsTreeError(f"hotplug status {status!r} is not one of {_STATUSES}")
    mode_names = tuple(modes)
    for name in mode_names:
        _check_mode_name(name)
    path = sysfs_root(root) / "class" / "drm" / connector
    if not path.is_dir():
        raise SysfsTreeError(f"no connector {connector!r} under {root}")
    contents = [("edid", edid), ("modes", "".join(f"{m}\n" for m in mode_names).encode())]
    ordered = [*contents, ("status", f"{status}\n".encode())]
    if status != "connected":
        ordered.reverse()
    for name, data in ordered:
        fsutil.atomic_write(path / name, data)


def _write_pci_device(sys_dir: Path, device: Path, card: SimCard) -> None:
    device.mkdir(parents=True, exist_ok=True)
    _write(device / "vendor", f"0x{card.vendor_id:04x}\n")
    _write(device / "device", f"0x{card.device_id:04x}\n")
    _write(device / "class", "0x030000\n")
    _write(
        device / "uevent",
        f"DRIVER={card.driver}\nPCI_CLASS=30000\n"
        f"PCI_ID={card.vendor_id:04X}:{card.device_id:04X}\nPCI_SLOT_NAME={card.pci_address}\n",
    )
    driver_dir = sys_dir / "bus" / "pci" / "drivers" / card.driver
    driver_dir.mkdir(parents=True, exist_ok=True)
    _link(device / "driver", driver_dir)
    _link(sys_dir / "bus" / "pci" / "devices" / card.pci_address, device)


def _write_minor(class_drm: Path, minor_dir: Path, minor: int, name: str) -> None:
    minor_dir.mkdir(parents=True)
    _write(minor_dir / "dev", f"{DRM_MAJOR}:{minor}\n")
    _write(
        minor_dir / "uevent",
        f"MAJOR={DRM_MAJOR}\nMINOR={minor}\nDEVNAME=dri/{name}\nDEVTYPE=drm_minor\n",
    )
    _link(minor_dir / "device", minor_dir.parent.parent)
    _link(class_drm / name, minor_dir)


def _write_connector(sys_dir: Path, device: Path, card_dir: Path, c: SimConnector) -> None:
    path = card_dir / f"{card_dir.name}-{c.name}"
    path.mkdir()
    _write(path / "status", f"{c.status}\n")
    _write(path / "enabled", "enabled\n" if c.enabled else "disabled\n")
    _write(path / "dpms", f"{c.dpms}\n")
    _write(path / "modes", "".join(f"{m}\n" for m in c.modes))
    (path / "edid").write_bytes(c.edid)
    _write(path / "uevent", "DEVTYPE=drm_connector\n")
    if c.connector_id is not None:
        _write(path / "connector_id", f"{c.connector_id}\n")
    _link(path / "device", card_dir)
    _link(sys_dir / "class" / "drm" / path.name, path)
    if c.i2c_bus is None:
        return
    adapter = (path if c.aux_bus else device) / f"i2c-{c.i2c_bus}"
    adapter.mkdir()
    kind = "DPDDC" if c.aux_bus else "ddc"
    _write(adapter / "name", f"{path.name} {kind}\n")
    node = adapter / "i2c-dev" / adapter.name
    node.mkdir(parents=True)
    _write(node / "dev", f"{I2C_DEV_MAJOR}:{c.i2c_bus}\n")
    if not c.aux_bus:
        _link(path / "ddc", adapter)
    _link(sys_dir / "bus" / "i2c" / "devices" / adapter.name, adapter)
    _link(sys_dir / "class" / "i2c-dev" / adapter.name, node)


def _pci_path(card: SimCard) -> Path:
    domain = card.pci_address.split(":", 1)[0]
    parents = [card.pci_bridge] if card.pci_bridge else []
    return Path(f"pci{domain}:00", *parents, card.pci_address)


def _link(link: Path, target: Path) -> None:
    """A relative symlink spelled as sysfs spells it.

    The kernel climbs to the nearest directory that is a strict ancestor of the target and
    names the target from there, so `card0/device` reads `../../../0000:00:02.0` (never `../..`)
    and readers can take the link's last component as the target's name.
    """
    link.parent.mkdir(parents=True, exist_ok=True)
    up = os.path.relpath(target.parent, link.parent)
    link.symlink_to(target.name if up == "." else f"{up}/{target.name}")


def _write(path: Path, text: str) -> None:
    path.write_text(text)


def _check_mode_name(name: str) -> None:
    try:
        mode = parse_mode(name)
    except ModeError as err:
        raise SysfsTreeError(f"mode {name!r}: {err}") from err
    if mode.refresh_mhz:
        raise SysfsTreeError(
            f"mode {name!r}: the kernel's modes file names no refresh (write e.g. 1920x1080)"
        )


def _check_range(field: str, value: int, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SysfsTreeError(f"{field} {value!r} is not an integer in {low}..{high}")
