"""A test run killed with SIGKILL leaves no Xvfb, westonctl or weston behind.

A child interpreter plays the test run: through libdisplay.processes, as the tests do, it starts
Xvfb and westonctl (the built PEX) running weston 14 on it, prints their pids once weston
answers, and waits. It is then SIGKILLed, which runs no cleanup of any kind; every process it
started must be gone soon after (Xvfb and westonctl by their parent-death signal, weston by
westonctl's).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.binaries import pex_env, pex_path

GONE_WITHIN_S = 15.0
READY_WITHIN_S = 90.0

CHILD = r"""
import json, sys, tempfile
sys.path[:0] = json.loads(sys.argv[3])  # this test's own imports, whatever the sandbox
from pathlib import Path
from libdisplay.processes import running
from libdisplay.compositor.wayland import Liveness, probe
from tests.support.weston import xvfb, x11_outputs_ini

westonctl, work = sys.argv[1], Path(sys.argv[2])
with xvfb(log_dir=work) as x, tempfile.TemporaryDirectory(prefix="orph-") as runtime:
    config = work / "weston.ini"
    config.write_text(x11_outputs_ini([(640, 480)]))
    socket = Path(runtime) / "wayland-0"
    argv = [westonctl, "weston", f"--config={config}", f"--runtime-dir={runtime}",
            f"--restarts-dir={work / 'restarts'}", f"--pid-file={work / 'weston.pid'}",
            "--backend=x11-backend.so", "--", "--output-count=1", "--renderer=pixman"]
    env = {**__import__("os").environ, "DISPLAY": x.display}
    with running(argv, log_path=work / "westonctl.log", env=env, ready_timeout=60.0,
                 ready=lambda _: probe(socket, timeout=1.0).state is Liveness.ANSWERING,
                 what="weston answering") as ctl:
        weston = int((work / "weston.pid").read_text())
        print(json.dumps({"Xvfb": x.process.pid, "westonctl": ctl.pid, "weston": weston}),
              flush=True)
        sys.stdin.read()
"""


def _alive(pid: int) -> bool:
    """Whether `pid` is a process that still runs (a zombie has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_a_killed_test_run_leaves_no_process(pex_root: Path, tmp_path: Path) -> None:
    env = pex_env(pex_root)
    run = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(pex_path("westonctl")), str(tmp_path),
         json.dumps([os.path.abspath(p) for p in sys.path])],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True,
    )  # fmt: skip
    pids: dict[str, int] = {}
    try:
        assert run.stdout is not None
        line = run.stdout.readline()  # the child's own waits are bounded (READY_WITHIN_S)
        assert line, f"the child exited first ({run.wait(timeout=READY_WITHIN_S)})"
        pids = json.loads(line)
        assert all(_alive(pid) for pid in pids.values()), pids
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        deadline = time.monotonic() + GONE_WITHIN_S
        while time.monotonic() < deadline and any(_alive(p) for p in pids.values()):
            time.sleep(0.05)
        assert {name for name, pid in pids.items() if _alive(pid)} == set()
    finally:
        with contextlib.suppress(ProcessLookupError):
            run.kill()
        run.wait(timeout=30)
        for pid in pids.values():  # survivors of a failed run: never leave them behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
