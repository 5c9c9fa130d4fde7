"""Probe DDC/CI on one bus the way the operator does (`ddcmap.probe`): the capabilities string,
then brightness, contrast, input source and power mode.

A bus is a kernel i2c-dev node (`/dev/i2c-N`) or a unix socket serving a simulated monitor
(`libdisplay.hardware.ddc_socket`, as the simulated node puts at `<dev>/i2c-N`); anything else is
refused
before a byte is sent, naming the path.
"""

from __future__ import annotations

import stat
from pathlib import Path

from draplugin.node import ddcmap
from draplugin.node.displays import DdcState
from libdisplay.hardware.ddc import DdcClient, LinuxI2c


class BusPathError(ValueError):
    """The bus given is not one DDC/CI can be spoken on; the message names the path."""


def bus_path(bus: str, *, dev_root: Path) -> Path:
    """`N` is `<dev_root>/i2c-N`; anything else is a path."""
    return dev_root / f"i2c-{bus}" if bus.isdecimal() else Path(bus)


def probe_bus(path: Path) -> DdcState:
    """What the operator would read from the monitor on `path` (`supported=False`: no answer)."""
    try:
        mode = path.stat().st_mode
    except OSError as err:
        raise BusPathError(f"bus {path}: {err.strerror}") from err
    if stat.S_ISCHR(mode):
        with LinuxI2c(path) as transport:
            return ddcmap.probe(DdcClient(transport))
    if stat.S_ISSOCK(mode):
        # Only a simulated bus needs the socket transport: a real node never loads it.
        from libdisplay.hardware.ddc_socket import SocketI2c

        with SocketI2c(path) as sim:
            return ddcmap.probe(DdcClient(sim))
    raise BusPathError(
        f"bus {path}: neither an i2c-dev character device (/dev/i2c-N) nor a simulated "
        "bus's unix socket"
    )


def render(path: Path, state: DdcState) -> str:
    """The probe as a person reads it: one `name: value` line each."""
    status = state.to_status()
    lines = [f"bus: {path}", f"ddc/ci: {'answers' if state.supported else 'no answer'}"]
    for key, label in (("brightness", "brightness"), ("contrast", "contrast"),
                       ("input", "input source"), ("power", "power")):
        if key in status:
            suffix = " %" if key in ("brightness", "contrast") else ""
            lines.append(f"{label}: {status[key]}{suffix}")
    if state.inputs:
        lines.append(f"inputs offered: {', '.join(sorted(set(state.inputs)))}")
    if state.vcp_codes:
        lines.append("vcp codes: " + " ".join(f"{c:02X}" for c in sorted(set(state.vcp_codes))))
    if state.capabilities:
        lines.append(f"capabilities: {state.capabilities}")
    return "\n".join(lines) + "\n"
