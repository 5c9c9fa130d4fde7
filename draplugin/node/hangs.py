"""Busy or hung: the judgement of a compositor that has not answered its probe yet.

A loaded node, a modeset across 16 outputs or a slow GPU make weston answer late; a stopped
weston, or one whose main loop spins or waits forever, never answers. A late answer is an
answer, so a silence is measured from the probe that went unanswered, and only the part of
it the compositor could have used to answer counts against it (is *charged*), as `/proc`
tells:

- stopped (`T`, `t`): charged; nothing it could do would answer.
- runnable (`R`) but given (almost) no CPU while others wait for one (CPU pressure): not
  charged; it is starved, not hung.
- in the kernel (`D`: a modeset, a GPU ioctl): not charged; the kernel works for it, and a
  SIGKILL would not take before it returns anyway.
- its other threads using CPU (at least `WORKING_SHARE` of one) while the main loop does not
  answer: not charged; it waits on its own work, as weston's main thread waits asleep on a
  software GL rasterizer's threads (Mesa's llvmpipe) to finish a frame. A main loop that
  spins or deadlocks does so with its workers idle.
- running with CPU, or sleeping, without answering: charged (a spinning or a deadlocked
  main loop).
- no view of the process (no pid): charged; the silence alone decides.

Hung once the charged silence reaches `Budget.taint_after` (the devices are tainted) and
killed at `kill_after`; a silence of `give_up_after`, however it is explained, is a hang too.
The defaults meet the budgets of a real hang, tainted within 5 s and killed within 10 s, with
the watchdog's 0.5 s cadence: the hang is probed at most one interval after it began, and
judged at most one interval after the charge crosses the line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from libdisplay.procfs import ProcessStat

STARVED_SHARE: Final = 0.05
"""A runnable process given less than this share of one CPU over a tick is starved."""
WORKING_SHARE: Final = 0.1
"""The process's threads other than the main one, using at least this share of one CPU over a
tick, are working for it: a silence meanwhile is work in progress."""
PRESSURE_MIN: Final = 10.0
"""CPU pressure (percent, `some avg10`) from which a starved process is believed starved:
below it nobody waits for a CPU, so a runnable process without CPU is not explained."""


class HangsError(Exception):
    """Base of every error this module raises."""


@dataclass(frozen=True, slots=True)
class Budget:
    """Seconds of charged silence until the compositor is judged hung (tainted) and until it
    is killed; seconds of any silence after which it is both, whatever the machine says."""

    taint_after: float = 3.5
    kill_after: float = 7.5
    give_up_after: float = 30.0

    def __post_init__(self) -> None:
        if not 0 < self.taint_after <= self.kill_after <= self.give_up_after:
            raise HangsError(
                f"the budget needs 0 < taint_after ({self.taint_after!r}) <= kill_after "
                f"({self.kill_after!r}) <= give_up_after ({self.give_up_after!r})")


DEFAULT_BUDGET: Final = Budget()


@dataclass(frozen=True, slots=True)
class Judgement:
    """The verdict on one silence: whether it is a hang, whether to kill, and why."""

    hung: bool
    kill: bool
    detail: str


class Silence:
    """Judges the compositor's silences; feed it every tick of the watchdog (`tick`), with
    `silent_since` None while it answers."""

    def __init__(self, budget: Budget = DEFAULT_BUDGET) -> None:
        self.budget = budget
        self._charged = 0.0
        self._last_tick: float | None = None
        self._last_stat: ProcessStat | None = None

    def tick(self, now: float, *, silent_since: float | None, stat: ProcessStat | None,
             pressure: float | None) -> Judgement:
        """The verdict at `now` (monotonic seconds) on a silence that began at `silent_since`
        (the unanswered probe's send), given the process's `stat` now and the CPU pressure."""
        before, self._last_stat = self._last_stat, stat
        if silent_since is None:
            self._charged, self._last_tick = 0.0, now
            return Judgement(hung=False, kill=False, detail="answering")
        since = silent_since if self._last_tick is None else max(self._last_tick, silent_since)
        self._last_tick = now
        spent = max(0.0, now - since)
        why = _why(stat, before, spent, pressure)
        if why.charged:
            self._charged += spent
        silence = now - silent_since
        budget = self.budget
        detail = (f"no answer to wl_display.sync for {silence:.1f} s, {self._charged:.1f} s "
                  f"of it charged; now {why.text}")
        kill = self._charged >= budget.kill_after or silence >= budget.give_up_after
        hung = kill or self._charged >= budget.taint_after
        return Judgement(hung=hung, kill=kill, detail=detail)

    def reset(self) -> None:
        """Forget the silence (the compositor was killed, or went away)."""
        self._charged = 0.0
        self._last_tick = None


@dataclass(frozen=True, slots=True)
class _Why:
    charged: bool
    text: str


def _why(stat: ProcessStat | None, before: ProcessStat | None, spent: float,
         pressure: float | None) -> _Why:
    """Whether a tick of silence of `spent` seconds counts against the compositor."""
    if stat is None:
        return _Why(True, "its process cannot be read")
    if stat.state in ("T", "t"):
        return _Why(True, f"stopped (state {stat.state})")
    if stat.state == "D":
        return _Why(False, "busy in the kernel (state D)")
    used = stat.cpu_s - before.cpu_s if before is not None else None
    if stat.state == "R" and used is not None and used < STARVED_SHARE * spent and (
            pressure is None or pressure >= PRESSURE_MIN):
        load = "" if pressure is None else f", CPU pressure {pressure:.0f}%"
        return _Why(False, f"runnable but starved ({used:.2f} s CPU in {spent:.1f} s{load})")
    cpu = "" if used is None else f", {used:.2f} s CPU in {spent:.1f} s"
    workers = _workers_cpu(stat, before)
    if workers is not None and workers >= WORKING_SHARE * spent:
        return _Why(False, f"state {stat.state}{cpu}, {workers:.2f} s of it its other threads':"
                           " working")
    return _Why(True, f"state {stat.state}{cpu}")


def _workers_cpu(stat: ProcessStat, before: ProcessStat | None) -> float | None:
    """The CPU seconds the threads other than the main one used between `before` and `stat`;
    None without a view of the main thread's own time."""
    if before is None or stat.main_cpu_s is None or before.main_cpu_s is None:
        return None
    return (stat.cpu_s - stat.main_cpu_s) - (before.cpu_s - before.main_cpu_s)
