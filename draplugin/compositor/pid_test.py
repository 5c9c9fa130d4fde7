"""compositor.pid: a pid is weston's only when /proc says so, in this pid namespace.

A stand-in weston is `sleep` exec'd through a symlink named `weston` (the kernel names a
process after the file it exec'd), so these tests need no compositor.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from draplugin.compositor.pid import WestonPidError, read_weston_pid, weston_pid

WAIT_S = 10.0


def _wait_for(check: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} within {WAIT_S:g} s")
        time.sleep(0.01)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@contextlib.contextmanager
def _process(argv: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    """A child that dies with this test (setpriv --pdeathsig), killed and reaped after it."""
    child = subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "--", *argv])
    try:
        yield child
    finally:
        child.kill()
        child.wait(timeout=WAIT_S)


@pytest.fixture
def fake_weston(tmp_path: Path) -> Path:
    sleep = shutil.which("sleep")
    assert sleep is not None
    link = tmp_path / "weston"
    link.symlink_to(sleep)
    return link


def test_a_live_weston_of_this_namespace_is_read(tmp_path: Path, fake_weston: Path) -> None:
    pid_file = tmp_path / "weston.pid"
    with _process([str(fake_weston), "60"]) as child:
        _wait_for(lambda: _comm(child.pid) == "weston", "exec'd as weston")
        pid_file.write_text(f"{child.pid}\n")
        assert read_weston_pid(pid_file) == child.pid
        assert weston_pid(pid_file) == child.pid


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (None, "cannot read the pid file"),
        ("not-a-pid\n", "not a pid"),
        ("1\n", "not a pid"),
        ("self", "not weston"),
        ("999999999\n", "is not running"),
    ],
    ids=["missing", "garbage", "init", "recycled-by-another-program", "gone"],
)
def test_what_is_not_a_live_weston_is_refused(tmp_path: Path, content: str | None,
                                              error: str) -> None:
    pid_file = tmp_path / "weston.pid"
    if content == "self":
        content = f"{os.getpid()}\n"
    if content is not None:
        pid_file.write_text(content)
    with pytest.raises(WestonPidError, match=error):
        read_weston_pid(pid_file)
    assert weston_pid(pid_file) is None


def test_a_weston_in_another_pid_namespace_is_refused(tmp_path: Path,
                                                      fake_weston: Path) -> None:
    """Its pid here is real and its comm is weston, but it lives in a namespace of its own."""
    with _process(["unshare", "--pid", "--fork", "--kill-child", str(fake_weston), "60"]) as un:
        def inner() -> int | None:
            children = Path(f"/proc/{un.pid}/task/{un.pid}/children")
            found = children.read_text().split() if children.exists() else []
            return int(found[0]) if found and _comm(int(found[0])) == "weston" else None

        _wait_for(lambda: inner() is not None, "the namespaced weston running")
        pid = inner()
        pid_file = tmp_path / "weston.pid"
        pid_file.write_text(f"{pid}\n")
        with pytest.raises(WestonPidError, match="in pid namespace pid:.*not this one"):
            read_weston_pid(pid_file)


def test_a_proc_of_another_namespace_is_refused(tmp_path: Path) -> None:
    """A /proc whose `self` is not this process: its pids would name other processes."""
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "self").symlink_to("4242")
    pid_file = tmp_path / "weston.pid"
    pid_file.write_text(f"{os.getpid()}\n")
    with pytest.raises(WestonPidError, match="not of this process's pid namespace"):
        read_weston_pid(pid_file, proc=proc)
