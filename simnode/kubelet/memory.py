"""A container's memory as the runner measures it: the RSS of its process tree.

The kubelet's limit is a cgroup's, which counts page cache too; this node has no cgroup per
container, so the runner sums VmRSS over the main process and its descendants, which is the
part of that charge a runaway process makes.
"""

from __future__ import annotations

from pathlib import Path


def tree(pid: int, *, proc: Path = Path("/proc")) -> list[int]:
    """`pid` and its descendants, through each task's `children` list."""
    seen = []
    pending = [pid]
    while pending:
        current = pending.pop()
        seen.append(current)
        try:
            tasks = list((proc / str(current) / "task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                pending += [int(c) for c in (task / "children").read_text().split()]
            except (OSError, ValueError):
                continue
    return seen


def rss(pid: int, *, proc: Path = Path("/proc")) -> int:
    """One process's resident set, in bytes (0 once it is gone)."""
    try:
        for line in (proc / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def tree_rss(pid: int, *, proc: Path = Path("/proc")) -> int:
    return sum(rss(p, proc=proc) for p in tree(pid, proc=proc))


def start_time(pid: int, *, proc: Path = Path("/proc")) -> int | None:
    """The process's start time (clock ticks since boot), which tells a pid's reuse apart."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2:].split()[19])
