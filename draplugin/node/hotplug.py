"""Hotplug: kernel `drm` uevents (pyudev), debounced, turned into fresh inventories of the cards.

A plug, unplug or mode change makes the kernel send a burst of `change` uevents on the card
(and sometimes on each connector). `Hotplug.run` waits for the first, lets the burst settle for
`debounce` seconds, re-reads sysfs and hands the new inventory and what changed to `on_change`.
A periodic resync every `resync` seconds re-reads sysfs even without events: uevents can be
lost (netlink buffer overruns), and a missed unplug must not stay published forever.

Every read is preceded by a probe and followed by a question to `reprobe`
(draplugin.node.reprobe, where the design is written down): on a real kernel the compositor
hears no hotplug and sysfs may be stale until the DRM master re-probes, so the operator first
asks weston (the master) to re-detect the card's connectors, then reads sysfs; a monitor that
left has its output powered off, one that came back is lit by the driver's modeset, and only
a monitor weston cannot drive live restarts it, after which sysfs is read again and only that
read is published. A SIGHUP, a uevent burst and the resync all take this one path.

A monitor is identified by its connector *and* its EDID: a different monitor plugged into the
same connector keeps the device name (it is the connector's) but shows as `swapped`, so the
slice's identity attributes and the Display status follow, and a claim holding the connector
can be told its monitor changed.

Tests and benches drive it through `QueueEvents` (uevents do not reach unprivileged test
processes) together with `libdisplay.sim.sysfs.hotplug` on a simulated tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from draplugin.node.reprobe import Fingerprint, Reprobe
from libdisplay.hardware.drm import Card, DrmError

log = logging.getLogger(__name__)


class HotplugError(Exception):
    """Base of every error this module raises."""


class UeventSourceError(HotplugError):
    """The netlink monitor could not be opened (no permission, or not the host's namespace)."""


@dataclass(frozen=True, slots=True)
class Uevent:
    """The part of a uevent the operator looks at."""

    action: str
    sys_name: str


class UeventSource(Protocol):
    async def next(self) -> Uevent: ...

    def close(self) -> None: ...


class QueueEvents:
    """An in-process uevent source: `inject()` stands in for the kernel."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Uevent] = asyncio.Queue()

    def inject(self, action: str = "change", sys_name: str = "card0") -> None:
        self._queue.put_nowait(Uevent(action, sys_name))

    async def next(self) -> Uevent:
        return await self._queue.get()

    def close(self) -> None:
        """Nothing to release."""


class UdevEvents:
    """Kernel uevents of the `drm` subsystem through pyudev, read on the event loop."""

    def __init__(self) -> None:
        import pyudev

        try:
            self._monitor: Any = pyudev.Monitor.from_netlink(pyudev.Context(), source="kernel")
            self._monitor.filter_by(subsystem="drm")
            self._monitor.start()
        except OSError as err:
            raise UeventSourceError(f"cannot listen to kernel uevents: {err}") from err
        self._queue: asyncio.Queue[Uevent] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._monitor.fileno(), self._readable)

    def _readable(self) -> None:
        while (device := self._monitor.poll(timeout=0)) is not None:
            self._queue.put_nowait(Uevent(str(device.action), str(device.sys_name)))

    async def next(self) -> Uevent:
        return await self._queue.get()

    def close(self) -> None:
        self._loop.remove_reader(self._monitor.fileno())


@dataclass(frozen=True, slots=True)
class Changes:
    """Device names (`card0-hdmi-a-1`) by what happened to them between two inventories."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    swapped: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.swapped)


def identities(cards: tuple[Card, ...]) -> dict[str, str]:
    """Connected device name → monitor identity (a digest of its EDID; "" without one)."""
    return {
        c.device_name: hashlib.sha256(c.edid).hexdigest()[:16] if c.edid else ""
        for card in cards
        for c in card.connectors
        if c.connected
    }


def fingerprint(cards: tuple[Card, ...]) -> Fingerprint:
    """Every connector's status and EDID digest: what a stale-status kernel still changes."""
    return {
        c.device_name: (c.status, hashlib.sha256(c.edid).hexdigest()[:16] if c.edid else "")
        for card in cards
        for c in card.connectors
    }


def diff(old: Mapping[str, str], new: Mapping[str, str]) -> Changes:
    return Changes(
        added=tuple(sorted(new.keys() - old.keys())),
        removed=tuple(sorted(old.keys() - new.keys())),
        swapped=tuple(sorted(k for k in old.keys() & new.keys() if old[k] != new[k])),
    )


OnChange = Callable[[tuple[Card, ...], Changes], Awaitable[None]]
Scan = Callable[[], tuple[Card, ...]]


class Hotplug:
    """Calls `on_change(cards, changes)` with each new inventory that differs from the last.

    `scan` reads the cards (e.g. `functools.partial(drm.enumerate_cards, sysfs_root=...)`).
    `rescans` and `events` count work done, for metrics and tests.
    """

    def __init__(
        self,
        source: UeventSource,
        scan: Scan,
        on_change: OnChange,
        *,
        debounce: float = 0.05,
        resync: float = 30.0,
        on_event: Callable[[Uevent], None] | None = None,
        reprobe: Reprobe | None = None,
    ) -> None:
        self._source = source
        self._scan = scan
        self._on_change = on_change
        self._debounce = debounce
        self._resync = resync
        self._on_event = on_event
        self._reprobe = reprobe
        self._cards: tuple[Card, ...] = ()
        self._known: dict[str, str] = {}
        self._fingerprint: Fingerprint = {}
        self.events = 0
        self.rescans = 0
        # A rescan on request (SIGHUP) may meet one after a uevent; one at a time, so an older
        # scan never lands after a newer one.
        self._rescanning = asyncio.Lock()

    @property
    def cards(self) -> tuple[Card, ...]:
        return self._cards

    async def start(self) -> tuple[Card, ...]:
        """The first inventory, read now; `run` reports changes from it."""
        self._cards = await asyncio.to_thread(self._scan)
        self._known = identities(self._cards)
        self._fingerprint = fingerprint(self._cards)
        if self._reprobe is not None:
            self._reprobe.adopted(self._cards, self._fingerprint)
        return self._cards

    async def run(self) -> None:
        """Wait for uevents (or the resync period), settle, rescan, report; until cancelled."""
        try:
            while True:
                heard = False
                with contextlib.suppress(TimeoutError):
                    event = await asyncio.wait_for(self._source.next(), self._resync)
                    self._count(event)
                    await self._settle()
                    heard = True
                await self.rescan(probe=heard)
        finally:
            self._source.close()

    async def _settle(self) -> None:
        """Swallow the rest of the burst: events until `debounce` seconds pass without one."""
        while True:
            try:
                event = await asyncio.wait_for(self._source.next(), self._debounce)
            except TimeoutError:
                return
            self._count(event)

    def _count(self, event: Uevent) -> None:
        self.events += 1
        if self._on_event is not None:
            self._on_event(event)
        log.debug("uevent %s %s", event.action, event.sys_name)

    async def rescan(self, *, probe: bool = True) -> Changes:
        """Re-read sysfs; report to `on_change` when the inventory differs from the last.
        `probe`: have the compositor re-detect the connectors first (not on the periodic
        resync, see draplugin.node.reprobe)."""
        async with self._rescanning:
            return await self._rescan(probe)

    async def _rescan(self, probe: bool) -> Changes:
        self.rescans += 1
        if self._reprobe is not None:
            self._reprobe.begin()
        try:
            cards = await asyncio.to_thread(self._scan)
            cards = await self._reprobed(cards, probe)
        except DrmError as err:
            log.error("cannot re-read the cards after a hotplug: %s", err)
            return Changes()
        now = identities(cards)
        changes = diff(self._known, now)
        inventory_changed = cards != self._cards
        self._cards, self._known = cards, now
        if changes:
            log.info("hotplug: added %s, removed %s, swapped %s",
                     list(changes.added), list(changes.removed), list(changes.swapped))
        if inventory_changed:
            await self._on_change(cards, changes)
        return changes

    async def _reprobed(self, cards: tuple[Card, ...], probe: bool) -> tuple[Card, ...]:
        """`cards`, read again after the compositor's probe (sysfs was stale before it), or
        after the restart that made a new compositor probe the card."""
        if self._reprobe is not None and await self._reprobe.probe(ask=probe):
            cards = await asyncio.to_thread(self._scan)
        seen = fingerprint(cards)
        changed, self._fingerprint = seen != self._fingerprint, seen
        if self._reprobe is None:
            return cards
        restarted = await self._reprobe(cards, seen, sysfs_changed=changed,
                                        moved=lambda: fingerprint(self._scan()) != seen)
        if not restarted:
            return cards
        cards = await asyncio.to_thread(self._scan)
        self._fingerprint = fingerprint(cards)
        self._reprobe.settled(cards, self._fingerprint)
        return cards
