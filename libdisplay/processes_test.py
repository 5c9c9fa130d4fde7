from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest

from libdisplay.processes import (
    Process,
    ProcessError,
    ReadinessError,
    Stopped,
    running,
    start,
    unix_socket_accepts,
)
from tests.support import weston


def _state(pid: int) -> str | None:
    """The /proc state letter of `pid` (R, S, T, Z, ...), or None when no such process exists."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def _dies(pid: int, *, timeout: float = 10.0) -> bool:
    """True once `pid` is gone or a zombie; SIGKILL is delivered asynchronously, so poll briefly."""
    deadline = time.monotonic() + timeout
    while _state(pid) not in (None, "Z"):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def _assert_reaped(pid: int) -> None:
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # still our child (e.g. a zombie) would be reaped here instead
    assert _state(pid) is None


@pytest.mark.parametrize(
    ("script", "reason", "returncode"),
    [
        ("echo starting up; echo waiting for nothing; exec sleep 60", "not ready after 1 s", None),
        ("echo starting up; echo fatal: no backend >&2; exit 3", "exited before", 3),
    ],
    ids=["timeout", "exited-early"],
)
def test_readiness_failure_reports_log_tail_and_reaps(
    tmp_path: Path, script: str, reason: str, returncode: int | None
) -> None:
    started: list[Process] = []

    def ready(process: Process) -> bool:
        started.append(process)
        return process.log_contains("never printed")

    with (
        pytest.raises(ReadinessError) as failure,
        running(["sh", "-c", script], log_path=tmp_path / "log", ready=ready, ready_timeout=1.0),
    ):
        pytest.fail("readiness should have failed")

    message = str(failure.value)
    assert reason in message
    assert "starting up" in message
    assert "starting up" in failure.value.log_tail
    assert failure.value.returncode == returncode
    _assert_reaped(started[0].pid)


def test_stop_kills_what_the_child_left_behind(tmp_path: Path) -> None:
    # sh dies of SIGTERM but its background sleep would live on for a minute without the group kill.
    script = 'sleep 60 & echo "child $!"; wait'
    with running(
        ["sh", "-c", script],
        log_path=tmp_path / "log",
        ready=lambda p: p.log_contains("child "),
    ) as process:
        child = int(process.log_text().split("child ")[1].split()[0])
        assert _state(child) not in (None, "Z")  # alive while sh runs
    _assert_reaped(process.pid)
    assert _dies(child)


@pytest.mark.parametrize(
    ("script", "stop_it_first", "expected"),
    [
        ("echo ready; exec sleep 60", False, Stopped(-signal.SIGTERM, killed=False)),
        ("trap '' TERM; echo ready; exec sleep 60", False, Stopped(-signal.SIGKILL, killed=True)),
        ("echo ready; exec sleep 60", True, Stopped(-signal.SIGTERM, killed=False)),
    ],
    ids=["obeys-sigterm", "ignores-sigterm", "sigstopped"],
)
def test_stop_terms_then_kills_and_reaps(
    tmp_path: Path, script: str, stop_it_first: bool, expected: Stopped
) -> None:
    process = start(["sh", "-c", script], log_path=tmp_path / "log")
    try:
        process.wait_until(lambda: process.log_contains("ready"), timeout=30, what="ready line")
        if stop_it_first:
            process.send_signal(signal.SIGSTOP)
            process.wait_until(lambda: _state(process.pid) == "T", timeout=30, what="stopped")
        assert process.stop(grace=1.0) == expected
    finally:
        process.stop(grace=0.1)
    assert process.returncode == expected.returncode
    _assert_reaped(process.pid)


def test_wait_returns_status_of_a_process_that_exits_by_itself(tmp_path: Path) -> None:
    process = start(["sh", "-c", "exit 7"], log_path=tmp_path / "log")
    assert process.wait(timeout=30) == 7
    _assert_reaped(process.pid)


def test_wait_raises_while_the_process_runs(tmp_path: Path) -> None:
    with running(["sleep", "60"], log_path=tmp_path / "log") as process:
        before = time.monotonic()
        with pytest.raises(ProcessError, match=r"sleep \(pid \d+\) still running after 0.2 s"):
            process.wait(timeout=0.2)
        assert time.monotonic() - before < 10
    _assert_reaped(process.pid)


@pytest.mark.parametrize(
    ("state", "accepts"),
    [("listening", True), ("stale", False), ("absent", False)],
    ids=["listening", "stale-socket-file", "absent"],
)
def test_unix_socket_accepts(tmp_path: Path, state: str, accepts: bool) -> None:
    path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        if state != "absent":
            server.bind(os.fspath(path))
        if state == "listening":
            server.listen(1)
        assert unix_socket_accepts(path) is accepts


def test_weston_that_fails_to_start_reports_its_own_fatal_line() -> None:
    # The headless backend has exactly one output and rejects --output-count (weston 14).
    with pytest.raises(ReadinessError) as failure, weston.headless(args=["--output-count=3"]):
        pytest.fail("weston should not have become ready")
    assert "exited before" in str(failure.value)
    assert "fatal: unhandled option: --output-count=3" in failure.value.log_tail
    assert failure.value.returncode == 1
