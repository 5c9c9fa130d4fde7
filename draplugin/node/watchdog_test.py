"""watchdog: real headless weston, hung with SIGSTOP; pid-file checks with a recording killer."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from draplugin.compositor.pid import weston_pid
from draplugin.node import watchdog
from draplugin.node.runtime import NodeConfig
from libdisplay.compositor.wayland import Liveness
from tests.support import weston

PROBE_TIMEOUT = 0.5
MAX_STEPS = 40  # bounds every loop below; a healthy run needs a handful


def _dog(sock: Path, pid_file: Path, heard: list[watchdog.Availability], *,
         hung_limit: int = 3) -> watchdog.Watchdog:
    return watchdog.Watchdog(sock, listeners=[heard.append], pid=lambda: weston_pid(pid_file),
                             interval=0.05, timeout=PROBE_TIMEOUT, hung_limit=hung_limit,
                             miss_limit=2)


def _steps_until(dog: watchdog.Watchdog, *,
                 until: str) -> list[Liveness | None]:
    """Step until `until` ("killed" or "available") holds; the states seen, bounded."""

    async def main() -> list[Liveness | None]:
        seen = []
        for _ in range(MAX_STEPS):
            seen.append((await dog.step()).state)
            if (until == "killed" and dog.kills) or (until == "available" and dog.available):
                return seen
        raise AssertionError(f"not {until} after {MAX_STEPS} probes: {seen}")

    return asyncio.run(main())


@dataclass(frozen=True, slots=True)
class _Watched:
    compositor: weston.Weston
    dog: watchdog.Watchdog
    heard: list[watchdog.Availability]
    first: list[Liveness | None]  # the states probed until it was available


@contextlib.contextmanager
def _watched(tmp_path: Path) -> Iterator[_Watched]:
    """A headless weston named by the pid file, and a watchdog that has seen it answer."""
    pid_file = tmp_path / "weston.pid"
    heard: list[watchdog.Availability] = []
    with weston.headless(renderer="noop") as w:
        pid_file.write_text(f"{w.process.pid}\n")
        dog = _dog(w.socket, pid_file, heard)
        yield _Watched(w, dog, heard, _steps_until(dog, until="available"))


def test_hung_compositor_is_killed_after_three_probes(tmp_path: Path) -> None:
    with _watched(tmp_path) as watched:
        w = watched.compositor
        assert watched.first == [Liveness.ANSWERING]
        w.process.send_signal(signal.SIGSTOP)
        seen = _steps_until(watched.dog, until="killed")
        assert seen == [Liveness.HUNG] * 3
        assert w.process.wait(timeout=10) == -signal.SIGKILL
    assert [(a.available, a.state) for a in watched.heard] == [
        (True, Liveness.ANSWERING), (False, Liveness.HUNG)]


def test_hang_that_ends_in_time_recovers_without_kill(tmp_path: Path) -> None:
    with _watched(tmp_path) as watched:
        w, dog = watched.compositor, watched.dog
        w.process.send_signal(signal.SIGSTOP)
        assert [asyncio.run(dog.step()).state for _ in range(2)] == [Liveness.HUNG] * 2
        w.process.send_signal(signal.SIGCONT)
        _steps_until(dog, until="available")
        assert dog.kills == 0 and not w.process.exited()
    assert [a.available for a in watched.heard] == [True, False, True]


def test_one_missed_probe_is_not_an_outage(tmp_path: Path) -> None:
    """A compositor slow to answer once (a loaded node) is not tainted: no flap, no rewrite."""
    with _watched(tmp_path) as watched:
        w, dog = watched.compositor, watched.dog
        w.process.send_signal(signal.SIGSTOP)
        assert asyncio.run(dog.step()).state is Liveness.HUNG
        assert dog.available
        w.process.send_signal(signal.SIGCONT)
        assert asyncio.run(dog.step()).state is Liveness.ANSWERING
    assert [a.available for a in watched.heard] == [True]


def test_dead_compositor_is_unavailable_and_not_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "weston.pid"
    heard: list[watchdog.Availability] = []
    with weston.headless(renderer="noop") as w:
        pid_file.write_text(f"{w.process.pid}\n")
        sock = w.socket
        w.process.stop()
    dog = _dog(sock, pid_file, heard, hung_limit=1)
    for _ in range(3):
        asyncio.run(dog.step())
    assert dog.kills == 0
    assert [(a.available, a.state) for a in heard] == [(False, Liveness.ABSENT)]


def test_hung_without_a_weston_pid_kills_nothing(tmp_path: Path) -> None:
    pid_file = tmp_path / "weston.pid"
    pid_file.write_text(f"{os.getpid()}\n")
    killed: list[tuple[int, int]] = []
    heard: list[watchdog.Availability] = []
    with weston.headless(renderer="noop") as w:
        dog = watchdog.Watchdog(w.socket, listeners=[heard.append],
                                pid=lambda: weston_pid(pid_file), interval=0.05,
                                timeout=PROBE_TIMEOUT, hung_limit=1,
                                kill=lambda pid, sig: killed.append((pid, sig)))
        w.process.send_signal(signal.SIGSTOP)
        assert asyncio.run(dog.step()).state is Liveness.HUNG
    assert killed == [] and dog.kills == 0


@pytest.mark.parametrize(
    "kwargs",
    [{"interval": 0}, {"timeout": -1}, {"hung_limit": 0}],
    ids=["interval", "timeout", "hung-limit"],
)
def test_bad_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(watchdog.WatchdogError, match="must be"):
        watchdog.Watchdog(Path("/nonexistent"), pid=lambda: None,
                          **kwargs)  # type: ignore[arg-type]


def test_restart_between_probes_is_heard_as_available_again(tmp_path: Path) -> None:
    """A crash and restart within one interval never probes unavailable; the new pid in the
    pid file tells the listeners (who recreate the claims' sockets) all the same."""
    pid_file = tmp_path / "weston.pid"
    heard: list[watchdog.Availability] = []
    with weston.headless(renderer="noop") as first, weston.headless(renderer="noop") as second:
        pid_file.write_text(f"{first.process.pid}\n")
        dog = _dog(first.socket, pid_file, heard)
        _steps_until(dog, until="available")
        asyncio.run(dog.step())
        assert len(heard) == 1
        pid_file.write_text(f"{second.process.pid}\n")
        asyncio.run(dog.step())
        asyncio.run(dog.step())
    assert [a.available for a in heard] == [True, True]


def test_default_cadence_taints_within_2_s_and_kills_within_3_s() -> None:
    """The defaults are the budget's: a hang that begins just after an answer is seen one
    interval later, then tainted after `miss_limit` and killed after `hung_limit` probes."""
    config = NodeConfig(node="n")
    dog = watchdog.Watchdog(Path("/nonexistent"), pid=lambda: None,
                            interval=config.watchdog_interval, timeout=config.watchdog_timeout)
    worst_taint = dog._interval + dog._miss_limit * max(dog._interval, dog._timeout)
    worst_kill = dog._interval + dog._hung_limit * max(dog._interval, dog._timeout)
    assert worst_taint <= 2.0 and worst_kill <= 3.0, (worst_taint, worst_kill)
