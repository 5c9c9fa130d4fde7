"""procfs: a process's comm, pid namespace and innermost pid, from the real /proc and from a
tree standing for one (a pid namespace of its own needs no root that way)."""

from __future__ import annotations

import os
import subprocess
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
