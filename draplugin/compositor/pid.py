"""weston's pid, read from the pid file westonctl writes, and checked before anyone signals it.

The pod shares one process namespace, so the operator signals weston by the pid in
`/etc/weston/weston.pid`. A pid file can outlive its process and the kernel reuses pids, so a
bare number is not enough to send SIGTERM or SIGKILL to: this reader checks, through `/proc`,
that

- the `/proc` it reads is of this process's own pid namespace (`/proc/self` is our pid), so a
  pid it finds there means the same process to `kill()`;
- the process named is in that same pid namespace (`/proc/PID/ns/pid` is ours), so a pid
  written by a westonctl in another namespace cannot name a stranger here;
- its `comm` is `weston`: a pid the kernel recycled for another program is refused.

While westonctl's child is still exec'ing its way to weston (setpriv, the test root's
wrapper), `comm` is not yet weston and the pid is refused too: that weston has not read its
config yet, so for every caller it is as good as not running.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from libdisplay import procfs

PID_FILE: Final = Path("/etc/weston/weston.pid")
PROC: Final = procfs.PROC
COMPOSITOR_COMM: Final = "weston"


class WestonPidError(Exception):
    """No weston to signal: the message names the pid file, the pid and why."""


def read_weston_pid(pid_file: Path = PID_FILE, *, proc: Path = PROC) -> int:
    """The pid in `pid_file`, checked to be a live weston of this pid namespace."""
    try:
        text = pid_file.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as err:
        raise WestonPidError(f"cannot read the pid file {pid_file}: {err}") from err
    if not text.isdecimal() or int(text) <= 1:
        raise WestonPidError(f"pid file {pid_file} holds {text!r}, not a pid")
    pid = int(text)
    _check_own_namespace(proc)
    try:
        comm = procfs.comm(pid, proc=proc)
        namespace = procfs.pid_namespace(pid, proc=proc)
    except FileNotFoundError as err:
        raise WestonPidError(f"pid {pid} from {pid_file} is not running") from err
    except OSError as err:
        raise WestonPidError(f"pid {pid} from {pid_file} cannot be checked: {err}") from err
    if comm != COMPOSITOR_COMM:
        raise WestonPidError(f"pid {pid} from {pid_file} is {comm!r}, not weston")
    ours = procfs.pid_namespace("self", proc=proc)
    if namespace != ours:
        raise WestonPidError(
            f"pid {pid} from {pid_file} is in pid namespace {namespace}, not this one ({ours})")
    return pid


def weston_pid(pid_file: Path = PID_FILE, *, proc: Path = PROC) -> int | None:
    """`read_weston_pid`, or None when there is no weston to signal."""
    try:
        return read_weston_pid(pid_file, proc=proc)
    except WestonPidError:
        return None


def _check_own_namespace(proc: Path) -> None:
    try:
        self_pid = procfs.self_pid(proc=proc)
    except OSError as err:
        raise WestonPidError(f"{proc} has no entry for this process: {err}") from err
    if self_pid != str(os.getpid()):
        raise WestonPidError(
            f"{proc} is not of this process's pid namespace: its self is {self_pid}, "
            f"this process is {os.getpid()}")
