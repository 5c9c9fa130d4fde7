"""What `/proc` says of a process: the program it runs (`comm`), its pid namespace, its pid
in the innermost namespace it belongs to (`NSpid`), its scheduling state and CPU time (`stat`);
and how long runnable tasks wait for a CPU (`/proc/pressure/cpu`).

Every reader takes the `/proc` to read, so a caller can check it is its own (`self_pid`) and
tests can hand in a tree of their own. A process can exit between two reads: each function
raises OSError then (FileNotFoundError once its entry is gone), and `named` skips it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

PROC: Final = Path("/proc")
_CLOCK_TICKS: Final = os.sysconf("SC_CLK_TCK")

Pid = int | Literal["self"]


def comm(pid: Pid, *, proc: Path = PROC) -> str:
    """The name the kernel gives `pid`: the file it exec'd, cut to 15 bytes."""
    return (proc / str(pid) / "comm").read_text(encoding="utf-8").strip()


def pid_namespace(pid: Pid, *, proc: Path = PROC) -> str:
    """`pid`'s pid namespace, as the kernel names it (`pid:[4026531836]`)."""
    return os.readlink(proc / str(pid) / "ns" / "pid")


def self_pid(*, proc: Path = PROC) -> str:
    """What `proc/self` points at: this process's pid when `proc` is of its pid namespace."""
    return os.readlink(proc / "self")


def innermost_pid(pid: int, *, proc: Path = PROC) -> int:
    """`pid`'s pid in the innermost pid namespace it is in (the last of `NSpid`): its own pid
    when it shares `proc`'s namespace, else the one its pid file would hold."""
    for line in (proc / str(pid) / "status").read_text(encoding="utf-8").splitlines():
        if line.startswith("NSpid:"):
            return int(line.split()[-1])
    raise OSError(f"{proc / str(pid) / 'status'} has no NSpid line")


def named(name: str, *, proc: Path = PROC) -> Iterator[int]:
    """The pids in `proc` whose `comm` is `name` now; one that exits meanwhile is skipped."""
    for entry in proc.iterdir():
        if not entry.name.isdecimal():
            continue
        with contextlib.suppress(OSError):
            if comm(int(entry.name), proc=proc) == name:
                yield int(entry.name)


@dataclass(frozen=True, slots=True)
class ProcessStat:
    """A process's scheduling state (`R` running or runnable, `S` sleeping, `D` in the kernel,
    `T`/`t` stopped or traced, `Z` a zombie, ...), which is its main thread's, and the CPU
    seconds all its threads used so far; `main_cpu_s` the main thread's own share of them
    (None where `/proc` shows no threads)."""

    state: str
    cpu_s: float
    main_cpu_s: float | None = None


def stat(pid: Pid, *, proc: Path = PROC) -> ProcessStat:
    """`pid`'s state and CPU time (user + system) from `proc/PID/stat`, and its main thread's
    CPU time from `proc/PID/task/PID/stat`."""
    state, cpu_s = _stat_line(proc / str(pid) / "stat")
    main_cpu_s = None
    with contextlib.suppress(FileNotFoundError):
        main_cpu_s = _stat_line(proc / str(pid) / "task" / str(pid) / "stat")[1]
    return ProcessStat(state=state, cpu_s=cpu_s, main_cpu_s=main_cpu_s)


def _stat_line(path: Path) -> tuple[str, float]:
    text = path.read_text(encoding="utf-8")
    # comm, in parentheses, may hold spaces and parentheses: the fields follow the last ')'.
    fields = text[text.rindex(")") + 2:].split()
    try:
        return fields[0], (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    except (IndexError, ValueError) as err:
        raise OSError(f"{path} is not a stat line: {text!r}") from err


def cpu_pressure(*, proc: Path = PROC) -> float | None:
    """The share (percent, over the last 10 s) of time some runnable task waited for a CPU;
    None where the kernel keeps no pressure record (no PSI)."""
    try:
        text = (proc / "pressure" / "cpu").read_text(encoding="utf-8")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("some "):
            for part in line.split()[1:]:
                key, _, value = part.partition("=")
                if key == "avg10":
                    return float(value)
    return None
