"""modes: weston.ini derived from the checkpoint's claims over the Displays; ordered restarts.

A stand-in weston (`sleep` exec'd through a symlink named `weston`) takes the SIGTERM a
restart sends, so the order and the signal are checked without a compositor.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from draplugin import modes
from draplugin.checkpoint import EMPTY, Checkpoint, ClaimEntry, State
from draplugin.kube import KubeError
from draplugin.settings import KubeAccess, Settings
from libdisplay.display import display_name
from libdisplay.edid_build import EdidParams, build_edid
from libdisplay.kubeerrors import ApiCallError
from libdisplay.modes import Mode
from libdisplay.sysfs_tree import SimCard, SimConnector, dev_root, sysfs_root, write_tree
from libdisplay.weston import read_restart_order

NODE = "n1"
HDMI = "card0-hdmi-a-1"
WAIT_S = 10.0


class FakeDisplays:
    """Display specs in a dict; the `Kube` calls modes makes. Writing one is a test failure."""

    def __init__(self, specs: dict[str, dict[str, Any]]) -> None:
        self.specs = specs
        self.unreachable = False

    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    def get_display_spec(self, name: str) -> dict[str, Any] | None:
        if self.unreachable:
            raise KubeError(ApiCallError(f"GET Display {name}", "connection refused",
                                         retryable=True))
        spec = self.specs.get(name)
        return None if spec is None else dict(spec)

    def patch_display_spec(self, name: str, patch: Mapping[str, object]) -> None:
        raise AssertionError(f"a Display's spec is a person's: patched {name} with {patch}")


def settings(root: Path, *, restart_timeout_s: float = 1.0) -> Settings:
    edid = build_edid(EdidParams(name="M", serial_number=1, preferred=Mode(1920, 1080, 60000),
                                 detailed=(Mode(1280, 720, 60000), Mode(1024, 768, 60000))))
    write_tree(root, SimCard(connectors=(
        SimConnector(type="HDMI-A", index=1, edid=edid,
                     modes=("1920x1080", "1280x720", "1024x768")),)))
    etc = root / "etc"
    return Settings(
        node_name=NODE, plugin_dir=root / "plugin", registry_dir=root / "reg",
        cdi_dir=root / "cdi", weston_ini=etc / "weston.ini",
        restarts_dir=etc / "restarts", pid_file=etc / "weston.pid", socket_dir=root / "run",
        container_socket_dir=root / "run", socket_name="wayland-0",
        sysfs_root=sysfs_root(root), dev_root=dev_root(root), aliases={},
        restart_timeout_s=restart_timeout_s, kube=KubeAccess(),
    )


def holding(mode: str, *, state: State = "prepared", uid: str = "u-1",
            **fields: object) -> Checkpoint:
    entry = ClaimEntry(uid=uid, name="kiosk", namespace="default", state=state, devices=(),
                       config={HDMI: {"mode": mode, **fields}})
    return Checkpoint(claims={uid: entry})


def _ini_mode(s: Settings) -> str:
    (line,) = (ln for ln in s.weston_ini.read_text().splitlines() if ln.startswith("mode="))
    return line.removeprefix("mode=")


def test_a_holding_claim_wins_over_the_display_which_wins_over_preferred(tmp_path: Path) -> None:
    s = settings(tmp_path)
    name = display_name(NODE, HDMI)
    kube = FakeDisplays({})
    assert modes.apply(s, kube, EMPTY, reason="t")
    assert _ini_mode(s) == "1920x1080@60"
    # What declare writes too: the layout shell, its sockets beside weston.ini.
    first = s.weston_ini.read_text()
    assert "shell=layout-shell.so" in first
    assert f"claims-dir={s.socket_dir / 'claims'}\n" in first
    assert f"control-socket={s.weston_ini.parent / 'layout.sock'}" in first
    assert not modes.apply(s, kube, EMPTY, reason="t")

    kube.specs[name] = {"mode": "1280x720@60", "transform": "rotate-180"}
    assert modes.apply(s, kube, EMPTY, reason="t")
    assert _ini_mode(s) == "1280x720@60"

    for state in ("started", "prepared"):
        assert modes.apply(s, kube, holding("1024x768@60", state=state), reason="t") == (
            state == "started")
        assert _ini_mode(s) == "1024x768@60"
        assert "transform=rotate-180" in s.weston_ini.read_text()
    # A claim being released no longer holds its output: the Display's mode is back.
    assert modes.apply(s, kube, holding("1024x768@60", state="unpreparing"), reason="t")
    assert _ini_mode(s) == "1280x720@60"
    # A claim's "preferred" overrides the Display's mode; its transform overrides too.
    assert modes.apply(s, kube, holding("preferred", transform="rotate-90"), reason="t")
    assert _ini_mode(s) == "1920x1080@60"
    assert "transform=rotate-90" in s.weston_ini.read_text()


def test_a_checkpointed_config_that_no_longer_validates_keeps_its_valid_fields(
        tmp_path: Path) -> None:
    s = settings(tmp_path)
    assert modes.apply(s, FakeDisplays({}), holding("1024x768@60", scale=9), reason="t")
    assert _ini_mode(s) == "1024x768@60"
    assert "scale=" not in s.weston_ini.read_text()


def test_an_unreadable_display_fails_the_derivation_and_writes_nothing(tmp_path: Path) -> None:
    s = settings(tmp_path)
    kube = FakeDisplays({display_name(NODE, HDMI): {"mode": "1280x720@60"}})
    assert modes.apply(s, kube, EMPTY, reason="t")
    before = s.weston_ini.read_text()
    kube.unreachable = True
    # Not a guess at preferred modes: a blip of the API must not reset every screen.
    with pytest.raises(modes.DisplayReadError, match="cannot read Display n1.card0-hdmi-a-1"):
        modes.apply(s, kube, EMPTY, reason="t")
    assert s.weston_ini.read_text() == before


def test_restart_without_a_running_weston_orders_nothing(tmp_path: Path) -> None:
    s = settings(tmp_path)
    s.pid_file.parent.mkdir(parents=True)
    s.pid_file.write_text("999999999\n")  # beyond pid_max: no such process
    modes.restart_compositor(s, reason="test")
    assert not s.restarts_dir.exists()


@contextlib.contextmanager
def stand_in_weston(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    sleep = shutil.which("sleep")
    assert sleep is not None
    link = tmp_path / "bin" / "weston"
    link.parent.mkdir()
    link.symlink_to(sleep)
    child = subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "--", str(link), "60"])
    try:
        deadline = time.monotonic() + WAIT_S
        while Path(f"/proc/{child.pid}/comm").read_text().strip() != "weston":
            assert time.monotonic() < deadline, "the stand-in never became weston"
            time.sleep(0.01)
        yield child
    finally:
        child.kill()
        child.wait(timeout=WAIT_S)


def test_a_rewrite_never_applied_is_applied_at_the_next_call(tmp_path: Path) -> None:
    """The operator died between writing weston.ini and the restart: the file already says
    the claim's mode, weston still runs the old one, and the next call restarts it."""
    s = settings(tmp_path, restart_timeout_s=0.2)
    kube = FakeDisplays({})
    assert modes.apply(s, kube, EMPTY, reason="t")

    class DiedError(Exception):
        pass

    def die() -> None:
        raise DiedError

    with pytest.raises(DiedError):
        modes.apply(s, kube, holding("1024x768@60"), reason="claim", on_written=die)
    assert _ini_mode(s) == "1024x768@60"
    assert modes.unapplied_marker(s.weston_ini).exists()

    ordered: list[int] = []
    with stand_in_weston(tmp_path) as weston:
        s.pid_file.write_text(f"{weston.pid}\n")
        # No new weston comes: the stand-in does not restart, so the wait times out.
        with pytest.raises(modes.CompositorTimeoutError):
            modes.apply(s, kube, holding("1024x768@60"), reason="again",
                        on_ordered=lambda: ordered.append(1))
        assert weston.wait(timeout=WAIT_S) == -signal.SIGTERM
        order = read_restart_order(weston.pid, directory=s.restarts_dir)
        assert order is not None and order.reason == "again"
    assert ordered == [1]
    assert not modes.unapplied_marker(s.weston_ini).exists()
    assert not modes.apply(s, kube, holding("1024x768@60"), reason="t")
