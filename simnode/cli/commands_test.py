"""`host_pid`: the pid `hang` signals is the named program's, in the host's pid namespace."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from simnode.cli.commands import host_pid


def _exec_done(pid: int, comm: str) -> None:
    """Until the forked child has exec'd `comm` (its comm is the parent's before that)."""
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}/comm").read_text().strip() != comm:
        assert time.monotonic() < deadline, f"pid {pid} never ran {comm}"
        time.sleep(0.02)


def test_a_pid_in_the_hosts_namespace_is_itself() -> None:
    with subprocess.Popen(["sleep", "60"]) as child:
        try:
            _exec_done(child.pid, "sleep")
            assert host_pid(child.pid, "sleep") == child.pid
        finally:
            child.kill()


def test_a_pid_of_another_program_is_refused() -> None:
    with pytest.raises(ValueError, match="no weston process has pid"):
        host_pid(os.getpid(), "weston")


@pytest.mark.skipif(os.getuid() != 0 or shutil.which("unshare") is None,
                    reason="a pid namespace needs root")
def test_a_pid_from_a_pods_namespace_is_found_on_the_host() -> None:
    # As under podman: the program is pid 1 of its own namespace, the pid file says 1.
    with subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "sleep", "60"]) as child:
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    found = host_pid(1, "sleep")
                    break
                except ValueError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            assert found != 1
            lines = Path(f"/proc/{found}/status").read_text().splitlines()
            nspid = next(line.split()[1:] for line in lines if line.startswith("NSpid:"))
            assert len(nspid) >= 2 and nspid[-1] == "1", nspid
        finally:
            child.kill()  # --kill-child: the namespace's sleep dies with unshare
