"""The simulated card: which monitors sit on which connectors, and the x11 output each one is.

Each monitor has an EDID from the libdisplay builder with its own preferred mode, so the
compositor starts every output at a different size; `Monitor.device` is the DRA device name
the operator publishes for its connector. Each connector's `ddc` link names an i2c bus, and
`Monitor.ddc()` is the DDC/CI display side that `up` serves on a socket at that bus's
`/dev/i2c-N` (`write_card` leaves those paths free for it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from libdisplay.hardware import mccs
from libdisplay.hardware.modes import Mode
from libdisplay.sim import sysfs as sysfs_tree
from libdisplay.sim.ddc import Faults, Feature, SimulatedMonitor
from libdisplay.sim.edid import EdidParams, build_edid

CARD = "card0"
MIN_MONITORS = 1
# Shaped like real monitors' strings (Dell U2415, LG 27UL550): the usual colour and geometry
# codes, brightness 10, contrast 12, input 60 with the monitor's three inputs, power D6.
CAPABILITIES: Final = (
    "(prot(monitor)type(LCD)model({model})cmds(01 02 03 07 0C E3 F3)"
    "vcp(02 04 05 08 10 12 14(05 08 0B) 16 18 1A 52 60({inputs}) AC AE B2 B6 C6 C8 C9"
    " D6(01 04 05) DF FD)mswhql(1)asset_eep(40)mccs_ver(2.1))"
)
# The inputs a monitor has, by the connector type it is plugged into; the first is that one.
INPUTS: Final = {"HDMI-A": (0x11, 0x12, 0x0F), "DP": (0x0F, 0x10, 0x11)}
# Factory settings, as most monitors ship.
BRIGHTNESS: Final = 75
CONTRAST: Final = 75


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
    i2c_bus: int

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

    def status_file(self, root: Path) -> Path:
        """The connector's sysfs `status`: `connected` while its monitor is plugged in."""
        return sysfs_tree.sysfs_root(root) / "class" / "drm" / self.sysfs_name / "status"

    def i2c_node(self, root: Path) -> Path:
        """`<root>/dev/i2c-N`: where `up` serves this monitor's DDC/CI."""
        return sysfs_tree.dev_root(root) / f"i2c-{self.i2c_bus}"

    def capabilities(self) -> str:
        inputs = INPUTS[self.type]
        return CAPABILITIES.format(model=self.name.replace(" ", ""),
                                   inputs=" ".join(f"{i:02X}" for i in sorted(inputs)))

    def ddc(self, *, clock: Callable[[], float] = time.monotonic,
            answers: bool = True) -> SimulatedMonitor:
        """The display side of this monitor's DDC/CI, set to the input it is plugged into.
        `answers=False`: a monitor whose DDC/CI is off (in its menu, or a TV's): its EDID
        still reads at 0x50, nothing acknowledges 0x37."""
        inputs = INPUTS[self.type]
        monitor = SimulatedMonitor(capabilities=self.capabilities(), edid=self.edid(),
                                   clock=clock, values={
            mccs.BRIGHTNESS: Feature(BRIGHTNESS, 100),
            mccs.CONTRAST: Feature(CONTRAST, 100),
            mccs.INPUT_SOURCE: Feature(inputs[0], max(inputs), allowed=inputs),
        })
        if not answers:
            monitor.faults = Faults(silent="nack")
        return monitor


FIRST_MONITORS = (
    Monitor("HDMI-A", 1, "Sim HDMI FHD",
            (Mode(1920, 1080, 60000), Mode(1280, 720, 60000), Mode(1024, 768, 60000)), "X1", 3),
    Monitor("DP", 1, "Sim DP SXGA", (Mode(1280, 1024, 60000), Mode(1024, 768, 60000)), "X2", 4),
    Monitor("DP", 2, "Sim DP HD+", (Mode(1600, 900, 60000), Mode(1280, 720, 60000)), "X3", 5),
)
MAX_MONITORS = 16
"""A card with 16 outputs (a video wall's, or virtio-gpu's most heads)."""
# The wall's further monitors: DP and HDMI in turn, each preferring one of these modes.
_WALL_MODES = ((Mode(1920, 1080, 60000), Mode(1280, 720, 60000)),
               (Mode(1280, 1024, 60000), Mode(1024, 768, 60000)),
               (Mode(1600, 900, 60000), Mode(1280, 720, 60000)))


def _wall(first: tuple[Monitor, ...], count: int) -> tuple[Monitor, ...]:
    """`first`, then monitors up to `count` on further DP-n and HDMI-A-n connectors."""
    made = list(first)
    for n in range(len(first) + 1, count + 1):
        kind = "DP" if n % 2 == 0 else "HDMI-A"
        index = 1 + sum(m.type == kind for m in made)
        made.append(Monitor(kind, index, f"Sim Wall {n}", _WALL_MODES[n % len(_WALL_MODES)],
                            f"X{n}", n + 2))
    return tuple(made)


ALL_MONITORS = _wall(FIRST_MONITORS, MAX_MONITORS)


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
    """The card's sysfs tree and DRM device nodes under `root`, every monitor plugged in; the
    `/dev/i2c-N` paths are left for `up`'s monitor sockets."""
    connectors = tuple(
        sysfs_tree.SimConnector(type=m.type, index=m.index, edid=m.edid(), modes=m.mode_names(),
                                i2c_bus=m.i2c_bus)
        for m in chosen
    )
    sysfs_tree.write_tree(root, sysfs_tree.SimCard(connectors=connectors), i2c_nodes=False)


def plug(root: Path, monitor: Monitor, *, connected: bool) -> None:
    """Plug the monitor back into its connector, or pull it out."""
    if connected:
        sysfs_tree.hotplug(root, monitor.sysfs_name, status="connected", edid=monitor.edid(),
                           modes=monitor.mode_names())
    else:
        sysfs_tree.hotplug(root, monitor.sysfs_name, status="disconnected")
