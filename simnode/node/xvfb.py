"""The node's Xvfb: the simulated card's screens, one x11 output of weston per monitor."""

from __future__ import annotations

import os
import select
from pathlib import Path
from typing import Final

from libdisplay.processes import Process, start
from simnode.node.checkout import UpError

SCREEN: Final = "4096x2160x24"


class XvfbError(UpError):
    """Xvfb did not start; the message names its log."""


def start_xvfb(log_path: Path, *, timeout_s: float) -> tuple[Process, str]:
    """Xvfb on the first free display number (it reports it on a pipe); (process, ":N")."""
    read_fd, write_fd = os.pipe()
    try:
        xvfb = start(["Xvfb", "-displayfd", str(write_fd), "-screen", "0", SCREEN,
                      "-nolisten", "tcp", "-noreset"], log_path=log_path, pass_fds=(write_fd,))
    finally:
        os.close(write_fd)
    with os.fdopen(read_fd) as numbers:
        readable, _, _ = select.select([numbers], [], [], timeout_s)
        line = numbers.readline() if readable else ""
    if not line.strip().isdecimal():
        xvfb.stop()
        raise XvfbError(f"Xvfb did not report its display: see {log_path}")
    return xvfb, f":{int(line)}"
