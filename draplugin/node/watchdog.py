"""The compositor watchdog: probe weston's socket twice a second, SIGKILL it when it hangs.

A probe is `libdisplay.compositor.wayland.probe` (registry + sync round trip). Answering →
available.
DEAD or ABSENT → unavailable at once; HUNG → unavailable from the `miss_limit`th in a row (one
slow answer on a loaded node is not an outage, and each flap would rewrite the slice twice).
The cadence is the budget's: with 0.5 s probes back to back, a weston silent for 1.5 s is
tainted and one silent for 2.5 s is killed, so a hang that begins just after an answer is
tainted within 2 s and killed within 3 s (`bench/run operator` prints both).
The listeners hear each change once (taint the devices, report them Unhealthy, refuse
prepares; and the reverse when it answers again). HUNG (connected
but silent, or EAGAIN on connect) for `hung_limit` probes in a row → SIGKILL the weston whose
pid the operator's `Compositor` gives (the pid file westonctl writes, checked to name a weston
of this pid namespace, so a stale pid file never kills a stranger). A stopped process takes no
SIGTERM, and a hang is a crash: no restart order is written, so westonctl exits and the
kubelet counts the restart. DEAD or
ABSENT means there is nothing to kill: westonctl and the kubelet are already restarting it.

A crash and restart quicker than one probe interval never shows as unavailable, yet the new
compositor has none of the claims' sockets: the pid westonctl writes tells it apart, so an
answering compositor with a new pid is reported to the listeners as available again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from libdisplay.compositor.wayland import Liveness, ProbeResult, WaylandError, probe

log = logging.getLogger(__name__)

# The cadence the hang budgets are met with (module docstring).
INTERVAL_S = 0.5
TIMEOUT_S = 0.5


class WatchdogError(Exception):
    """Base of every error this module raises."""


@dataclass(frozen=True, slots=True)
class Availability:
    """What the listeners hear: whether the compositor answers, and why it was judged so."""

    available: bool
    state: Liveness | None
    detail: str


Listener = Callable[[Availability], None]
Killer = Callable[[int, int], None]
PidReader = Callable[[], int | None]
"""weston's checked pid, or None when there is none to signal (`Compositor.pid`)."""


class Watchdog:
    """Probes `socket` every `interval` seconds; tells `listeners` of each availability change.
    `pid` gives the compositor's checked pid."""

    def __init__(
        self,
        socket: Path,
        *,
        pid: PidReader,
        listeners: Sequence[Listener] = (),
        interval: float = INTERVAL_S,
        timeout: float = TIMEOUT_S,
        hung_limit: int = 5,
        miss_limit: int = 3,
        kill: Killer = os.kill,
        on_kill: Callable[[int], None] | None = None,
    ) -> None:
        if interval <= 0 or timeout <= 0 or hung_limit < 1 or miss_limit < 1:
            raise WatchdogError(
                f"interval {interval!r} and timeout {timeout!r} must be positive, "
                f"hung_limit {hung_limit!r} and miss_limit {miss_limit!r} at least 1"
            )
        self._socket = socket
        self._listeners = list(listeners)
        self._read_pid = pid
        self._interval = interval
        self._timeout = timeout
        self._hung_limit = hung_limit
        self._miss_limit = miss_limit
        self._kill = kill
        self._on_kill = on_kill
        self._hung = 0
        self._pid: int | None = None
        self.availability: Availability | None = None
        self.kills = 0

    @property
    def available(self) -> bool:
        """Whether the last probe found the compositor answering (False before the first)."""
        return self.availability is not None and self.availability.available

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    async def run(self) -> None:
        """Probe forever, one probe per `interval` (a slow probe is not followed by a sleep)."""
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await self.step()
            await asyncio.sleep(max(0.0, self._interval - (loop.time() - started)))

    async def step(self) -> Availability:
        """One probe (in a thread: it blocks up to `timeout`), then kill and notify as due."""
        found = await asyncio.to_thread(self._probe)
        if found.state is Liveness.HUNG:
            self._hung += 1
            if self._hung >= self._hung_limit:
                self._hung = 0
                self._kill_compositor(found)
        else:
            self._hung = 0
        if 0 < self._hung < self._miss_limit and self.available:
            log.info("compositor missed a probe (%s); unavailable after %d in a row",
                     found.detail, self._miss_limit)
            return found
        return self._record(found)

    def _probe(self) -> Availability:
        try:
            result: ProbeResult = probe(self._socket, timeout=self._timeout)
        except WaylandError as err:
            return Availability(False, None, f"cannot probe {self._socket}: {err}")
        return Availability(result.state is Liveness.ANSWERING, result.state, result.detail)

    def _kill_compositor(self, found: Availability) -> None:
        pid = self._read_pid()
        if pid is None:
            log.warning("compositor hung (%s) but there is nothing to kill: no weston pid",
                        found.detail)
            return
        log.warning("compositor pid %d hung for %d probes (%s): SIGKILL",
                    pid, self._hung_limit, found.detail)
        try:
            self._kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            log.info("compositor pid %d exited before the SIGKILL", pid)
            return
        self.kills += 1
        if self._on_kill is not None:
            self._on_kill(pid)

    def _record(self, now: Availability) -> Availability:
        before = self.availability
        self.availability = now
        changed = before is None or before.available != now.available
        if changed:
            log.info("compositor %s: %s", "available" if now.available else "unavailable",
                     now.detail)
        new_pid = self._new_pid() if now.available else False
        if changed or new_pid:
            self._notify(now)
        return now

    def _new_pid(self) -> bool:
        """Whether the answering compositor has another pid than the last one that answered."""
        pid = self._read_pid()
        before, self._pid = self._pid, pid
        if before is None or pid is None or before == pid:
            return False
        log.info("compositor pid %d answers, last seen answering as pid %d: it restarted",
                 pid, before)
        return True

    def _notify(self, now: Availability) -> None:
        for listener in self._listeners:
            listener(now)
