"""Making the compositor follow a connector change: the operator's ordered restart on hotplug.

DESIGN. Three facts of a real kernel decide this (measured in the VM tier, reference/vm-kms.md):

1. Weston in the pod hears no hotplug. It listens to udevd's rebroadcast, which stays in the
   host's network namespace. The operator hears the kernel's own uevent (NETLINK_KOBJECT_UEVENT,
   group 1, which reaches the pod's namespace because the pod keeps the host user namespace).
2. A connector's sysfs `status` may be stale until the DRM master probes. virtio-gpu re-detects
   only when its master asks; with weston holding master, an unplugged head stays "connected"
   (its EDID blob does change at once). A GPU with HPD interrupts re-detects in the kernel
   before it sends the uevent, so there sysfs is already right.
3. The operator must never probe the card itself: it is not master, and a non-master probe
   refreshes nothing (and opening the card could take master from a restarting weston).

So after every "connectors may have changed" event (a uevent burst, SIGHUP, the periodic
resync) `Hotplug` re-reads sysfs and asks `Reprobe` whether the compositor must restart:

- yes when the read differs from the one before it (any connector's status or EDID): on a
  re-detecting GPU the status changed and weston still runs the old set; on virtio-gpu the
  status is stale but the EDID already moved;
- yes when the compositor's outputs are not the connected connectors (a change nobody heard,
  or a second plug that raced a restart), but at most once for the same sysfs state, so a
  monitor the compositor declines to light cannot restart it forever;
- no while nothing answers on the compositor's socket (the weston that comes up probes at its
  start), and no where the compositor's outputs are not the card's connectors (output aliases:
  a simulated node's x11 outputs, which no restart changes).

The restart is an ordinary restart order (westonctl starts weston again at once, the crash
count stays put). The new weston takes master and probes every connector, which refreshes
sysfs; once it answers, `Hotplug` reads sysfs again and publishes that second read only — the
one that is right on virtio-gpu; elsewhere it finds what the first found. The uevent the
probe itself may raise finds sysfs unchanged and the outputs matching, so it restarts nothing.

The mode a plugged monitor runs at is a second step, after that read is published: the driver
derives weston.ini again for the connectors now connected (`Driver.follow_connectors`) and
restarts the compositor once more if the text changed. On a GPU that re-detects before the
uevent the first restart already had the right connectors, but weston.ini is derived only
from a read that is known to be right; on virtio-gpu it is the only correct one. So a plug
costs up to two restarts there: the re-probe, then the new modes. After unplugs alone the
file is only rewritten: a pulled output needs no second restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from draplugin.node.watchdog import NoCompositorPidError, compositor_pid
from libdisplay import wayland
from libdisplay.drm import Card
from libdisplay.weston import order_restart

log = logging.getLogger(__name__)

POLL_S = 0.05

Fingerprint = Mapping[str, tuple[str, str]]
"""Connector device name → (sysfs status, EDID digest), for every connector of every card."""


def connected_outputs(cards: tuple[Card, ...]) -> frozenset[str]:
    """The output names (`Virtual-1`) of the connected connectors."""
    return frozenset(c.output_name for card in cards for c in card.connectors if c.connected)


@dataclass(frozen=True, slots=True)
class ReprobeConfig:
    weston_socket: Path
    pid_file: Path
    restarts_dir: Path
    restart_timeout: float = 30.0
    probe_timeout: float = 1.0


OutputsReader = Callable[[], frozenset[str] | None]
Restarter = Callable[[str, Callable[[], bool]], bool]
"""`restart(reason, moved)`: order the restart; return once a new compositor answers or
`moved()` (sysfs shows the change) holds; False when there was no compositor to restart."""


class Reprobe:
    """Decides, after each sysfs read, whether the compositor restarts; restarts it if so.

    `outputs()` gives the compositor's output names (None when it does not answer); see
    `Restarter` for `restart`. Both block: they run on a worker thread.
    """

    def __init__(self, outputs: OutputsReader, restart: Restarter) -> None:
        self._outputs = outputs
        self._restart = restart
        self._restarted_for: Fingerprint | None = None
        self.restarts = 0

    async def __call__(self, cards: tuple[Card, ...], fingerprint: Fingerprint, *,
                       sysfs_changed: bool, moved: Callable[[], bool]) -> bool:
        """Restart the compositor when it cannot see the change by itself; True if it did.
        `moved()` re-reads sysfs and says whether it differs from `fingerprint`."""
        outputs = await asyncio.to_thread(self._outputs)
        if outputs is None:
            return False
        stale = outputs != connected_outputs(cards)
        if not sysfs_changed and not (stale and fingerprint != self._restarted_for):
            return False
        reason = "connectors changed in sysfs" if sysfs_changed else \
            f"the compositor runs {sorted(outputs)}, sysfs has {sorted(connected_outputs(cards))}"
        log.info("hotplug: restarting the compositor so it re-probes the card (%s)", reason)
        try:
            restarted = await asyncio.to_thread(self._restart, f"hotplug: {reason}", moved)
        except ReprobeError as err:
            log.error("%s", err)
            return False
        self._restarted_for = dict(fingerprint)
        self.restarts += restarted
        return restarted

    def settled(self, fingerprint: Fingerprint) -> None:
        """The state the restarted compositor probed: what it shows is its verdict on it."""
        self._restarted_for = dict(fingerprint)


class ReprobeError(Exception):
    """The ordered restart did not bring a compositor back within its bound."""


def outputs_reader(config: ReprobeConfig) -> OutputsReader:
    def read() -> frozenset[str] | None:
        try:
            found = wayland.list_outputs(config.weston_socket, timeout=config.probe_timeout * 2)
        except wayland.WaylandError:
            return None
        return frozenset(o.name for o in found)

    return read


def restarter(config: ReprobeConfig) -> Restarter:
    """A restart order naming weston's pid, SIGTERM, then a bounded wait for a new weston to
    answer on the socket (westonctl starts it at once), cut short when sysfs already shows the
    change: the old master's exit, or the new one's probe before its socket answers, refreshes
    the kernel's view, and the slice need not wait for the compositor's start-up."""

    def restart(reason: str, moved: Callable[[], bool]) -> bool:
        try:
            pid = compositor_pid(config.pid_file)
        except NoCompositorPidError as err:
            log.info("no compositor to restart: %s", err)
            return False
        order_restart(pid, reason=reason, directory=config.restarts_dir)
        with contextlib.suppress(ProcessLookupError):  # ended by itself: the order still holds
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + config.restart_timeout
        while time.monotonic() < deadline:
            if moved() or _new_compositor_answers(config, pid):
                return True
            time.sleep(POLL_S)
        raise ReprobeError(f"no compositor answered on {config.weston_socket} within "
                           f"{config.restart_timeout:g} s of the hotplug restart of pid {pid}")

    return restart


def _new_compositor_answers(config: ReprobeConfig, old: int) -> bool:
    try:
        pid = compositor_pid(config.pid_file)
    except NoCompositorPidError:
        return False
    if pid == old:
        return False
    probed = wayland.probe(config.weston_socket, timeout=config.probe_timeout)
    return probed.state is wayland.Liveness.ANSWERING


def for_compositor(config: ReprobeConfig) -> Reprobe:
    return Reprobe(outputs_reader(config), restarter(config))
