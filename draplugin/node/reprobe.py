"""Making the compositor see a connector change on a real card: the restart on hotplug.

DESIGN. Three facts of a real kernel decide this (measured in the VM tier, docs/kms.md §2):

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

This restart stays even though every other output change is applied live
(`draplugin.compositor`), a re-plug on a connector weston already drives included. Why, on
virtio-gpu (kernel 6.12, weston 14; bench/vm-monitors re-plugs head 1 with weston alone and
prints what each side shows):

- The kernel does not re-detect on the device's event (seen, docs/kms.md §2): sysfs
  `status` keeps what the last probe found (an unplugged head stays "connected", while its
  EDID blob does change) until the DRM master probes (GETCONNECTOR); a non-master's probe is
  demoted to a read-only one, and the operator must not become master (fact 3).
- weston, the master, does not ask: its DRM backend re-reads connectors only on udev's
  rebroadcast, which the pod never hears, and libweston exports no re-probe. So weston keeps
  the head as it was at its start: after an unplug it still drives the output (seen: its
  wl_output stays), and after a re-plug its mode list is the old monitor's (its code).
- Seen with 16 heads (bench/vm-monitors, weston alone, head 1 unplugged then plugged, 3 s
  watched after each): sysfs said "connected" with a 256-byte EDID throughout, weston kept
  Virtual-2 and its CRTC kept weston's framebuffer, and QEMU went on showing the head at
  1280x800; a CONFIGURE modeset=1 of it answered OK in 73 ms.
- So nothing in the pod can tell an unplug from a re-plug of the same monitor from a different
  monitor: the EDID blob moves, the status does not. A live `CONFIGURE modeset=1` of the output
  (the module powers it off and on) re-commits the old mode to whatever is now on the
  connector; right only when the same monitor came back, and no answer to an unplug, which the
  slice must show. A weston restart is the only master probe a pod can order.
- weston.ini's `force-on` for every connector does not avoid it: the frontend
  (frontend/main.c, `drm_head_should_force_enable`) then enables a head with no monitor, but
  the DRM backend builds its mode list from the connector's modes, which a disconnected
  connector has none of, so the output comes up only at a modeline written in weston.ini, and
  when a monitor arrives nothing refreshes that list; every empty connector holds a CRTC and
  is painted for nobody.

What would make a re-plug live: a probe by the master without a restart, i.e. the layout
module (inside weston) issuing GETCONNECTOR on weston's own card fd and answering each
connector's status; then a re-plug whose EDID digest is the one weston started with is a
`Wanted(modeset=True)` of that output, an unplug a power-off of it, and only a new monitor a
restart. Until then the screens of every head are dark from the SIGTERM until the new weston's
first frame, and the other heads' tenants lose their connections (bench/vm-monitors prints both
on a real kernel; `bench/run prepare` the restart on the simulated node). Where the
compositor's outputs are not the card's connectors (a simulated node's x11 outputs) there is
nothing to re-probe, and a re-plug is a live modeset of that output
(`Driver.follow_connectors`).

The restart is an ordinary restart order (`Compositor.restart`: westonctl starts weston again
at once, the crash count stays put), bounded by the operator's `--restart-timeout`. The new
weston takes master and probes every connector, which refreshes sysfs; once it answers,
`Hotplug` reads sysfs again and publishes that second read only — the one that is right on
virtio-gpu; elsewhere it finds what the first found. The uevent the probe itself may raise
finds sysfs unchanged and the outputs matching, so it restarts nothing.

The settings a plugged monitor runs at are a second step, after that read is published: the
driver derives them again for the connectors now connected (`Driver.follow_connectors`) and
applies them live to the compositor the re-probe started.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from draplugin.compositor import Compositor, CompositorError
from libdisplay.compositor import wayland
from libdisplay.hardware.drm import Card

log = logging.getLogger(__name__)

Fingerprint = Mapping[str, tuple[str, str]]
"""Connector device name → (sysfs status, EDID digest), for every connector of every card."""


def connected_outputs(cards: tuple[Card, ...]) -> frozenset[str]:
    """The output names (`Virtual-1`) of the connected connectors."""
    return frozenset(c.output_name for card in cards for c in card.connectors if c.connected)


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
        except CompositorError as err:
            log.error("%s", err)
            return False
        self._restarted_for = dict(fingerprint)
        self.restarts += restarted
        return restarted

    def settled(self, fingerprint: Fingerprint) -> None:
        """The state the restarted compositor probed: what it shows is its verdict on it."""
        self._restarted_for = dict(fingerprint)


def outputs_reader(compositor: Compositor) -> OutputsReader:
    def read() -> frozenset[str] | None:
        try:
            found = wayland.list_outputs(compositor.socket, timeout=compositor.probe_timeout * 2)
        except wayland.WaylandError:
            return None
        return frozenset(o.name for o in found)

    return read


def restarter(compositor: Compositor) -> Restarter:
    """The compositor's restart, cut short when sysfs already shows the change: the old
    master's exit, or the new one's probe before its socket answers, refreshes the kernel's
    view, and the slice need not wait for the compositor's start-up."""

    def restart(reason: str, moved: Callable[[], bool]) -> bool:
        return compositor.restart("new-connector", reason, moved=moved)

    return restart


def for_compositor(compositor: Compositor) -> Reprobe:
    return Reprobe(outputs_reader(compositor), restarter(compositor))
