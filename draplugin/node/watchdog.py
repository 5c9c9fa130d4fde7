"""The compositor watchdog: probe weston's socket twice a second, tell a busy compositor from
a hung one, and SIGKILL a hung one.

A probe is a registry + sync round trip (`libdisplay.compositor.wayland.Probe`). An
unanswered probe is not abandoned after a time-out: it stays sent, each tick waits on it up to
one interval, and an answer that comes late is an answer (its lateness is logged). Answering
→ available. DEAD or ABSENT → unavailable at once: nothing to kill, westonctl and the kubelet
are already restarting it. A silence is judged by `draplugin.node.hangs` from what the
machine says (the process's state and CPU time in `/proc`, the CPU pressure): a busy
compositor stays available, a hung one is made unavailable (`Budget.taint_after`) and then
SIGKILLed (`kill_after`). The listeners hear each change once (taint the devices, report them
Unhealthy, refuse prepares; and the reverse when it answers again).

The kill goes to the weston whose pid the operator's `Compositor` gives (the pid file westonctl
writes, checked to name a weston of this pid namespace, so a stale pid file never kills a
stranger). A stopped process takes no SIGTERM, and a hang is a crash: no restart order is
written, so westonctl exits and the kubelet counts the restart.

A crash and restart quicker than one probe interval never shows as unavailable, yet the new
compositor has none of the claims' sockets: the pid westonctl writes tells it apart, so an
answering compositor with a new pid is reported to the listeners as available again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from draplugin.node.hangs import DEFAULT_BUDGET, Budget, Judgement, Silence
from libdisplay import procfs
from libdisplay.compositor.wayland import Liveness, Probe, ProbeResult, WaylandError

log = logging.getLogger(__name__)

INTERVAL_S = 0.5
"""Seconds between probes, and the longest one tick waits on an unanswered one."""
PREPARE_WAIT_S = 30.0
"""How long a prepare waits for the watchdog's first verdict: within the kubelet's 45 s."""


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
    """Probes `socket` every `interval` seconds and judges its silences against `budget`;
    tells `listeners` of each availability change. `pid` gives the compositor's checked
    pid, `proc` the `/proc` its state is read from."""

    def __init__(
        self,
        socket: Path,
        *,
        pid: PidReader,
        listeners: Sequence[Listener] = (),
        interval: float = INTERVAL_S,
        budget: Budget = DEFAULT_BUDGET,
        proc: Path = procfs.PROC,
        kill: Killer = os.kill,
        on_kill: Callable[[int], None] | None = None,
    ) -> None:
        if interval <= 0:
            raise WatchdogError(f"interval {interval!r} must be positive")
        self._socket = socket
        self._listeners = list(listeners)
        self._read_pid = pid
        self._interval = interval
        self._silence = Silence(budget)
        self._proc = proc
        self._kill = kill
        self._on_kill = on_kill
        self._pending: Probe | None = None
        self._silent_since: float | None = None
        self._killed = False  # this silence's kill was tried: one per hang
        self._told_busy = False  # this silence was logged as busy
        self._pid: int | None = None
        self.availability: Availability | None = None
        self.kills = 0
        self.slowest_s = 0.0
        """The slowest answer seen so far (seconds from its probe's send), for the record."""

    @property
    def budget(self) -> Budget:
        return self._silence.budget

    @property
    def available(self) -> bool:
        """Whether the compositor is judged available (False before the first verdict)."""
        return self.availability is not None and self.availability.available

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def refusal(self, *, wait: float = PREPARE_WAIT_S) -> str | None:
        """Why a prepare must fail now, or None. Before the first verdict (the operator just
        started) it waits up to `wait` seconds for one; a busy compositor is available, so
        its prepares go on and wait for it. Blocking: call it off the watchdog's loop."""
        deadline = time.monotonic() + wait
        while self.availability is None and time.monotonic() < deadline:
            time.sleep(0.05)
        availability = self.availability
        if availability is not None and availability.available:
            return None
        detail = availability.detail if availability else "not probed yet"
        return (f"the compositor does not answer on its socket ({detail}); "
                "the claim is prepared once it does")

    async def run(self) -> None:
        """Probe forever, one tick per `interval` (a tick that waited is not followed by a
        sleep)."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                started = loop.time()
                await self.step()
                await asyncio.sleep(max(0.0, self._interval - (loop.time() - started)))
        finally:
            self._drop_probe()

    async def step(self) -> Availability | None:
        """One tick: wait up to `interval` for the probe's answer (in a thread), then judge,
        kill and notify as due. The availability after it (None before a first verdict)."""
        found = await asyncio.to_thread(self._wait_for_answer)
        if found is not None:
            return self._record(found)
        judged = self._judge()
        if judged.kill and not self._killed:
            self._killed = True
            self._kill_compositor(judged)
        if judged.hung:
            return self._record(Availability(False, Liveness.HUNG, judged.detail))
        if not self._told_busy and self.available:
            self._told_busy = True
            log.info("compositor busy, not hung: %s", judged.detail)
        return self.availability

    def _wait_for_answer(self) -> Availability | None:
        """The probe's verdict when it has one, None while the compositor is silent."""
        if self._pending is None:
            try:
                self._pending = Probe(self._socket)
            except WaylandError as err:
                self._quiet()
                return Availability(False, None, f"cannot probe {self._socket}: {err}")
            if self._silent_since is None:
                self._silent_since = self._pending.started
        result: ProbeResult | None = self._pending.wait(self._interval)
        if result is None:
            return None
        self._pending = None
        if result.state is Liveness.HUNG:  # EAGAIN on connect: a backlog nobody accepts
            return None
        self._quiet()
        if result.state is Liveness.ANSWERING and result.round_trip_s is not None:
            self.slowest_s = max(self.slowest_s, result.round_trip_s)
            if result.round_trip_s > self._interval:
                log.info("compositor answered late, %.2f s after the probe: busy, not hung",
                         result.round_trip_s)
        return Availability(result.state is Liveness.ANSWERING, result.state, result.detail)

    def _quiet(self) -> None:
        """A verdict that ends the silence: answered, gone, or not to be probed."""
        self._silent_since = None
        self._killed = self._told_busy = False
        self._silence.tick(time.monotonic(), silent_since=None, stat=self._stat(),
                           pressure=None)

    def _judge(self) -> Judgement:
        return self._silence.tick(time.monotonic(), silent_since=self._silent_since,
                                  stat=self._stat(), pressure=procfs.cpu_pressure(proc=self._proc))

    def _stat(self) -> procfs.ProcessStat | None:
        pid = self._read_pid()
        if pid is None:
            return None
        try:
            return procfs.stat(pid, proc=self._proc)
        except OSError:
            return None

    def _drop_probe(self) -> None:
        if self._pending is not None:
            self._pending.close()
            self._pending = None

    def _kill_compositor(self, judged: Judgement) -> None:
        pid = self._read_pid()
        if pid is None:
            log.warning("compositor hung (%s) but there is nothing to kill: no weston pid",
                        judged.detail)
            return
        log.warning("compositor pid %d hung (%s): SIGKILL", pid, judged.detail)
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
