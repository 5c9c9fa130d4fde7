"""westonctl, the built PEX, supervising real weston 14 (headless backend, pixman).

Each test runs its own westonctl with its own runtime dir, config and restart-order dir,
waits on readiness (the pid file and an answering socket), and always stops and reaps
what it started (libdisplay.processes).
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from libdisplay.compositor.renderer import RendererState, read_renderer_state
from libdisplay.compositor.wayland import Liveness, probe
from libdisplay.compositor.weston import order_restart
from libdisplay.processes import Process, running, start
from tests.binaries import pex_env, pex_path

READY_S = 60.0


@dataclass(frozen=True)
class Node:
    """The files one westonctl works with, as the pod's /etc/weston and hostPath."""

    etc: Path
    runtime: Path

    @property
    def config(self) -> Path:
        return self.etc / "weston.ini"

    @property
    def restarts(self) -> Path:
        return self.etc / "restarts"

    @property
    def pid_file(self) -> Path:
        return self.etc / "weston.pid"

    @property
    def socket(self) -> Path:
        return self.runtime / "wayland-0"

    def weston_pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text())
        except (FileNotFoundError, ValueError):
            return None

    @property
    def renderer_file(self) -> Path:
        return self.etc / "renderer"

    def argv(self, *, config_wait: float = 30.0, stop_grace: float = 4.0) -> list[str]:
        return [
            str(pex_path("westonctl")),
            "weston",
            f"--config={self.config}",
            f"--config-wait={config_wait}",
            f"--runtime-dir={self.runtime}",
            f"--restarts-dir={self.restarts}",
            f"--pid-file={self.pid_file}",
            "--backend=headless",
            f"--stop-grace={stop_grace}",
            "--",
            "--renderer=pixman",
        ]


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    # AF_UNIX paths are short; pytest's tmp_path can be too long for them.
    with tempfile.TemporaryDirectory(prefix="wctl-") as runtime:
        etc = tmp_path / "etc"
        etc.mkdir()
        (etc / "weston.ini").write_text("[core]\nrequire-outputs=none\n")
        yield Node(etc=etc, runtime=Path(runtime))


def _answering(node: Node) -> bool:
    return probe(node.socket, timeout=1.0).state is Liveness.ANSWERING


def _serving(node: Node, process: Process, *, not_pid: int | None = None) -> None:
    """Wait until a weston (other than `not_pid`) has written its pid and answers."""

    def ready() -> bool:
        pid = node.weston_pid()
        return pid is not None and pid != not_pid and _answering(node)

    process.wait_until(ready, timeout=READY_S, what="weston answering on its socket")


def _westonctl(node: Node, pex_root: Path, tmp_path: Path, **kw: float) -> Iterator[Process]:
    with running(
        node.argv(**kw), log_path=tmp_path / "westonctl.log", env=pex_env(pex_root)
    ) as process:
        yield process


@pytest.fixture
def westonctl(node: Node, pex_root: Path, tmp_path: Path) -> Iterator[Process]:
    yield from _westonctl(node, pex_root, tmp_path)


def test_ordered_restart_starts_a_new_weston_at_once_and_consumes_the_order(
    node: Node, westonctl: Process
) -> None:
    _serving(node, westonctl)
    old = node.weston_pid()
    assert old is not None
    order_restart(old, reason="claim asked for 1280x720", directory=node.restarts)
    os.kill(old, signal.SIGTERM)

    _serving(node, westonctl, not_pid=old)
    assert not westonctl.exited()
    assert not (node.restarts / str(old)).exists()
    assert westonctl.log_contains(f"weston pid {old} exited with status 0 on order")


def _kill_weston(node: Node, westonctl: Process) -> tuple[int, int]:
    """SIGKILL the weston `westonctl` serves, unordered: (weston's pid, westonctl's exit code);
    westonctl is stopped whatever happens."""
    try:
        _serving(node, westonctl)
        pid = node.weston_pid()
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        return pid, westonctl.wait(timeout=READY_S)
    finally:
        westonctl.stop()


def test_unordered_crash_ends_westonctl_non_zero_and_stale_socket_does_not_block_next_start(
    node: Node, pex_root: Path, tmp_path: Path
) -> None:
    first = start(node.argv(), log_path=tmp_path / "first.log", env=pex_env(pex_root))
    pid, code = _kill_weston(node, first)
    assert code == 128 + signal.SIGKILL
    assert first.log_contains("killed by SIGKILL with no restart order")
    # A killed weston leaves its socket and lock behind: the socket is refused, not absent.
    assert probe(node.socket, timeout=1.0).state is Liveness.DEAD

    with running(node.argv(), log_path=tmp_path / "second.log", env=pex_env(pex_root)) as second:
        _serving(node, second, not_pid=pid)


def _gl_argv(node: Node) -> list[str]:
    """westonctl asked for the GL renderer (node.argv names pixman to weston directly)."""
    argv = node.argv()
    return [*argv[:argv.index("--")], "--renderer=gl"]


def test_weston_runs_the_gl_renderer_it_was_asked_for_where_mesa_can(
    node: Node, pex_root: Path, tmp_path: Path
) -> None:
    with running(_gl_argv(node), log_path=tmp_path / "westonctl.log",
                 env=pex_env(pex_root)) as process:
        _serving(node, process)
        assert read_renderer_state(node.renderer_file) == RendererState("gl", "gl", 0)
        assert process.log_contains("--renderer=gl")
        assert not process.log_contains("starting it with pixman")


def test_a_gl_weston_that_crashes_after_its_start_is_not_taken_for_a_missing_driver(
    node: Node, pex_root: Path, tmp_path: Path
) -> None:
    process = start(_gl_argv(node), log_path=tmp_path / "westonctl.log", env=pex_env(pex_root))
    _, code = _kill_weston(node, process)
    assert code == 128 + signal.SIGKILL
    assert not process.log_contains("starting it with pixman")


def test_a_weston_whose_gl_renderer_cannot_start_is_started_again_with_pixman_and_says_so(
    node: Node, pex_root: Path, tmp_path: Path
) -> None:
    # glvnd finds no EGL vendor: weston's GL renderer fails as on a card with no GL driver.
    env = {**pex_env(pex_root), "__EGL_VENDOR_LIBRARY_FILENAMES": "/nonexistent/egl.json"}
    with running(_gl_argv(node), log_path=tmp_path / "westonctl.log", env=env) as process:
        _serving(node, process)
        assert read_renderer_state(node.renderer_file) == RendererState("gl", "pixman", 1)
        assert process.log_contains("fatal: failed to create compositor backend")
        warnings = [line for line in process.log_text().splitlines()
                    if "starting it with pixman" in line]
        assert len(warnings) == 1
        assert "apply deploy/overlays/pixman-renderer" in warnings[0]
        assert process.log_contains("--renderer=pixman")


def test_missing_config_fails_clearly_after_the_wait(
    node: Node, pex_root: Path, tmp_path: Path
) -> None:
    node.config.unlink()
    process = start(
        node.argv(config_wait=1.0), log_path=tmp_path / "westonctl.log", env=pex_env(pex_root)
    )
    try:
        code = process.wait(timeout=READY_S)
    finally:
        process.stop()
    assert code != 0
    assert process.log_contains(f"{node.config} did not appear within 1 s")
    assert not node.socket.exists()


def test_config_arriving_late_starts_weston(node: Node, pex_root: Path, tmp_path: Path) -> None:
    text = node.config.read_text()
    node.config.unlink()
    with running(
        node.argv(config_wait=60.0), log_path=tmp_path / "westonctl.log", env=pex_env(pex_root)
    ) as process:
        process.wait_until(
            lambda: process.log_contains(f"waiting up to 60 s for {node.config}"),
            timeout=READY_S,
            what="westonctl waiting for its config",
        )
        assert node.weston_pid() is None
        node.config.write_text(text)
        _serving(node, process)


@pytest.mark.parametrize("stopped", [False, True], ids=["running-weston", "stopped-weston"])
def test_sigterm_stops_weston_and_exits_inside_the_pod_grace(
    node: Node, pex_root: Path, tmp_path: Path, stopped: bool
) -> None:
    process = start(
        node.argv(stop_grace=1.0), log_path=tmp_path / "westonctl.log", env=pex_env(pex_root)
    )
    try:
        _serving(node, process)
        pid = node.weston_pid()
        assert pid is not None
        if stopped:
            # A stopped process takes no SIGTERM: the supervisor must escalate to SIGKILL.
            os.kill(pid, signal.SIGSTOP)
        began = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30.0)
        took = time.monotonic() - began
    finally:
        process.stop()
    assert code == 0, process.log_tail()
    assert not Path(f"/proc/{pid}").exists()
    # The pod's terminationGracePeriodSeconds is 5: the contract, not a speed figure.
    assert took < 5.0, f"took {took:.2f} s"
    assert process.log_contains("SIGKILL") is stopped


def test_orders_for_other_pids_are_removed_at_start(node: Node, westonctl: Process) -> None:
    node.restarts.mkdir()
    order_restart(999_999_9, reason="left by an earlier pod", directory=node.restarts)
    _serving(node, westonctl)
    westonctl.wait_until(
        lambda: not (node.restarts / "9999999").exists(), timeout=10.0, what="stale order removed"
    )


def _zombie_children(pid: int) -> list[int]:
    zombies = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] == "Z" and int(fields[1]) == pid:
            zombies.append(int(entry.name))
    return zombies


def test_helpers_of_an_ordered_restart_leave_no_zombies(node: Node, westonctl: Process) -> None:
    _serving(node, westonctl)
    for _ in range(2):
        old = node.weston_pid()
        assert old is not None
        order_restart(old, reason="test", directory=node.restarts)
        os.kill(old, signal.SIGKILL)
        _serving(node, westonctl, not_pid=old)
    westonctl.wait_until(
        lambda: not _zombie_children(westonctl.pid), timeout=10.0, what="no zombie children"
    )
