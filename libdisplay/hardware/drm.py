"""DRM cards and their connectors, read from sysfs; and the operator's snapshot of that sysfs.

The kernel publishes every DRM minor and connector under `/sys/class/drm` as a symlink into the
device tree: `card0 -> ../../devices/pci0000:00/0000:00:02.0/drm/card0`, and each connector is a
child device of its card, `card0-HDMI-A-1 -> .../drm/card0/card0-HDMI-A-1`. A connector directory
holds `status` (connected/disconnected/unknown), `enabled`, `dpms`, `edid` (binary, empty when
there is none), `modes` (one `WxH` or `WxHi` per line, no refresh), `connector_id` (recent
kernels) and, when the driver knows the DDC bus, a `ddc` symlink to the i2c adapter. DisplayPort AUX
adapters of older kernels sit as an `i2c-N` child of the connector directory instead.

Which cards this process may use is decided by the claim, not by sysfs: only the `cardN` nodes
present in `<dev>/dri` are enumerated. A disconnected or unknown connector, an empty EDID and a
missing attribute file are normal states; only a missing sysfs or an undelivered card is an error.

`python3 -m libdisplay.hardware.drm list` prints what is there; `python3 -m libdisplay.hardware.drm
snapshot DEST`
copies the DRM part of a real sysfs into `DEST/sys` and `DEST/dev` in the layout that
`libdisplay.sim.sysfs` writes, so a machine's hardware can be replayed in tests.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from libdisplay.hardware.modes import Mode, ModeError, parse_mode

log = logging.getLogger(__name__)

ConnectorStatus = Literal["connected", "disconnected", "unknown"]
Dpms = Literal["On", "Standby", "Suspend", "Off"]

_STATUSES: dict[str, ConnectorStatus] = {
    "connected": "connected", "disconnected": "disconnected", "unknown": "unknown",
}  # fmt: skip
_DPMS_STATES: dict[str, Dpms] = {
    "On": "On", "Standby": "Standby", "Suspend": "Suspend", "Off": "Off",
}  # fmt: skip

# The kernel's names (drm_connector_enum_list); weston names its outputs the same way.
CONNECTOR_TYPES: tuple[str, ...] = (
    "Unknown", "VGA", "DVI-I", "DVI-D", "DVI-A", "Composite", "SVIDEO", "LVDS", "Component",
    "DIN", "DP", "HDMI-A", "HDMI-B", "TV", "eDP", "Virtual", "DSI", "DPI", "Writeback", "SPI",
    "USB",
)  # fmt: skip

_CARD_RE = re.compile(r"^card(?P<index>[0-9]+)$")
_RENDER_RE = re.compile(r"^renderD(?P<minor>[0-9]+)$")
_I2C_RE = re.compile(r"^i2c-(?P<bus>[0-9]+)$")
_PCI_ADDRESS_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
# A sysfs attribute is at most a page, an EDID at most 32 KiB (256 blocks of 128 bytes).
_READ_SIZE = 65536


class DrmError(Exception):
    """Base of every error this module raises."""


class SysfsNotFoundError(DrmError):
    """The sysfs root, or its `class/drm` directory, does not exist."""


class NoCardDeliveredError(DrmError):
    """`<dev>/dri` holds no `cardN` node: the claim delivered no card."""


class CardNotInSysfsError(DrmError):
    """A card node was delivered but sysfs does not describe it."""


class SysfsReadError(DrmError):
    """An attribute exists but cannot be read (not merely absent)."""


class BadConnectorNameError(DrmError):
    """A name that is not `cardN-TYPE-INDEX`."""


@dataclass(frozen=True, slots=True)
class Connector:
    """One connector of a card as sysfs shows it at the moment it was read."""

    card: str
    type: str
    index: int
    status: ConnectorStatus
    enabled: bool
    dpms: Dpms | None
    edid: bytes
    modes: tuple[Mode, ...]
    i2c_bus: int | None
    connector_id: int | None

    @property
    def name(self) -> str:
        """The sysfs name, `card0-HDMI-A-1`."""
        return f"{self.card}-{self.output_name}"

    @property
    def output_name(self) -> str:
        """The name weston gives the output on this connector, `HDMI-A-1`."""
        return f"{self.type}-{self.index}"

    @property
    def device_name(self) -> str:
        """The DRA device name, a DNS label: `card0-hdmi-a-1`."""
        return device_name(self.name)

    @property
    def connected(self) -> bool:
        return self.status == "connected"


@dataclass(frozen=True, slots=True)
class Card:
    """A delivered DRM card: its PCI identity, driver, render node and connectors."""

    name: str
    index: int
    pci_address: str | None
    driver: str | None
    render_node: str | None
    connectors: tuple[Connector, ...]


def device_name(connector_name: str) -> str:
    """`card0-HDMI-A-1` -> `card0-hdmi-a-1`, checked to be a DNS label."""
    split_connector_name(connector_name)
    label = connector_name.lower()
    if not _DNS_LABEL_RE.match(label):
        raise BadConnectorNameError(f"connector name {connector_name!r} is not a DNS label")
    return label


def split_connector_name(name: str) -> tuple[str, str, int]:
    """`card0-HDMI-A-1` -> (`card0`, `HDMI-A`, 1); the type may itself contain dashes."""
    card, sep, rest = name.partition("-")
    type_name, dash, index = rest.rpartition("-")
    if not (sep and dash and _CARD_RE.match(card) and type_name and index.isdecimal()):
        raise BadConnectorNameError(
            f"not a connector name: {name!r} (expected cardN-TYPE-INDEX, e.g. card0-HDMI-A-1)"
        )
    return card, type_name, int(index)


def enumerate_cards(
    *, sysfs_root: Path = Path("/sys"), dev_root: Path = Path("/dev")
) -> tuple[Card, ...]:
    """Every card the claim delivered (a `cardN` in `<dev>/dri`), with its connectors."""
    class_dir = _class_drm(sysfs_root)
    names = delivered_cards(dev_root)
    return tuple(_read_card(class_dir, name) for name in names)


def delivered_cards(dev_root: Path) -> tuple[str, ...]:
    """Names of the card nodes in `<dev>/dri`, by index."""
    dri = dev_root / "dri"
    try:
        entries = [entry.name for entry in dri.iterdir()]
    except FileNotFoundError:
        raise NoCardDeliveredError(
            f"{dri} does not exist: no DRM card was delivered to this container "
            "(is the card claim allocated and its device mounted?)"
        ) from None
    cards = sorted((m for m in map(_CARD_RE.match, entries) if m), key=lambda m: int(m["index"]))
    if not cards:
        raise NoCardDeliveredError(
            f"{dri} holds no cardN node: no DRM card was delivered to this container"
        )
    return tuple(m.group(0) for m in cards)


def read_card(name: str, *, sysfs_root: Path = Path("/sys")) -> Card:
    """One card by name (`card0`), whether or not its node was delivered."""
    if not _CARD_RE.match(name):
        raise CardNotInSysfsError(f"not a card name: {name!r} (expected cardN)")
    return _read_card(_class_drm(sysfs_root), name)


def read_connector(name: str, *, sysfs_root: Path = Path("/sys")) -> Connector | None:
    """One connector by sysfs name (`card0-HDMI-A-1`); None when it is gone (MST unplug)."""
    card, type_name, index = split_connector_name(name)
    return _read_connector(_class_drm(sysfs_root) / name, card, type_name, index)


def _class_drm(sysfs_root: Path) -> Path:
    if not sysfs_root.is_dir():
        raise SysfsNotFoundError(f"sysfs root {sysfs_root} does not exist or is not a directory")
    class_dir = sysfs_root / "class" / "drm"
    if not class_dir.is_dir():
        raise SysfsNotFoundError(
            f"{class_dir} does not exist: the kernel has no DRM driver loaded "
            "(or this is not the host's sysfs)"
        )
    return class_dir


def _read_card(class_dir: Path, name: str) -> Card:
    card_dir = class_dir / name
    if not card_dir.is_dir():
        raise CardNotInSysfsError(
            f"{card_dir} does not exist: sysfs does not describe {name} "
            "(is the host's /sys mounted?)"
        )
    return Card(
        name=name,
        index=int(name.removeprefix("card")),
        pci_address=_pci_address(card_dir / "device"),
        driver=_link_name(card_dir / "device" / "driver"),
        render_node=_render_node(card_dir / "device" / "drm"),
        connectors=tuple(_connectors(class_dir, name)),
    )


def _connectors(class_dir: Path, card: str) -> Iterator[Connector]:
    found = []
    for entry in class_dir.iterdir():
        if not entry.name.startswith(f"{card}-"):
            continue
        try:
            _, type_name, index = split_connector_name(entry.name)
        except BadConnectorNameError:
            log.warning("ignoring %s: not a connector name", entry)
            continue
        found.append((type_name, index, entry))
    for type_name, index, entry in sorted(found, key=lambda item: (item[0], item[1])):
        connector = _read_connector(entry, card, type_name, index)
        if connector is not None:
            yield connector


def _read_connector(path: Path, card: str, type_name: str, index: int) -> Connector | None:
    if not path.is_dir():
        return None
    connector = Connector(
        card=card,
        type=type_name,
        index=index,
        status=_status(path / "status"),
        enabled=_read_text(path / "enabled") == "enabled",
        dpms=_dpms(path / "dpms"),
        edid=_read_bytes(path / "edid"),
        modes=_modes(path / "modes"),
        i2c_bus=_ddc_bus(path),
        connector_id=_int_or_none(path / "connector_id"),
    )
    # The connector went away while we read it: its attributes are not a state of anything.
    return connector if path.is_dir() else None


def _status(path: Path) -> ConnectorStatus:
    text = _read_text(path)
    if text is None:
        return "unknown"
    status = _STATUSES.get(text)
    if status is None:
        log.warning("%s holds %r, not a connector status; taking it as unknown", path, text)
        return "unknown"
    return status


def _dpms(path: Path) -> Dpms | None:
    text = _read_text(path)
    state = _DPMS_STATES.get(text) if text is not None else None
    if text is not None and state is None:
        log.warning("%s holds %r, not a DPMS state", path, text)
    return state


def _modes(path: Path) -> tuple[Mode, ...]:
    """The kernel's list, preferred first, without the repeats that differ only in refresh."""
    text = _read_text(path) or ""
    modes: list[Mode] = []
    for line in text.splitlines():
        try:
            mode = parse_mode(line)
        except ModeError:
            # Drivers may name custom modes freely; a name that is not WxH tells us nothing.
            log.debug("%s: skipping mode line %r", path, line)
            continue
        if mode not in modes:
            modes.append(mode)
    return tuple(modes)


def _ddc_bus(connector_dir: Path) -> int | None:
    bus = _link_name(connector_dir / "ddc")
    if bus is None:
        # Older kernels link no `ddc` for DisplayPort; the AUX adapter is a child instead.
        try:
            children = sorted(p.name for p in connector_dir.iterdir() if _I2C_RE.match(p.name))
        except FileNotFoundError:
            return None
        bus = children[0] if children else None
    match = _I2C_RE.match(bus) if bus else None
    return int(match["bus"]) if match else None


def _render_node(drm_dir: Path) -> str | None:
    try:
        names = [p.name for p in drm_dir.iterdir()]
    except FileNotFoundError:
        return None
    renders = sorted((m for m in map(_RENDER_RE.match, names) if m), key=lambda m: int(m["minor"]))
    return renders[0].group(0) if renders else None


def _pci_address(device_link: Path) -> str | None:
    name = _link_name(device_link)
    return name if name is not None and _PCI_ADDRESS_RE.match(name) else None


def _link_name(link: Path) -> str | None:
    try:
        return Path(os.readlink(link)).name
    except OSError:  # absent, or not a symlink
        return None


def _int_or_none(path: Path) -> int | None:
    text = _read_text(path)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        log.warning("%s holds %r, not an integer", path, text)
        return None


def _read_text(path: Path) -> str | None:
    data = _read_attribute(path)
    return None if data is None else data.decode("utf-8", "replace").strip()


def _read_bytes(path: Path) -> bytes:
    return _read_attribute(path) or b""


def _read_attribute(path: Path) -> bytes | None:
    """The attribute's bytes, None when it is absent. Read with os calls, not
    Path.read_bytes, whose file objects cost more than the read itself: a hotplug reads six
    attributes of every connector."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as err:
        raise SysfsReadError(f"cannot read {path}: {err}") from err
    try:
        chunks = []
        while chunk := os.read(fd, _READ_SIZE):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as err:
        raise SysfsReadError(f"cannot read {path}: {err}") from err
    finally:
        os.close(fd)


# --- snapshot -----------------------------------------------------------------------------

_CARD_FILES = ("dev", "uevent")
_CONNECTOR_FILES = ("status", "enabled", "dpms", "modes", "edid", "connector_id", "uevent")
_PCI_FILES = (
    "vendor",
    "device",
    "subsystem_vendor",
    "subsystem_device",
    "class",
    "boot_vga",
    "uevent",
)
_I2C_FILES = ("name",)


class _Snapshot:
    """Copies chosen sysfs files and symlinks from `src` to `dst`, keeping relative paths."""

    def __init__(self, src: Path, dst: Path) -> None:
        self.src = src.resolve()
        self.dst = dst

    def real(self, path: Path) -> Path | None:
        """`path` (in src) resolved; None when it leads outside src, which a copy cannot hold."""
        resolved = path.resolve()
        if not resolved.is_relative_to(self.src):
            log.warning("skipping %s: it leads to %s, outside %s", path, resolved, self.src)
            return None
        return resolved

    def files(self, directory: Path, names: Sequence[str]) -> None:
        target = self.dst / directory.relative_to(self.src)
        target.mkdir(parents=True, exist_ok=True)
        for name in names:
            try:
                data = (directory / name).read_bytes()
            except FileNotFoundError:
                continue
            except OSError as err:
                log.warning("skipping %s: %s", directory / name, err)
                continue
            (target / name).write_bytes(data)

    def link(self, link: Path) -> Path | None:
        """Recreate `link` with its own (relative) target; the real path it leads to, or None."""
        real_target = self.real(link) if link.is_symlink() else None
        if real_target is None:
            return None
        target = os.readlink(link)
        if os.path.isabs(target):
            log.warning("skipping %s: sysfs links are relative, this one is %s", link, target)
            return None
        copy = self.dst / link.parent.resolve().relative_to(self.src) / link.name
        copy.parent.mkdir(parents=True, exist_ok=True)
        if not copy.is_symlink():
            copy.symlink_to(target)
        return real_target

    def directory(self, real: Path) -> None:
        (self.dst / real.relative_to(self.src)).mkdir(parents=True, exist_ok=True)


def snapshot(*, sysfs_root: Path, dev_root: Path, dest: Path) -> tuple[str, ...]:
    """Copy the DRM part of `sysfs_root` into `dest/sys` and its nodes into `dest/dev`.

    Returns the names of the cards copied. `dest/sys` must not exist yet, so a snapshot never
    mixes two machines.
    """
    class_dir = _class_drm(sysfs_root)
    sys_dest = dest / "sys"
    if sys_dest.exists():
        raise DrmError(f"{sys_dest} already exists; snapshot into an empty directory")
    copier = _Snapshot(sysfs_root, sys_dest)
    copier.files(class_dir.resolve(), ("version",))
    cards: list[str] = []
    buses: set[int] = set()
    for entry in sorted(class_dir.iterdir()):
        kind = _entry_kind(entry.name)
        real = copier.link(entry) if kind else None
        if real is None:
            log.debug("not copying %s", entry)
        elif kind == "card":
            cards.append(entry.name)
            _snapshot_minor(copier, real)
            _snapshot_pci_device(copier, sysfs_root, real / "device")
        elif kind == "render":
            _snapshot_minor(copier, real)
        else:
            buses |= _snapshot_connector(copier, sysfs_root, real)
    _snapshot_dev_nodes(dev_root, dest / "dev", buses)
    return tuple(cards)


def _entry_kind(name: str) -> Literal["card", "render", "connector"] | None:
    """What a `/sys/class/drm` entry is; None for what a snapshot leaves out (ttm, version)."""
    if _CARD_RE.match(name):
        return "card"
    if _RENDER_RE.match(name):
        return "render"
    try:
        split_connector_name(name)
    except BadConnectorNameError:
        return None
    return "connector"


def _snapshot_minor(copier: _Snapshot, real: Path) -> None:
    copier.files(real, _CARD_FILES)
    copier.link(real / "device")


def _snapshot_pci_device(copier: _Snapshot, sysfs_root: Path, device_link: Path) -> None:
    device = copier.real(device_link) if device_link.exists() else None
    if device is None:
        return
    copier.files(device, _PCI_FILES)
    driver = copier.link(device / "driver")
    if driver is not None:
        copier.directory(driver)
    copier.link(sysfs_root / "bus" / "pci" / "devices" / device.name)


def _snapshot_connector(copier: _Snapshot, sysfs_root: Path, real: Path) -> set[int]:
    copier.files(real, _CONNECTOR_FILES)
    copier.link(real / "device")
    adapters = [p for p in real.iterdir() if _I2C_RE.match(p.name)]
    ddc = copier.link(real / "ddc")
    if ddc is not None:
        adapters.append(ddc)
    buses = set()
    for adapter in adapters:
        bus = int(_I2C_RE.match(adapter.name)["bus"])  # type: ignore[index]
        buses.add(bus)
        copier.files(adapter, _I2C_FILES)
        node = adapter / "i2c-dev" / adapter.name
        if node.is_dir():
            copier.files(node, ("dev",))
        copier.link(sysfs_root / "bus" / "i2c" / "devices" / adapter.name)
        copier.link(sysfs_root / "class" / "i2c-dev" / adapter.name)
    return buses


def _snapshot_dev_nodes(dev_root: Path, dest: Path, buses: set[int]) -> None:
    """Plain files stand in for device nodes: a simulated node opens nothing, it looks."""
    dri = dev_root / "dri"
    names = sorted(p.name for p in dri.iterdir()) if dri.is_dir() else []
    nodes = [f"dri/{n}" for n in names if _CARD_RE.match(n) or _RENDER_RE.match(n)]
    nodes += [f"i2c-{bus}" for bus in sorted(buses) if (dev_root / f"i2c-{bus}").exists()]
    for node in nodes:
        (dest / node).parent.mkdir(parents=True, exist_ok=True)
        (dest / node).touch()


# --- command line -------------------------------------------------------------------------


def _describe(card: Card) -> Iterator[str]:
    yield (
        f"{card.name}  pci {card.pci_address or '-'}  driver {card.driver or '-'}"
        f"  render {card.render_node or '-'}"
    )
    for c in card.connectors:
        modes = ", ".join(str(m) for m in c.modes[:4]) + (" ..." if len(c.modes) > 4 else "")
        yield (
            f"  {c.name:<20} {c.status:<12} {'enabled' if c.enabled else 'disabled':<8}"
            f"  dpms {c.dpms or '-':<7}  edid {len(c.edid):>4} B"
            f"  ddc {f'i2c-{c.i2c_bus}' if c.i2c_bus is not None else '-':<7}"
            f"  id {c.connector_id if c.connector_id is not None else '-'}"
            f"  modes {modes or '-'}"
        )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python3 -m libdisplay.hardware.drm",
        description="Read DRM cards and connectors from sysfs, or snapshot them for tests.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    listing = commands.add_parser("list", help="print the delivered cards and their connectors")
    snap = commands.add_parser(
        "snapshot", help="copy the DRM part of sysfs (and the nodes in /dev) into DEST"
    )
    for sub in (listing, snap):
        sub.add_argument("--sysfs-root", type=Path, default=Path("/sys"), help="default /sys")
        sub.add_argument("--dev-root", type=Path, default=Path("/dev"), help="default /dev")
    snap.add_argument("dest", type=Path, metavar="DEST", help="writes DEST/sys and DEST/dev")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "list":
            cards = enumerate_cards(sysfs_root=args.sysfs_root, dev_root=args.dev_root)
            for card in cards:
                print("\n".join(_describe(card)))
        else:
            copied = snapshot(sysfs_root=args.sysfs_root, dev_root=args.dev_root, dest=args.dest)
            print(f"copied {len(copied)} card(s) to {args.dest}: {' '.join(copied) or '-'}")
    except DrmError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
