"""The simulated card's i2c buses: each monitor's DDC/CI served on a unix socket at its
connector's `dev/i2c-N`, silent while the connector's sysfs `status` says it is unplugged (as
`simnode hotplug` sets it).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path

from libdisplay.hardware.ddc_socket import MonitorServer, SocketBusError
from simnode.node import card
from simnode.node.checkout import UpError


def plugged_in(status: Path) -> Callable[[], bool]:
    """Whether the connector whose sysfs `status` file this is has its monitor plugged in."""
    def present() -> bool:
        try:
            return status.read_text().strip() == "connected"
        except OSError:
            return False
    return present


def serve_monitors(root: Path, chosen: tuple[card.Monitor, ...], *,
                   without_ddc: Collection[str] = ()) -> dict[str, MonitorServer]:
    """Each monitor's DDC/CI served on a socket at its connector's `<root>/dev/i2c-N`, by
    device name, answering only while the connector says the monitor is plugged in (as
    `simnode hotplug` sets it); the devices in `without_ddc` are monitors whose DDC/CI does
    not answer (their EDID does). When one cannot be served, those already started are
    stopped."""
    servers: dict[str, MonitorServer] = {}
    try:
        for monitor in chosen:
            server = servers[monitor.device] = MonitorServer(
                monitor.i2c_node(root), monitor.ddc(answers=monitor.device not in without_ddc),
                present=plugged_in(monitor.status_file(root)))
            server.start()
    except SocketBusError as exc:
        stop_monitors(servers)
        raise UpError(f"cannot serve the DDC/CI of {monitor.device}: {exc}") from exc
    return servers


def stop_monitors(servers: dict[str, MonitorServer]) -> None:
    for server in servers.values():
        server.stop()
    servers.clear()
