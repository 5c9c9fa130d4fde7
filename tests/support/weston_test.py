"""The compositor tests start is Debian trixie's weston 14.0.x, run from the trixie root.

`weston` on PATH is build-support/trixie/bin's dispatcher (./pants puts it there); a PATH
that reached bookworm's older weston, or any other, fails here rather than being tested
silently. The dispatcher must be exec-transparent, as westonctl and the watchdog rely on:
the pid the test spawned is weston itself (its comm, its executable, its signals, its
exit status).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from libdisplay.compositor.wayland import Liveness, list_outputs, probe
from libdisplay.processes import running
from tests.support import weston

WAIT_S = 30.0


def _trixie_root() -> Path:
    """The root the dispatchers run from, as build-support/trixie-root names it."""
    run = shutil.which("trixie-run")
    assert run is not None, "trixie-run is not on PATH (run the tests through ./pants)"
    script = Path(run).resolve().parent / "trixie-root"
    return Path(
        subprocess.run(
            [os.fspath(script)], check=True, capture_output=True, text=True, timeout=600
        ).stdout.strip()
    )


def _same_file(a: Path, b: Path) -> bool:
    sa, sb = os.stat(a), os.stat(b)
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def test_weston_on_path_is_the_trixie_dispatcher_and_reports_14_0() -> None:
    found = shutil.which("weston")
    assert found is not None
    assert Path(found).parent.name == "bin" and Path(found).parent.parent.name == "trixie", found
    assert weston.installed_version().startswith("14.0."), weston.installed_version()


def test_headless_compositor_logs_14_0_and_its_pid_is_weston_from_the_root() -> None:
    with weston.headless() as w:
        assert w.logged_version().startswith("14.0."), w.logged_version()
        pid = w.process.pid
        assert Path(f"/proc/{pid}/comm").read_text().strip() == "weston"
        # /proc/PID/exe resolves in weston's own mount namespace: the root's binary.
        assert _same_file(Path(f"/proc/{pid}/exe"), _trixie_root() / "usr" / "bin" / "weston")


def test_x11_compositor_logs_14_0_with_several_outputs() -> None:
    with weston.x11([(320, 240), (400, 300)]) as w:
        assert w.logged_version().startswith("14.0."), w.logged_version()
        outputs = {o.name: (o.mode.width, o.mode.height) for o in list_outputs(w.socket)}
    assert outputs == {"X1": (320, 240), "X2": (400, 300)}


def test_signals_reach_weston_and_its_exit_status_is_the_spawned_process() -> None:
    with tempfile.TemporaryDirectory(prefix="w14-") as runtime:
        socket = Path(runtime) / "wl-sig"
        argv = ["weston", "--backend=headless", "--renderer=noop", f"--socket={socket.name}"]
        env = {"PATH": os.environ.get("PATH", os.defpath), "XDG_RUNTIME_DIR": runtime}
        with running(
            argv,
            log_path=Path(runtime) / "weston.log",
            env=env,
            ready=lambda _p: probe(socket, timeout=1.0).state is Liveness.ANSWERING,
            ready_timeout=WAIT_S,
            what=f"{socket} answers",
        ) as process:
            process.send_signal(signal.SIGSTOP)
            try:
                assert probe(socket, timeout=0.5).state is Liveness.HUNG
            finally:
                process.send_signal(signal.SIGCONT)
            assert probe(socket, timeout=WAIT_S).state is Liveness.ANSWERING
            process.send_signal(signal.SIGKILL)
            assert process.wait(timeout=WAIT_S) == -signal.SIGKILL
        # A weston that refuses its options exits 1, and so does the spawned process.
        refused = subprocess.run(
            ["weston", "--no-such-option"],
            env=env,
            capture_output=True,
            timeout=WAIT_S,
            check=False,
        )
        assert refused.returncode == 1, refused.stderr


@pytest.mark.parametrize("client", ["wayland-info", "weston-simple-shm"])
def test_clients_on_path_come_from_the_root(client: str) -> None:
    found = shutil.which(client)
    assert found is not None and Path(found).resolve().name == "dispatch", found
