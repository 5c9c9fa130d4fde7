"""The layout module as tests get it: compiled from westonctl/layout with its own build.sh
(as the weston image builds it; here it compiles in the trixie root against libweston 14),
and the weston.ini section that names its two sockets."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

# Tests depend on `westonctl/layout:src`, which puts the source in the Pants sandbox.
BUILD_SH = Path(__file__).resolve().parents[2] / "westonctl" / "layout" / "build.sh"
BUILD_TIMEOUT_S = 300.0


def build_layout(out_dir: Path, *, asan: bool = False) -> Path:
    """Compile the module into `out_dir`; returns the path of the .so.

    Its name ends in `-shell.so`, which `--shell=` needs: weston appends that suffix to a
    shell name without it.
    """
    out = out_dir / ("layout-asan-shell.so" if asan else "layout-shell.so")
    extra = ["--asan"] if asan else []
    subprocess.run(
        ["sh", os.fspath(BUILD_SH), os.fspath(out), *extra], check=True, timeout=BUILD_TIMEOUT_S
    )
    return out


def layout_ini(sockets: Path) -> str:
    """A weston.ini `[layout]` section with the control and capture sockets in `sockets`."""
    return (
        f"\n[layout]\ncontrol-socket={sockets / 'control.sock'}\n"
        f"capture-socket={sockets / 'capture.sock'}\n"
    )
