"""Making the compositor see a connector change on a real card: a probe by the DRM master,
which also has weston join a monitor on a connector it never drove, and the restart that
stays where its DRM backend cannot.

DESIGN. Three facts of a real kernel decide this (measured in the VM tier, docs/kms.md §2):

1. Weston in the pod hears no hotplug. It listens to udevd's rebroadcast, which stays in the
   host's network namespace. The operator hears the kernel's own uevent (NETLINK_KOBJECT_UEVENT,
   group 1, which reaches the pod's namespace because the pod keeps the host user namespace).
2. A connector's sysfs `status` may be stale until the DRM master probes. virtio-gpu re-detects
   only when its master asks; with weston holding master, an unplugged head stays "connected"
   (with 16 heads its EDID stayed 256 bytes too, so sysfs showed no change at all: the reason
   bench/vm-monitors' re-plug stage once waited 300 s for a slice that never dropped the head).
   A GPU with HPD interrupts re-detects in the kernel before it sends the uevent.
3. The operator must never probe the card itself: it is not master, and a non-master probe
   refreshes nothing (and opening the card could take master from a restarting weston).

So after every "connectors may have changed" event (a uevent burst, SIGHUP) `Hotplug` first
asks the compositor to `probe`: the layout module's PROBE, a forced
GETCONNECTOR of every connector on weston's own card fd (westonctl/layout/probe.c), which the
kernel honours because weston is the master. In the same request the module has the DRM
backend re-read every head that has no output and whose state changed
(westonctl/layout/join.c, through `weston_drm_head_api_v1`, which our patch of Debian's
weston adds: build-support/weston-drm/), and weston's frontend enables an output for a newly
connected one at its `[output]` settings, else the monitor's preferred mode, right of the
others. Then sysfs is fresh; `Hotplug` reads it and asks `Reprobe` what the compositor must
do. Where PROBE answered (the DRM backend):

- a monitor on a connector weston never drove, whose output the probe made weston enable:
  no restart; its device is published in the slice and the driver's `follow_connectors`
  gives it its Display's settings. The monitor's EDID is recorded as the one weston drives
  that output for.
- a connector whose monitor went away (disconnected, weston still has its output): the
  output is powered off (`CONFIGURE <out> power=off`), not left driving a connector with no
  monitor and not disabled: it keeps its place, its claims' surfaces and the mode list of
  the monitor weston probed at its start, which is what a re-plug of that monitor needs. The
  slice drops the device (the read is published); no restart.
- the same monitor back (its EDID digest is the one weston drove it with): no restart; the
  read is published with the device `added`, and the driver's `follow_connectors` applies
  its settings with a `modeset`, which power-cycles the output and lights it again.
- the restart stays (reason `new-connector`, counted in display_compositor_restarts_total)
  where the backend cannot follow: a different monitor on a connector weston drives
  (another EDID; a driven output is never re-read, since its mode list is fixed when it is
  enabled, so the new monitor would run at the old one's modes), and a monitor on a
  connector weston never drove whose output did not appear (a stock drm-backend.so without
  the re-read, or a frontend that refused the output, e.g. `mode=off`).

The periodic resync (a uevent may be lost) reads sysfs without a probe: a forced probe
re-reads every monitor's EDID over DDC under the kernel's mode_config lock, and the kernel
documents that it may flicker; weston itself probes only on a hotplug event. So on a device
that does not re-detect by itself a lost uevent waits for the next event or a SIGHUP.

At most one restart per sysfs state, so a monitor the compositor declines to light cannot
restart it forever. Where PROBE is `unsupported` (x11 or headless: a simulated node's outputs
are not the card's connectors, and there `Reprobe` is not used at all) or no layout module
answers (a stock shell), the rule is the one before PROBE existed: restart when sysfs differs
from the read before, or when the compositor's outputs are not the connected connectors.

The restart is an ordinary restart order (`Compositor.restart`: westonctl starts weston again
at once, the crash count stays put), bounded by the operator's `--restart-timeout`. The new
weston takes master and probes every connector; once it answers, `Hotplug` reads sysfs again
and publishes that read, and `settled` records it as what weston drives. While nothing answers
on the compositor's socket nothing is decided: the weston that comes up probes at its start.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from draplugin.compositor import Compositor, CompositorError
from libdisplay.compositor import wayland
from libdisplay.compositor.layout import ConnectorProbe, LayoutError
from libdisplay.hardware.drm import Card

log = logging.getLogger(__name__)

Fingerprint = Mapping[str, tuple[str, str]]
"""Connector device name → (sysfs status, EDID digest), for every connector of every card."""


def connected_outputs(cards: tuple[Card, ...]) -> frozenset[str]:
    """The output names (`Virtual-1`) of the connected connectors."""
    return frozenset(c.output_name for card in cards for c in card.connectors if c.connected)


def driven_digests(cards: tuple[Card, ...], fingerprint: Fingerprint) -> dict[str, str]:
    """Output name → EDID digest of each connected connector: what a weston that probed the
    card now drives each output for."""
    return {c.output_name: fingerprint[c.device_name][1]
            for card in cards for c in card.connectors
            if c.connected and c.device_name in fingerprint}


OutputsReader = Callable[[], frozenset[str] | None]
Restarter = Callable[[str, Callable[[], bool]], bool]
"""`restart(reason, moved)`: order the restart; return once a new compositor answers or
`moved()` (sysfs shows the change) holds; False when there was no compositor to restart."""
Prober = Callable[[], tuple[ConnectorProbe, ...] | None]
"""The compositor's PROBE: what it found, None where it cannot (LayoutError: no answer)."""
PowerOff = Callable[[str, int | None], bool]
"""`power_off(output, decided_at)`: turn it off unless it changed after the ticket
`decided_at` (`Compositor.power_off`); whether it did."""
Ticket = Callable[[], int]
"""The compositor's change count now (`Compositor.ticket`)."""


class Reprobe:
    """Probes before each sysfs read, then decides whether the compositor restarts (and
    restarts it), or powers off the outputs whose monitor went away.

    `outputs()` gives the compositor's output names (None when it does not answer); see
    `Restarter` for `restart`, `Prober` for `probe`. All block: they run on a worker thread.
    Without `probe` (or once it answered that it cannot) the rule is sysfs's alone.
    """

    def __init__(self, outputs: OutputsReader, restart: Restarter, *,
                 probe: Prober | None = None, power_off: PowerOff | None = None,
                 ticket: Ticket | None = None) -> None:
        self._outputs = outputs
        self._restart = restart
        self._probe = probe
        self._power_off = power_off
        self._ticket = ticket
        self._decided_at: int | None = None
        self._live = False  # the last probe answered: weston can follow a re-plug live
        self._driven: dict[str, str] = {}
        self._dark: set[str] = set()
        self._restarted_for: Fingerprint | None = None
        self.restarts = 0
        self.powered_off = 0

    def begin(self) -> None:
        """A sysfs read is about to be made: what is decided on it holds only for outputs
        that no other change touched since (the compositor's `ticket`)."""
        self._decided_at = None if self._ticket is None else self._ticket()

    async def probe(self, *, ask: bool = True) -> bool:
        """Ask the compositor to re-detect the card's connectors; True when it did, so a
        sysfs read from now on is fresh. `ask` False: no probe for this read (the periodic
        resync), which is then judged by sysfs alone."""
        if self._probe is None or not ask:
            return False
        try:
            found = await asyncio.to_thread(self._probe)
        except LayoutError as err:
            log.warning("hotplug: the compositor did not probe its connectors: %s", err)
            self._live = False
            return False
        if found is None:
            self._probe = None  # x11 or headless: nothing will ever re-detect there
            self._live = False
            return False
        self._live = True
        log.debug("hotplug: the compositor probed %s",
                  ", ".join(f"{p.connector} {p.status}" for p in found))
        return True

    async def __call__(self, cards: tuple[Card, ...], fingerprint: Fingerprint, *,
                       sysfs_changed: bool, moved: Callable[[], bool]) -> bool:
        """Restart the compositor when it cannot follow the change live; True if it did.
        `moved()` re-reads sysfs and says whether it differs from `fingerprint`."""
        outputs = await asyncio.to_thread(self._outputs)
        if outputs is None:
            return False
        if self._live:
            reason = await self._after_probe(cards, fingerprint, outputs)
        else:
            reason = self._sysfs_reason(cards, outputs, sysfs_changed)
        if reason is None:
            return False
        if (self._live or not sysfs_changed) and \
                fingerprint == self._restarted_for:
            return False  # restarted for this very state: what the compositor shows stays
        log.info("hotplug: restarting the compositor so it re-probes the card (%s)", reason)
        try:
            restarted = await asyncio.to_thread(self._restart, f"hotplug: {reason}", moved)
        except CompositorError as err:
            log.error("%s", err)
            return False
        self._restarted_for = dict(fingerprint)
        self.restarts += restarted
        return restarted

    async def _after_probe(self, cards: tuple[Card, ...], fingerprint: Fingerprint,
                           outputs: frozenset[str]) -> str | None:
        """sysfs as the master's probe left it: power off the outputs whose monitor left;
        the reason to restart when a monitor weston cannot drive live arrived, else None."""
        connectors = {c.output_name: c for card in cards for c in card.connectors}
        plugged = driven_digests(cards, fingerprint)
        never = sorted(plugged.keys() - outputs)
        other = sorted(name for name in plugged.keys() & outputs
                       if self._driven.get(name, plugged[name]) != plugged[name])
        self._dark -= plugged.keys()  # back: the driver's modeset lights it
        for name in sorted(outputs & connectors.keys() - plugged.keys() - self._dark):
            await self._turn_off(name)
        for name in sorted(plugged.keys() & outputs - self._driven.keys()):
            self._driven[name] = plugged[name]  # joined live (the probe's re-read)
            log.info("hotplug: weston enabled an output for the monitor on %s, no restart",
                     name)
        if never:
            return (f"a monitor on {', '.join(never)}, which weston never drove and did not "
                    "enable (its DRM backend cannot re-read the head, or it refused the "
                    "output)")
        if other:
            return f"a different monitor on {', '.join(other)} than weston drives it for"
        return None

    async def _turn_off(self, output: str) -> None:
        if self._power_off is None:
            return
        try:
            done = await asyncio.to_thread(self._power_off, output, self._decided_at)
        except LayoutError as err:
            log.error("hotplug: cannot power off output %s after its monitor left: %s",
                      output, err)
            return
        if not done:
            return  # changed since the read (a claim lit it): the next read decides again
        self._dark.add(output)
        self.powered_off += 1
        log.info("hotplug: the monitor on %s left: output powered off, no restart", output)

    def _sysfs_reason(self, cards: tuple[Card, ...], outputs: frozenset[str],
                      sysfs_changed: bool) -> str | None:
        """Without a probe: any sysfs change, or outputs that are not the connected ones."""
        if sysfs_changed:
            return "connectors changed in sysfs"
        if outputs != connected_outputs(cards):
            return (f"the compositor runs {sorted(outputs)}, sysfs has "
                    f"{sorted(connected_outputs(cards))}")
        return None

    def settled(self, cards: tuple[Card, ...], fingerprint: Fingerprint) -> None:
        """A compositor that probed the card (at its start, or the one a restart started)
        drives what this read shows: what it shows is its verdict on it, and a monitor
        coming back later is compared with the one of this read."""
        self._restarted_for = dict(fingerprint)
        self._driven = driven_digests(cards, fingerprint)
        self._dark.clear()

    def adopted(self, cards: tuple[Card, ...], fingerprint: Fingerprint) -> None:
        """The first read: the running weston drives its connected monitors (it probed the
        card at its start); no restart is charged to this state."""
        self._driven = driven_digests(cards, fingerprint)


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


def prober(compositor: Compositor) -> Prober:
    """PROBE through the layout module; a compositor without a control socket cannot."""
    if compositor.control is None:
        return lambda: None
    return compositor.probe_connectors


def power_off(compositor: Compositor) -> PowerOff:
    """The power-off of an output whose monitor left, unless it changed since the read."""

    def turn_off(output: str, decided_at: int | None) -> bool:
        return compositor.power_off(output, decided_at=decided_at) is not None

    return turn_off


def for_compositor(compositor: Compositor) -> Reprobe:
    """The follow-up of a hotplug on `compositor`, every change asked of it (its owner)."""
    return Reprobe(outputs_reader(compositor), restarter(compositor), probe=prober(compositor),
                   power_off=power_off(compositor), ticket=compositor.ticket)
