"""supervisor: the first failure stops serving once, and a stuck stop still ends the process."""

from __future__ import annotations

import threading

from draplugin.supervisor import EXIT_CODE, Supervisor


def test_a_failure_stops_serving_once() -> None:
    stopped = threading.Event()
    calls: list[int] = []

    def stop() -> None:
        calls.append(1)
        stopped.set()

    supervisor = Supervisor(deadline=30, exit_now=lambda _code: None)
    supervisor.attach(stop)
    supervisor.fail("the publisher", RuntimeError("403 forbidden"))
    supervisor.fail("the publisher", RuntimeError("again"))
    assert stopped.wait(5)
    assert calls == [1] and str(supervisor.failure) == "403 forbidden"


def test_a_failure_before_attach_stops_at_attach() -> None:
    stopped = threading.Event()
    supervisor = Supervisor(deadline=30, exit_now=lambda _code: None)
    supervisor.fail("the publisher", RuntimeError("boom"))
    supervisor.attach(lambda: stopped.set())
    assert stopped.wait(5)


def test_a_stop_that_hangs_ends_the_process_at_the_deadline() -> None:
    exited: list[int] = []
    done = threading.Event()

    def exit_now(code: int) -> None:
        exited.append(code)
        done.set()

    supervisor = Supervisor(deadline=0.2, exit_now=exit_now)
    never = threading.Event()
    supervisor.attach(lambda: None if never.wait() else None)  # never returns
    supervisor.fail("the publisher", RuntimeError("stuck"))
    assert done.wait(5) and exited == [EXIT_CODE]
