"""The simulated card: which monitors sit on which connectors, and the x11 output each one is.

Each monitor has an EDID from the libdisplay builder with its own preferred mode, so the
compositor starts every output at a different size; `Monitor.device` is the DRA device name
the operator publishes for its connector.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from libdisplay import sysfs_tree
from libdisplay.edid_build import EdidParams, build_edid
from libdisplay.modes import Mode

CARD = "card0"
MIN_MONITORS = 2


class CardError(Exception):
    """A monitor count or device name the simulated card does not have."""


@dataclass(frozen=True, slots=True)
class Monitor:
    """One connector with its monitor: kernel connector type and index, modes preferred first."""

    type: str
    index: int
    name: str
    modes: tuple[Mode, ...]
    output: str

    @property
    def connector(self) -> str:
        """`HDMI-A-1`: as weston and declare's `--output-alias` name it."""
        return f"{self.type}-{self.index}"

    @property
    def sysfs_name(self) -> str:
        """`card0-HDMI-A-1`: the connector's directory under /sys/class/drm."""
        return f"{CARD}-{self.connector}"

    @property
    def device(self) -> str:
        """`card0-hdmi-a-1`: the DRA device name."""
        return self.sysfs_name.lower()

    def edid(self) -> bytes:
        preferred, *others = self.modes
        params = EdidParams(
            name=self.name, serial_number=self.index * 100 + len(self.type),
            preferred=preferred, detailed=tuple(others),
        )
        return build_edid(params)

    def mode_names(self) -> tuple[str, ...]:
        return tuple(f"{m.width}x{m.height}" for m in self.modes)


ALL_MONITORS = (
    Monitor("HDMI-A", 1, "Sim HDMI FHD",
            (Mode(1920, 1080, 60000), Mode(1280, 720, 60000), Mode(1024, 768, 60000)), "X1"),
    Monitor("DP", 1, "Sim DP SXGA", (Mode(1280, 1024, 60000), Mode(1024, 768, 60000)), "X2"),
    Monitor("DP", 2, "Sim DP HD+", (Mode(1600, 900, 60000), Mode(1280, 720, 60000)), "X3"),
)


def monitors(count: int) -> tuple[Monitor, ...]:
    """The first `count` monitors of the simulated card."""
    if not MIN_MONITORS <= count <= len(ALL_MONITORS):
        raise CardError(
            f"--monitors must be {MIN_MONITORS}-{len(ALL_MONITORS)}, got {count}"
        )
    return ALL_MONITORS[:count]


def find(chosen: tuple[Monitor, ...], device: str) -> Monitor:
    """The monitor whose device (`card0-hdmi-a-1`), connector or output is `device`."""
    for monitor in chosen:
        if device.lower() in (monitor.device, monitor.connector.lower(), monitor.output.lower()):
            return monitor
    names = ", ".join(m.device for m in chosen)
    raise CardError(f"no device {device!r} on this node (devices: {names})")


def write_card(root: Path, chosen: tuple[Monitor, ...]) -> None:
    """The card's sysfs tree and device nodes under `root`, every monitor plugged in."""
    connectors = tuple(
        sysfs_tree.SimConnector(type=m.type, index=m.index, edid=m.edid(), modes=m.mode_names())
        for m in chosen
    )
    sysfs_tree.write_tree(root, sysfs_tree.SimCard(connectors=connectors))


def plug(root: Path, monitor: Monitor, *, connected: bool) -> None:
    """Plug the monitor back into its connector, or pull it out."""
    if connected:
        sysfs_tree.hotplug(root, monitor.sysfs_name, status="connected", edid=monitor.edid(),
                           modes=monitor.mode_names())
    else:
        sysfs_tree.hotplug(root, monitor.sysfs_name, status="disconnected")
