"""watchdog: a busy compositor (answers late) is neither tainted, refused nor killed while
claims are prepared; a hung one (SIGSTOP, or a main loop spinning without answering) is tainted
within 5 s and killed within 10 s, at the production defaults. Real headless weston, and a
stand-in compositor made busy or hung on demand (tests.support.busy_compositor)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from draplugin import compositor, testing
from draplugin.claims import ClaimRef
from draplugin.compositor.pid import weston_pid
from draplugin.driver import delivery
from draplugin.driver.state import Driver
from draplugin.node import hangs, watchdog
from libdisplay.compositor.wayland import Liveness
from tests.support import busy_compositor, weston

TAINT_WITHIN_S = 5.0
KILL_WITHIN_S = 10.0
"""A real hang's budgets, met by the default budget on the watchdog's cadence (checked below
without a clock); bench/soak and bench/operator print what a loaded node takes."""
# Bounds of the wall-clock runs that a loaded 2-core machine meets (a late tick, a slow
# thread) and that still sit below the give-up's 30 s, so a hang found only by it fails.
TAINTED_BY_S = 15.0
KILLED_BY_S = 20.0
KUBELET_PREPARE_S = 45.0
"""How long the kubelet gives a NodePrepareResources call."""
MAX_STEPS = 400  # bounds the step loops below (0.05 s each at most, plus the probe's work)
QUICK = hangs.Budget(taint_after=0.3, kill_after=0.6, give_up_after=30.0)
"""A budget the step loops reach in a few ticks."""


def _steps_until(dog: watchdog.Watchdog, *, until: Callable[[], bool], what: str) -> None:
    async def main() -> None:
        for _ in range(MAX_STEPS):
            await dog.step()
            if until():
                return
        raise AssertionError(f"not {what} after {MAX_STEPS} ticks")

    asyncio.run(main())


class _Claims:
    """A driver on a simulated card whose prepares ask `refuse` first, as the operator's do,
    and one claim of the card's monitor, without output settings."""

    def __init__(self, root: Path, refuse: Callable[[], str | None]) -> None:
        self.kube = _DictKube()
        settings = dataclasses.replace(testing.settings(root), delivery="shared")
        self.driver = Driver(settings, self.kube, publisher=testing.Refusing(refuse))
        self.ref = ClaimRef(uid="uid-kiosk", namespace="shop", name="kiosk")
        self.kube.claims[("shop", "kiosk")] = {
            "metadata": {"name": "kiosk", "namespace": "shop", "uid": self.ref.uid},
            "status": {"allocation": {"devices": {"results": [
                {"request": "screen", "driver": "display.liken.sh", "pool": testing.NODE,
                 "device": "card0-hdmi-a-1"}]}}},
        }

    def cycle(self) -> str:
        """Prepare then unprepare the claim; the prepare's error ("" when prepared)."""
        error = self.driver.prepare([self.ref])[self.ref.uid].error
        self.driver.unprepare([self.ref])
        return error


class _DictKube:
    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}

    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.claims.get((namespace, name))

    def get_display(self, name: str) -> dict[str, Any] | None:
        return None


@contextlib.asynccontextmanager
async def _watching(dog: watchdog.Watchdog) -> AsyncIterator[None]:
    """`dog` running, from the compositor's first answer until the block ends."""
    task = asyncio.create_task(dog.run())
    try:
        await testing.until(lambda: dog.available, "the compositor answers")
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_a_busy_compositor_is_neither_tainted_refused_nor_killed(tmp_path: Path) -> None:
    """Every answer 1.5 s late for 5 s (three times what the probe once allowed), the stand-in
    burning CPU meanwhile: claims prepared all along, no taint, no kill."""
    heard: list[watchdog.Availability] = []
    killed: list[int] = []
    with busy_compositor.running(tmp_path) as stand_in:
        dog = watchdog.Watchdog(stand_in.socket, pid=lambda: stand_in.process.pid,
                                listeners=[heard.append],
                                kill=lambda pid, _sig: killed.append(pid))
        claims = _Claims(tmp_path / "node", lambda: dog.refusal(wait=5.0))

        async def main() -> list[str]:
            async with _watching(dog):
                stand_in.busy()
                errors, until = [], time.monotonic() + busy_compositor.BUSY_S + \
                    busy_compositor.LAG_S
                while time.monotonic() < until:
                    errors.append(await asyncio.to_thread(claims.cycle))
                    await asyncio.sleep(0.2)
                return errors

        errors = asyncio.run(main())
    assert errors and all(e == "" for e in errors), errors
    assert killed == []
    assert [a.available for a in heard] == [True]
    # It was busy indeed: the answers came late.
    assert dog.slowest_s >= busy_compositor.LAG_S, dog.slowest_s


def test_a_compositor_waiting_on_its_own_working_threads_is_not_killed(tmp_path: Path) -> None:
    """Silent past the kill line while its main thread sleeps on a thread of its own that
    burns CPU (weston waiting on llvmpipe's rasterizer threads): busy, not hung."""
    heard: list[watchdog.Availability] = []
    killed: list[int] = []
    with busy_compositor.running(tmp_path) as stand_in:
        dog = watchdog.Watchdog(stand_in.socket, pid=lambda: stand_in.process.pid,
                                listeners=[heard.append],
                                kill=lambda pid, _sig: killed.append(pid))

        async def main() -> None:
            async with _watching(dog):
                stand_in.work()
                await testing.until(lambda: dog.slowest_s >= hangs.DEFAULT_BUDGET.kill_after,
                                    "an answer after the working silence")

        asyncio.run(main())
    assert killed == []
    assert [a.available for a in heard] == [True]


def _times_to_taint_and_kill(dog: watchdog.Watchdog, hang: Callable[[], None],
                             dead: Callable[[], bool]) -> tuple[float, float]:
    """Run `dog` at its defaults; `hang()` the compositor once it answers; the seconds from
    the hang until it is unavailable, and until `dead()`."""

    async def main() -> tuple[float, float]:
        async with _watching(dog):
            began = time.monotonic()
            hang()
            await testing.until(lambda: not dog.available, "the hang is judged")
            tainted = time.monotonic() - began
            await testing.until(dead, "the hung compositor is dead")
            return tainted, time.monotonic() - began

    return asyncio.run(main())


def test_the_default_budget_meets_a_real_hang_s_budgets() -> None:
    """A hang is probed at most one interval after it began, and judged at most one interval
    after its charged silence crosses a line."""
    cadence = 2 * watchdog.INTERVAL_S
    assert hangs.DEFAULT_BUDGET.taint_after + cadence <= TAINT_WITHIN_S
    assert hangs.DEFAULT_BUDGET.kill_after + cadence <= KILL_WITHIN_S
    assert hangs.DEFAULT_BUDGET.give_up_after > KILLED_BY_S


def test_the_operators_waits_on_the_layout_module_outlast_the_kill_of_a_hang() -> None:
    """A wait on the compositor shorter than the kill of a hung one decides a hang on a short
    time-out: a busy compositor's late answer would fail the claim or the change."""
    assert compositor.CONTROL_TIMEOUT_S > KILL_WITHIN_S
    assert delivery.CONTROL_TIMEOUT_S > KILL_WITHIN_S
    assert compositor.CONTROL_TIMEOUT_S < KUBELET_PREPARE_S


def test_a_stopped_compositor_is_tainted_then_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "weston.pid"
    with weston.headless(renderer="noop") as w:
        pid_file.write_text(f"{w.process.pid}\n")
        dog = watchdog.Watchdog(w.socket, pid=lambda: weston_pid(pid_file))
        try:
            tainted, killed = _times_to_taint_and_kill(
                dog, lambda: w.process.send_signal(signal.SIGSTOP),
                w.process.exited)
        finally:
            w.process.send_signal(signal.SIGCONT)
        assert w.process.wait(timeout=10) == -signal.SIGKILL
    assert dog.kills == 1
    assert tainted < killed and tainted <= TAINTED_BY_S and killed <= KILLED_BY_S, (
        tainted, killed)


def test_a_main_loop_spinning_without_answering_is_tainted_and_killed_in_time(
        tmp_path: Path) -> None:
    """Running and using CPU is not progress: only an answer is."""
    with busy_compositor.running(tmp_path) as stand_in:
        dog = watchdog.Watchdog(stand_in.socket, pid=lambda: stand_in.process.pid)
        tainted, killed = _times_to_taint_and_kill(dog, stand_in.hang,
                                                   lambda: stand_in.process.poll() is not None)
        assert stand_in.process.wait(timeout=10) == -signal.SIGKILL
    assert dog.kills == 1
    assert tainted < killed and tainted <= TAINTED_BY_S and killed <= KILLED_BY_S, (
        tainted, killed)


def test_a_hang_that_ends_before_the_kill_recovers_without_one(tmp_path: Path) -> None:
    pid_file = tmp_path / "weston.pid"
    heard: list[watchdog.Availability] = []
    with weston.headless(renderer="noop") as w:
        pid_file.write_text(f"{w.process.pid}\n")
        dog = watchdog.Watchdog(w.socket, pid=lambda: weston_pid(pid_file),
                                listeners=[heard.append], interval=0.05,
                                budget=dataclasses.replace(QUICK, kill_after=30.0))
        _steps_until(dog, until=lambda: dog.available, what="available")
        w.process.send_signal(signal.SIGSTOP)
        _steps_until(dog, until=lambda: not dog.available, what="tainted")
        w.process.send_signal(signal.SIGCONT)
        _steps_until(dog, until=lambda: dog.available, what="available again")
        assert dog.kills == 0 and not w.process.exited()
    assert [(a.available, a.state) for a in heard] == [
        (True, Liveness.ANSWERING), (False, Liveness.HUNG), (True, Liveness.ANSWERING)]


def test_dead_compositor_is_unavailable_and_not_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "weston.pid"
    heard: list[watchdog.Availability] = []
    with weston.headless(renderer="noop") as w:
        pid_file.write_text(f"{w.process.pid}\n")
        sock = w.socket
        w.process.stop()
    dog = watchdog.Watchdog(sock, pid=lambda: weston_pid(pid_file), listeners=[heard.append],
                            interval=0.05)
    for _ in range(3):
        asyncio.run(dog.step())
    assert dog.kills == 0
    assert [(a.available, a.state) for a in heard] == [(False, Liveness.ABSENT)]
    assert "does not answer" in (dog.refusal(wait=0.0) or "")


def test_hung_without_a_weston_pid_kills_nothing(tmp_path: Path) -> None:
    pid_file = tmp_path / "weston.pid"
    pid_file.write_text(f"{os.getpid()}\n")
    killed: list[tuple[int, int]] = []
    with weston.headless(renderer="noop") as w:
        dog = watchdog.Watchdog(w.socket, pid=lambda: weston_pid(pid_file), interval=0.05,
                                budget=QUICK, kill=lambda pid, sig: killed.append((pid, sig)))
        _steps_until(dog, until=lambda: dog.available, what="available")
        w.process.send_signal(signal.SIGSTOP)
        try:
            _steps_until(dog, until=lambda: dog._killed, what="judged for a kill")
        finally:
            w.process.send_signal(signal.SIGCONT)
    assert killed == [] and dog.kills == 0


def test_bad_interval_is_refused() -> None:
    with pytest.raises(watchdog.WatchdogError, match="must be positive"):
        watchdog.Watchdog(Path("/nonexistent"), pid=lambda: None, interval=0)


def test_a_prepare_waits_for_the_first_verdict(tmp_path: Path) -> None:
    """An operator that just started has not probed yet: the prepare waits, not refuses."""
    with weston.headless(renderer="noop") as w:
        dog = watchdog.Watchdog(w.socket, pid=lambda: None, interval=0.05)

        async def main() -> str | None:
            asked = asyncio.create_task(asyncio.to_thread(dog.refusal, wait=30.0))
            await asyncio.sleep(0.2)
            await dog.step()
            return await asked

        assert asyncio.run(main()) is None


def test_restart_between_probes_is_heard_as_available_again(tmp_path: Path) -> None:
    """A crash and restart within one interval never probes unavailable; the new pid in the
    pid file tells the listeners (who recreate the claims' sockets) all the same."""
    pid_file = tmp_path / "weston.pid"
    heard: list[watchdog.Availability] = []
    with weston.headless(renderer="noop") as first, weston.headless(renderer="noop") as second:
        pid_file.write_text(f"{first.process.pid}\n")
        dog = watchdog.Watchdog(first.socket, pid=lambda: weston_pid(pid_file),
                                listeners=[heard.append], interval=0.05)
        _steps_until(dog, until=lambda: dog.available, what="available")
        asyncio.run(dog.step())
        assert len(heard) == 1
        pid_file.write_text(f"{second.process.pid}\n")
        asyncio.run(dog.step())
        asyncio.run(dog.step())
    assert [a.available for a in heard] == [True, True]
