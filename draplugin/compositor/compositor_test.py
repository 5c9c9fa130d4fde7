"""Compositor: live changes through the control socket, the restart only as the fallback.

The layout module is played by `tests.support.fake_layout`'s line server speaking its control
protocol (`OUTPUTS`, `CONFIGURE`), weston by its stand-in that a restart's SIGTERM ends for good,
so a restart's wait runs to its bound.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from draplugin.compositor import Compositor, CompositorTimeoutError, Wanted
from libdisplay.compositor.weston import read_restart_order
from libdisplay.hardware.modes import Mode
from tests.support.fake_layout import (
    WAIT_S,
    FakeModule,
    serving,
    stand_in_weston,
    state_line,
)


@dataclass
class Recorded:
    restarts: list[str] = field(default_factory=list)
    reconfigures: list[tuple[str, str]] = field(default_factory=list)
    states: dict[str, tuple[bool, str, str, int]] = field(default_factory=dict)

    def compositor_restarted(self, reason: str) -> None:
        self.restarts.append(reason)

    def output_reconfigured(self, output: str, result: str) -> None:
        self.reconfigures.append((output, result))

    def set_output_state(self, output: str, *, connected: bool, mode: str, transform: str,
                         scale: int) -> None:
        self.states[output] = (connected, mode, transform, scale)


def compositor(tmp_path: Path, recorded: Recorded, *, timeout: float = 0.3) -> Compositor:
    return Compositor(socket=tmp_path / "wayland-0", pid_file=tmp_path / "weston.pid",
                      restarts_dir=tmp_path / "restarts", control=tmp_path / "layout.sock",
                      restart_timeout=timeout, recorder=recorded)


def test_a_change_is_applied_live_and_only_what_differs(tmp_path: Path) -> None:
    recorded = Recorded()
    module = FakeModule({"HDMI-A-1": state_line(), "DP-1": state_line()})
    with stand_in_weston(tmp_path) as weston, serving(tmp_path / "layout.sock", module):
        (tmp_path / "weston.pid").write_text(f"{weston.pid}\n")
        outcome = compositor(tmp_path, recorded).apply(
            [Wanted("HDMI-A-1", Mode(1280, 720, 60000), "rotate-90", 2), Wanted("DP-1")],
            why="test", connected=["HDMI-A-1", "DP-1"])
        assert weston.poll() is None
    assert module.requests == [
        "OUTPUTS", "CONFIGURE HDMI-A-1 mode=1280x720@60 transform=rotate-90 scale=2"]
    assert outcome.restarted is None and outcome.changed == ("HDMI-A-1",)
    state = outcome.states["HDMI-A-1"]
    assert (state.width, state.height, state.transform, state.scale) == (1280, 720,
                                                                        "rotate-90", 2)
    assert recorded.reconfigures == [("HDMI-A-1", "live")] and recorded.restarts == []
    assert recorded.states["HDMI-A-1"] == (True, "1280x720@60", "rotate-90", 2)


def test_a_replugged_output_gets_a_modeset_though_nothing_differs(tmp_path: Path) -> None:
    module = FakeModule({"X1": state_line()})
    with stand_in_weston(tmp_path) as weston, serving(tmp_path / "layout.sock", module):
        (tmp_path / "weston.pid").write_text(f"{weston.pid}\n")
        compositor(tmp_path, Recorded()).apply(
            [Wanted("X1", Mode(1920, 1080, 60000), modeset=True)], why="plug")
    assert module.requests == ["OUTPUTS", "CONFIGURE X1 modeset=1"]


def test_power_is_its_own_change_after_the_other_fields(tmp_path: Path) -> None:
    """Off: a CONFIGURE of its own after the mode (so a backend that cannot power off still
    switches modes); On: the module's modeset=1 lights it again."""
    recorded = Recorded()
    module = FakeModule({"X1": state_line(), "X2": state_line()})
    with stand_in_weston(tmp_path) as weston, serving(tmp_path / "layout.sock", module):
        (tmp_path / "weston.pid").write_text(f"{weston.pid}\n")
        off = compositor(tmp_path, recorded).apply(
            [Wanted("X1", Mode(1280, 720, 60000), power="off"), Wanted("X2")], why="off")
        again = compositor(tmp_path, recorded).apply([Wanted("X1", power="off")], why="again")
        on = compositor(tmp_path, recorded).apply([Wanted("X1")], why="on")
    assert module.requests == ["OUTPUTS", "CONFIGURE X1 mode=1280x720@60",
                               "CONFIGURE X1 power=off", "OUTPUTS", "OUTPUTS",
                               "CONFIGURE X1 modeset=1"]
    assert not off.states["X1"].powered and off.changed == ("X1",)
    assert again.changed == () and on.states["X1"].powered and on.changed == ("X1",)
    assert recorded.restarts == []


def test_a_power_off_the_backend_cannot_make_restarts_nothing(tmp_path: Path) -> None:
    """x11 and headless have no DPMS: the output stays lit, the outcome says why, and no
    restart is ordered (a restart lights outputs, it powers none off)."""
    recorded = Recorded()
    module = FakeModule({"X1": state_line()}, refuse_power=(
        "ERR unsupported power X1 cannot be powered off (the backend has no DPMS)"))
    with stand_in_weston(tmp_path) as weston, serving(tmp_path / "layout.sock", module):
        (tmp_path / "weston.pid").write_text(f"{weston.pid}\n")
        outcome = compositor(tmp_path, recorded).apply([Wanted("X1", power="off")], why="off")
        assert weston.poll() is None
    assert outcome.power_unsupported == {
        "X1": "X1 cannot be powered off (the backend has no DPMS)"}
    assert outcome.states["X1"].powered and outcome.restarted is None
    assert recorded.restarts == [] and outcome.power_failed == {}


def test_a_replugged_output_to_be_off_gets_no_modeset(tmp_path: Path) -> None:
    module = FakeModule({"X1": state_line() + " power=off"})
    with stand_in_weston(tmp_path) as weston, serving(tmp_path / "layout.sock", module):
        (tmp_path / "weston.pid").write_text(f"{weston.pid}\n")
        outcome = compositor(tmp_path, Recorded()).apply(
            [Wanted("X1", modeset=True, power="off")], why="plug")
    assert module.requests == ["OUTPUTS"] and not outcome.states["X1"].powered


@pytest.mark.parametrize(
    ("outputs", "refuse", "reason"),
    [({"HDMI-A-1": state_line()}, "ERR unsupported mode the backend has no mode switch",
      "unsupported"),
     ({}, None, "new-connector")],
    ids=["unsupported", "new-connector"])
def test_the_restart_is_the_fallback_and_says_why(
        tmp_path: Path, outputs: dict[str, str], refuse: str | None, reason: str) -> None:
    recorded = Recorded()
    module = FakeModule(dict(outputs), refuse=refuse)
    with stand_in_weston(tmp_path) as weston, serving(tmp_path / "layout.sock", module):
        (tmp_path / "weston.pid").write_text(f"{weston.pid}\n")
        # The stand-in does not come back: the wait runs to the restart timeout.
        with pytest.raises(CompositorTimeoutError, match=reason):
            compositor(tmp_path, recorded).apply(
                [Wanted("HDMI-A-1", Mode(1280, 720, 60000))], why="claim k")
        assert weston.wait(timeout=WAIT_S) == -signal.SIGTERM
        order = read_restart_order(weston.pid, directory=tmp_path / "restarts")
    assert order is not None and order.reason.startswith(f"{reason}: claim k")
    assert recorded.restarts == [reason]


def test_a_restarted_compositor_still_starting_is_waited_for_not_restarted_again(
        tmp_path: Path) -> None:
    """A restart's new weston that has not answered within the wait has no control socket
    yet: the next change waits for it and fails for a later try, and orders no second restart
    (which would kill it before it ever answered)."""
    recorded = Recorded()
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    old_dir.mkdir()
    new_dir.mkdir()
    c = compositor(tmp_path, recorded)
    with stand_in_weston(old_dir) as old:
        (tmp_path / "weston.pid").write_text(f"{old.pid}\n")
        with pytest.raises(CompositorTimeoutError):
            c.restart("new-connector", "a monitor on a connector never driven")
        assert old.wait(timeout=WAIT_S) == -signal.SIGTERM
    with stand_in_weston(new_dir) as new:  # started, not answering, no control socket yet
        (tmp_path / "weston.pid").write_text(f"{new.pid}\n")
        with pytest.raises(CompositorTimeoutError, match="not restarted again"):
            c.apply([Wanted("HDMI-A-1", Mode(1280, 720, 60000))], why="claim k")
        assert new.poll() is None
    assert recorded.restarts == ["new-connector"]


def test_a_failed_change_is_counted_and_restarts_nothing(tmp_path: Path) -> None:
    recorded = Recorded()
    module = FakeModule({"X1": state_line()},
                        refuse="ERR bad-mode mode not offered: 1920x1080@60.000")
    with stand_in_weston(tmp_path) as weston, serving(tmp_path / "layout.sock", module):
        (tmp_path / "weston.pid").write_text(f"{weston.pid}\n")
        outcome = compositor(tmp_path, recorded).apply(
            [Wanted("X1", Mode(800, 600, 60000))], why="spec")
        assert weston.poll() is None
    assert outcome.failed["X1"].field == "mode"  # type: ignore[attr-defined]
    assert recorded.reconfigures == [("X1", "failed")] and recorded.restarts == []


def test_without_a_module_only_an_unapplied_config_restarts(tmp_path: Path) -> None:
    """A stock shell has no control socket: weston.ini is the one record of what it was
    told, so an unchanged file restarts nothing."""
    recorded = Recorded()
    with stand_in_weston(tmp_path) as weston:
        (tmp_path / "weston.pid").write_text(f"{weston.pid}\n")
        outcome = compositor(tmp_path, recorded).apply(
            [Wanted("X1", Mode(800, 600, 60000))], why="t", config_changed=False)
        assert outcome.restarted is None and weston.poll() is None
        with pytest.raises(CompositorTimeoutError):
            compositor(tmp_path, recorded).apply(
                [Wanted("X1", Mode(800, 600, 60000))], why="t", config_changed=True,
                restart_reason="start")
    assert recorded.restarts == ["start"]


def test_nothing_runs_nothing_restarts(tmp_path: Path) -> None:
    (tmp_path / "weston.pid").write_text("999999999\n")  # beyond pid_max: no such process
    recorded = Recorded()
    c = compositor(tmp_path, recorded)
    assert c.apply([Wanted("X1", Mode(800, 600, 60000))], why="t").restarted is None
    assert c.restart("unsupported", "t") is False
    assert not (tmp_path / "restarts").exists() and recorded.restarts == []
