"""modes: weston.ini derived from the checkpoint's claims over the Displays, and applied.

A stand-in weston (`tests.support.fake_layout`'s, without a layout module) takes the SIGTERM a
fallback restart sends, so the order and the signal are checked without a compositor. The live
path is `draplugin.compositor`'s to test.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from draplugin.compositor import CompositorTimeoutError, Outcome
from draplugin.driver import modes
from draplugin.driver.checkpoint import EMPTY, Checkpoint, ClaimEntry, State
from draplugin.kube import KubeError
from draplugin.settings import Settings
from draplugin.testing import NODE, settings
from libdisplay.compositor.layout import OutputState
from libdisplay.compositor.weston import read_restart_order
from libdisplay.display import display_name
from libdisplay.hardware.modes import Mode
from libdisplay.kube.errors import ApiCallError
from tests.support.fake_layout import WAIT_S, stand_in_weston

HDMI = "card0-hdmi-a-1"

class FakeDisplays:
    """Display specs in a dict; the `Kube` calls modes makes. Writing one is a test failure."""

    def __init__(self, specs: dict[str, dict[str, Any]]) -> None:
        self.specs = specs
        self.unreachable = False

    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    def get_display(self, name: str) -> dict[str, Any] | None:
        if self.unreachable:
            raise KubeError(ApiCallError(f"GET Display {name}", "connection refused",
                                         retryable=True))
        spec = self.specs.get(name)
        return None if spec is None else {"metadata": {"name": name, "generation": 1},
                                          "spec": dict(spec)}


def holding(mode: str, *, state: State = "prepared", uid: str = "u-1",
            **fields: object) -> Checkpoint:
    entry = ClaimEntry(uid=uid, name="kiosk", namespace="default", state=state, devices=(),
                       config={HDMI: {"mode": mode, **fields}})
    return Checkpoint(claims={uid: entry})


def _apply(s: Settings, kube: FakeDisplays, checkpoint: Checkpoint) -> bool:
    """Whether weston.ini was rewritten (no compositor runs: nothing else happens)."""
    return modes.apply(s, kube, checkpoint, s.compositor(), why="t").written


def _ini_mode(s: Settings) -> str:
    (line,) = (ln for ln in s.weston_ini.read_text().splitlines() if ln.startswith("mode="))
    return line.removeprefix("mode=")


def test_a_holding_claim_wins_over_the_display_which_wins_over_preferred(tmp_path: Path) -> None:
    s = settings(tmp_path)
    name = display_name(NODE, HDMI)
    kube = FakeDisplays({})
    assert _apply(s, kube, EMPTY)
    assert _ini_mode(s) == "1920x1080@60"
    # What declare writes too: the layout shell, its sockets beside weston.ini.
    first = s.weston_ini.read_text()
    assert "shell=layout-shell.so" in first
    assert f"claims-dir={s.socket_dir / 'claims'}\n" in first
    assert f"control-socket={s.weston_ini.parent / 'layout.sock'}" in first
    assert not _apply(s, kube, EMPTY)

    kube.specs[name] = {"mode": "1280x720@60", "transform": "rotate-180"}
    assert _apply(s, kube, EMPTY)
    assert _ini_mode(s) == "1280x720@60"

    for state in ("started", "prepared"):
        assert _apply(s, kube, holding("1024x768@60", state=state)) == (
            state == "started")
        assert _ini_mode(s) == "1024x768@60"
        assert "transform=rotate-180" in s.weston_ini.read_text()
    # A claim being released no longer holds its output: the Display's mode is back.
    assert _apply(s, kube, holding("1024x768@60", state="unpreparing"))
    assert _ini_mode(s) == "1280x720@60"
    # A claim's "preferred" overrides the Display's mode; its transform overrides too.
    assert _apply(s, kube, holding("preferred", transform="rotate-90"))
    assert _ini_mode(s) == "1920x1080@60"
    assert "transform=rotate-90" in s.weston_ini.read_text()


def test_a_checkpointed_config_that_no_longer_validates_keeps_its_valid_fields(
        tmp_path: Path) -> None:
    s = settings(tmp_path)
    assert _apply(s, FakeDisplays({}), holding("1024x768@60", scale=9))
    assert _ini_mode(s) == "1024x768@60"
    assert "scale=" not in s.weston_ini.read_text()


def test_an_unreadable_display_fails_the_derivation_and_writes_nothing(tmp_path: Path) -> None:
    s = settings(tmp_path)
    kube = FakeDisplays({display_name(NODE, HDMI): {"mode": "1280x720@60"}})
    assert _apply(s, kube, EMPTY)
    before = s.weston_ini.read_text()
    kube.unreachable = True
    # Not a guess at preferred modes: a blip of the API must not reset every screen.
    with pytest.raises(modes.DisplayReadError, match="cannot read Display n1.card0-hdmi-a-1"):
        _apply(s, kube, EMPTY)
    assert s.weston_ini.read_text() == before


def test_a_rewrite_never_applied_is_applied_at_the_next_call(tmp_path: Path) -> None:
    """The operator died between writing weston.ini and applying it, under a compositor
    without a layout module (nothing to ask what it runs): the file already says the claim's
    mode, weston still runs the old one, and the next call restarts it."""
    s = settings(tmp_path, restart_timeout_s=0.2)
    kube = FakeDisplays({})
    assert _apply(s, kube, EMPTY)

    class DiedError(Exception):
        pass

    def die() -> None:
        raise DiedError

    with pytest.raises(DiedError):
        modes.apply(s, kube, holding("1024x768@60"), s.compositor(), why="claim",
                    on_written=die)
    assert _ini_mode(s) == "1024x768@60"
    assert modes.unapplied_marker(s.weston_ini).exists()

    with stand_in_weston(tmp_path) as weston:
        s.pid_file.write_text(f"{weston.pid}\n")
        # No new weston comes: the stand-in does not restart, so the wait times out.
        with pytest.raises(CompositorTimeoutError):
            modes.apply(s, kube, holding("1024x768@60"), s.compositor(), why="again")
        assert weston.wait(timeout=WAIT_S) == -signal.SIGTERM
        order = read_restart_order(weston.pid, directory=s.restarts_dir)
        assert order is not None and order.reason.startswith("unsupported: again")
    # With no compositor left to tell, the next call finds the file as it is and is done.
    assert not _apply(s, kube, holding("1024x768@60"))
    assert not modes.unapplied_marker(s.weston_ini).exists()


def _running(mode: Mode, *, transform: str = "normal", scale: int = 1) -> OutputState:
    return OutputState(name="HDMI-A-1", width=mode.width, height=mode.height,
                       refresh_mhz=mode.refresh_mhz, transform=transform, scale=scale, x=0, y=0,
                       logical_width=mode.width, logical_height=mode.height)


def _verdict(s: Settings, kube: FakeDisplays, checkpoint: Checkpoint,
             running: OutputState | None) -> modes.SpecVerdict:
    derivation = modes.derive(s, kube, modes.claimed_outputs(checkpoint))
    outcome = Outcome(states={"HDMI-A-1": running} if running else {})
    (verdict,) = modes.verdicts(modes.Applied(derivation, outcome), modes.holders(checkpoint))
    return verdict


def test_each_displays_spec_gets_a_verdict_naming_why(tmp_path: Path) -> None:
    s = settings(tmp_path)
    name = display_name(NODE, HDMI)
    kube = FakeDisplays({name: {"mode": "1280x720@60", "transform": "rotate-90"}})
    applied = _verdict(s, kube, EMPTY, _running(Mode(1280, 720, 60000), transform="rotate-90"))
    assert (applied.display, applied.generation, applied.reason) == (name, 1, "Applied")
    assert (applied.mode, applied.transform, applied.scale) == ("1280x720@60", "rotate-90", 1)

    held = _verdict(s, kube, holding("1024x768@60"), _running(Mode(1024, 768, 60000)))
    assert held.reason == "HeldByClaim" and held.holder is not None
    assert held.holder.uid == "u-1"
    # A claim that sets no output field leaves the spec in force.
    no_output = Checkpoint(claims={"u-2": ClaimEntry(
        uid="u-2", name="dim", namespace="default", state="prepared", devices=(),
        config={HDMI: {"brightness": 40}})})
    assert _verdict(s, kube, no_output, _running(Mode(1280, 720, 60000))).reason == "Applied"

    kube.specs[name] = {"mode": "800x600@60"}
    refused = _verdict(s, kube, EMPTY, _running(Mode(1920, 1080, 60000)))
    assert (refused.reason, refused.mode) == ("ModeNotOffered", "800x600@60")
    assert refused.offered == ("1920x1080@60", "1280x720@60", "1024x768@60")

    kube.specs[name] = {"mode": "sideways"}
    assert _verdict(s, kube, EMPTY, _running(Mode(1920, 1080, 60000))).reason == "InvalidSpec"
    kube.specs[name] = {}
    assert _verdict(s, kube, EMPTY, None).reason == "RestartPending"
