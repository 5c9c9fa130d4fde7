"""hangs: a silence is charged only for the time the compositor could have answered, as a
simulated `/proc` view tells; the budget's lines are taint, kill and give-up."""

from __future__ import annotations

import pytest

from draplugin.node.hangs import DEFAULT_BUDGET, Budget, HangsError, Judgement, Silence
from libdisplay.procfs import ProcessStat

TICK = 0.5


def _silence(states: list[tuple[str, float]], *, pressure: float | None = 90.0,
             budget: Budget = DEFAULT_BUDGET) -> list[Judgement]:
    """The judgements of a silence that begins at 0, one tick per (state, CPU seconds used
    in that tick), after one answered tick that read the process at CPU 0."""
    silence = Silence(budget)
    silence.tick(0.0, silent_since=None, stat=ProcessStat("S", 0.0), pressure=pressure)
    cpu, found = 0.0, []
    for n, (state, used) in enumerate(states, start=1):
        cpu += used
        found.append(silence.tick(n * TICK, silent_since=0.0, stat=ProcessStat(state, cpu),
                                  pressure=pressure))
    return found


def _first(judgements: list[Judgement], what: str) -> float | None:
    """The seconds into the silence of the first judgement that is `what` (hung or kill)."""
    for n, judged in enumerate(judgements, start=1):
        if getattr(judged, what):
            return n * TICK
    return None


@pytest.mark.parametrize(("state", "used"), [("T", 0.0), ("R", 0.4), ("S", 0.0)],
                         ids=["stopped", "spinning", "deadlocked"])
def test_a_hang_is_tainted_then_killed_on_budget(state: str, used: float) -> None:
    judged = _silence([(state, used)] * 20)
    assert _first(judged, "hung") == 3.5 and _first(judged, "kill") == 7.5


@pytest.mark.parametrize(("state", "used"), [("R", 0.0), ("D", 0.0)],
                         ids=["starved", "in-the-kernel"])
def test_a_busy_compositor_is_not_charged_until_the_give_up_line(state: str, used: float
                                                                 ) -> None:
    judged = _silence([(state, used)] * 70)
    assert _first(judged, "hung") == 30.0 and _first(judged, "kill") == 30.0
    assert "starved" in judged[0].detail or "kernel" in judged[0].detail


def _threaded(ticks: list[tuple[str, float, float]]) -> list[Judgement]:
    """As `_silence`, each tick's (main thread's state, its CPU, its other threads' CPU)."""
    silence = Silence()
    silence.tick(0.0, silent_since=None, stat=ProcessStat("S", 0.0, 0.0), pressure=0.0)
    cpu = main = 0.0
    found = []
    for n, (state, own, workers) in enumerate(ticks, start=1):
        main += own
        cpu += own + workers
        found.append(silence.tick(n * TICK, silent_since=0.0,
                                  stat=ProcessStat(state, cpu, main), pressure=0.0))
    return found


def test_a_main_thread_waiting_on_its_working_threads_is_busy() -> None:
    """weston on Mesa's llvmpipe: its main thread asleep while the rasterizer's threads draw a
    frame (seen in the VM: 5 s silences, 0.7-1.2 s of CPU a 0.5 s tick) is not charged."""
    judged = _threaded([("S", 0.0, 0.6)] * 70)
    assert _first(judged, "hung") == 30.0 and _first(judged, "kill") == 30.0
    assert "other threads" in judged[0].detail


def test_a_main_loop_with_its_own_and_its_workers_cpu_is_busy() -> None:
    judged = _threaded([("R", 0.3, 0.2)] * 20)
    assert _first(judged, "hung") is None


@pytest.mark.parametrize(("state", "own", "workers"), [("S", 0.0, 0.01), ("R", 0.5, 0.0)],
                         ids=["deadlocked-workers-idle", "spinning-workers-idle"])
def test_a_hang_with_idle_workers_is_charged(state: str, own: float, workers: float) -> None:
    judged = _threaded([(state, own, workers)] * 20)
    assert _first(judged, "hung") == 3.5 and _first(judged, "kill") == 7.5


def test_a_runnable_process_without_cpu_on_an_idle_machine_is_not_starved() -> None:
    """Nobody waits for a CPU: nothing explains why it got none."""
    judged = _silence([("R", 0.0)] * 20, pressure=0.5)
    assert _first(judged, "hung") == 3.5


def test_without_a_pressure_record_the_process_state_decides() -> None:
    judged = _silence([("R", 0.0)] * 20, pressure=None)
    assert _first(judged, "hung") is None


def test_only_the_charged_part_of_a_silence_counts() -> None:
    """Starved for 3 s, then stopped: the hang is judged 3.5 s after it was stopped."""
    judged = _silence([("R", 0.0)] * 6 + [("T", 0.0)] * 20)
    assert _first(judged, "hung") == 3.0 + 3.5


def test_an_answer_ends_the_silence() -> None:
    silence = Silence()
    for n in range(6):
        assert not silence.tick(n * TICK, silent_since=0.0, stat=ProcessStat("T", 0.0),
                                pressure=None).hung
    silence.tick(3.0, silent_since=None, stat=ProcessStat("S", 0.0), pressure=None)
    judged = [silence.tick(3.0 + n * TICK, silent_since=3.0, stat=ProcessStat("T", 0.0),
                           pressure=None) for n in range(1, 8)]
    assert _first(judged, "hung") == 3.5


def test_without_a_view_of_the_process_the_silence_alone_decides() -> None:
    silence = Silence()
    judged = [silence.tick(n * TICK, silent_since=0.0, stat=None, pressure=None)
              for n in range(1, 20)]
    assert _first(judged, "hung") == 3.5 and _first(judged, "kill") == 7.5


@pytest.mark.parametrize("budget", [dict(taint_after=0), dict(taint_after=8.0),
                                    dict(kill_after=40.0)],
                         ids=["zero", "taint-after-kill", "kill-after-give-up"])
def test_a_budget_out_of_order_is_refused(budget: dict[str, float]) -> None:
    with pytest.raises(HangsError, match="the budget needs"):
        Budget(**budget)
