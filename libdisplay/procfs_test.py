"""procfs: a process's comm, pid namespace and innermost pid, from the real /proc and from a
tree standing for one (a pid namespace of its own needs no root that way)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from libdisplay import procfs

WAIT_S = 30.0


@pytest.fixture
def sleeper() -> Iterator[int]:
    """A `sleep` child, exec'd (a fork carries its parent's comm until then); killed, reaped."""
    child = subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "--", "sleep", "60"])
    try:
        deadline = time.monotonic() + WAIT_S
        while procfs.comm(child.pid) != "sleep":
            assert time.monotonic() < deadline, f"pid {child.pid} never ran sleep"
            time.sleep(0.02)
        yield child.pid
    finally:
        child.kill()
        child.wait(timeout=WAIT_S)


def test_a_live_process_is_read(sleeper: int) -> None:
    assert procfs.comm(sleeper) == "sleep"
    assert procfs.pid_namespace(sleeper) == procfs.pid_namespace("self")
    assert procfs.pid_namespace("self").startswith("pid:[")
    assert procfs.innermost_pid(sleeper) == sleeper
    assert sleeper in set(procfs.named("sleep"))
    assert procfs.self_pid() == str(os.getpid())


def test_a_gone_pid_raises_file_not_found() -> None:
    with pytest.raises(FileNotFoundError):
        procfs.comm(999999999)
    with pytest.raises(FileNotFoundError):
        procfs.innermost_pid(999999999)


def _fake_process(proc: Path, pid: int, *, comm: str | None, nspid: str | None) -> None:
    entry = proc / str(pid)
    entry.mkdir(parents=True)
    if comm is not None:
        (entry / "comm").write_text(f"{comm}\n")
    status = "Name:\tx\n" + (f"NSpid:\t{nspid}\n" if nspid is not None else "")
    (entry / "status").write_text(status)


def test_the_innermost_pid_is_the_last_of_nspid(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    _fake_process(proc, 4242, comm="weston", nspid="4242\t7\t1")
    _fake_process(proc, 4243, comm="weston", nspid=None)
    assert procfs.innermost_pid(4242, proc=proc) == 1
    with pytest.raises(OSError, match="no NSpid line"):
        procfs.innermost_pid(4243, proc=proc)


def test_named_skips_what_is_not_a_process_or_has_exited(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    _fake_process(proc, 10, comm="weston", nspid="10")
    _fake_process(proc, 11, comm="sleep", nspid="11")
    _fake_process(proc, 12, comm=None, nspid="12")  # exited between listing and reading
    (proc / "self").symlink_to("10")
    (proc / "sys").mkdir()
    assert list(procfs.named("weston", proc=proc)) == [10]


def test_stat_reads_state_and_cpu_time_past_a_comm_with_parentheses(tmp_path: Path) -> None:
    ticks = os.sysconf("SC_CLK_TCK")
    (tmp_path / "42").mkdir()
    rest = " ".join(["1"] * 10 + [str(3 * ticks), str(ticks)] + ["0"] * 30)
    (tmp_path / "42" / "stat").write_text(f"42 (we) ird) T {rest}\n")
    assert procfs.stat(42, proc=tmp_path) == procfs.ProcessStat(state="T", cpu_s=4.0)


def test_stat_of_a_sleeping_child_from_the_real_proc(sleeper: int) -> None:
    # Just after its exec, `sleep` may still be runnable (R) on a loaded machine; it is asleep
    # once it reaches its nanosleep. A misread field never shows S.
    deadline = time.monotonic() + WAIT_S
    found = procfs.stat(sleeper)
    while found.state != "S":
        assert time.monotonic() < deadline, f"pid {sleeper} never read as asleep: {found}"
        time.sleep(0.02)
        found = procfs.stat(sleeper)
    assert found.cpu_s >= 0


def test_the_main_threads_cpu_time_is_read_apart_from_its_workers() -> None:
    """A main thread waiting on a worker that burns CPU: the process's time grows, the main
    thread's does not (its `task/PID/stat`)."""
    script = ("import threading, time\n"
              "def burn():\n"
              "    end = time.monotonic() + 60\n"
              "    while time.monotonic() < end: pass\n"
              "t = threading.Thread(target=burn); t.start(); print('burning', flush=True)\n"
              "t.join()\n")
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "burning\n"
        first = procfs.stat(child.pid)
        deadline = time.monotonic() + WAIT_S
        found = procfs.stat(child.pid)
        while found.cpu_s - first.cpu_s < 0.3:
            assert time.monotonic() < deadline, f"the worker never used CPU: {found}"
            time.sleep(0.05)
            found = procfs.stat(child.pid)
        assert found.main_cpu_s is not None and first.main_cpu_s is not None
        assert found.main_cpu_s - first.main_cpu_s < 0.1, (first, found)
    finally:
        child.kill()
        child.wait(timeout=WAIT_S)
        assert child.stdout is not None
        child.stdout.close()


def test_a_truncated_stat_is_an_oserror(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "stat").write_text("7 (weston) R 1\n")
    with pytest.raises(OSError, match="not a stat line"):
        procfs.stat(7, proc=tmp_path)


def test_cpu_pressure_is_some_avg10_or_none_without_psi(tmp_path: Path) -> None:
    assert procfs.cpu_pressure(proc=tmp_path) is None
    (tmp_path / "pressure").mkdir()
    (tmp_path / "pressure" / "cpu").write_text(
        "some avg10=96.81 avg60=93.98 avg300=72.76 total=412319999\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    assert procfs.cpu_pressure(proc=tmp_path) == 96.81
