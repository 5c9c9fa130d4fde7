"""A card with no monitor: the weston.ini declare writes starts weston 14, which stays up.

declare (the built PEX) writes the pod's config for a card whose only connector is empty; weston
14 runs it exactly as written (the layout module as its shell) with no output at all, under
westonctl as the weston container runs it. The compositor must answer its socket and keep
running: a node with no monitor shows the container Running with no restarts.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

from libdisplay.compositor.wayland import Liveness, list_outputs, probe
from libdisplay.compositor.weston import WestonIni
from libdisplay.processes import running
from libdisplay.sim.sysfs import SimCard, SimConnector, write_tree
from tests.binaries import pex_env, pex_path
from tests.support.layout_build import build_layout
from tests.support.weston import logged_version

STAYS_UP_S = 2.0


def test_weston_14_runs_declares_config_with_no_output(pex_root: Path, tmp_path: Path) -> None:
    (tmp_path / "layout").mkdir()
    layout_shell = build_layout(tmp_path / "layout")
    root = tmp_path / "node"
    empty = SimConnector(type="HDMI-A", index=1, status="disconnected")
    write_tree(root, SimCard(connectors=(empty,)))
    config = tmp_path / "etc" / "weston.ini"
    declared = subprocess.run(
        [str(pex_path("declare")), "declare", f"--sysfs-root={root / 'sys'}",
         f"--dev-root={root / 'dev'}", f"--config={config}", f"--shell={layout_shell}"],
        env=pex_env(pex_root), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert declared.returncode == 0, declared.stderr
    core = WestonIni.parse(config.read_text()).core
    assert (core.require_outputs, core.require_input) == ("none", False)

    with tempfile.TemporaryDirectory(prefix="nm-") as runtime:
        socket = Path(runtime) / "wayland-0"
        argv = [
            str(pex_path("westonctl")), "weston", f"--config={config}", f"--runtime-dir={runtime}",
            f"--restarts-dir={tmp_path / 'etc' / 'restarts'}",
            f"--pid-file={tmp_path / 'etc' / 'weston.pid'}",
            "--backend=headless-backend.so", "--", "--no-outputs", "--renderer=pixman",
        ]  # fmt: skip
        log = tmp_path / "westonctl.log"
        with running(
            argv, log_path=log, env=pex_env(pex_root),
            ready=lambda _: probe(socket, timeout=1.0).state is Liveness.ANSWERING,
            ready_timeout=60.0, what="weston answering with no output",
        ) as process:  # fmt: skip
            assert list_outputs(socket, timeout=10.0) == ()
            deadline = time.monotonic() + STAYS_UP_S
            while time.monotonic() < deadline:
                assert not process.exited(), log.read_text()
                time.sleep(0.1)
            # Returns at the answer; a loaded machine's weston may take seconds to give it.
            assert probe(socket, timeout=30.0).state is Liveness.ANSWERING
        assert logged_version(log.read_text()).startswith("14.0.")
