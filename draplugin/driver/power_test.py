"""A Display's power: derived from its spec (and its status, to turn it On again), applied
through the compositor's KMS step, then DDC/CI, and reported as the SpecApplied verdict.

The compositor is `tests.support.fake_layout`'s control socket beside a stand-in weston; the
DDC/CI step is a recording hook (`draplugin.node.ddcmap_test` drives the real one against a
simulated monitor).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from draplugin.compositor import Outcome
from draplugin.driver import modes, power
from draplugin.driver.checkpoint import EMPTY, Checkpoint, ClaimEntry
from draplugin.driver.power import DdcPower, PowerApplied
from draplugin.publisher import spec_outcome
from draplugin.settings import Settings
from draplugin.testing import NODE, settings
from libdisplay.compositor.layout import LayoutConfigureFailed, OutputState
from libdisplay.display import DisplayPower, display_name
from tests.support.fake_layout import FakeModule, serving, stand_in_weston, state_line

HDMI = "card0-hdmi-a-1"
NAME = display_name(NODE, HDMI)


@dataclass
class Hook:
    """The DDC/CI step: answers `answer`, records what it was asked."""

    answer: DdcPower = field(default_factory=lambda: DdcPower("applied", "VCP 0xD6 reads 0x04"))
    asked: list[tuple[str, str]] = field(default_factory=list)

    def set_power(self, device: str, state: DisplayPower) -> DdcPower:
        self.asked.append((device, state))
        return self.answer


class Displays:
    """One Display, its spec and status as a dict; the `Kube` calls modes makes."""

    def __init__(self, spec: dict[str, Any], status: dict[str, Any] | None = None) -> None:
        self.spec = spec
        self.status = status or {}

    def get_claim(self, namespace: str, name: str) -> None:
        return None

    def get_display(self, name: str) -> dict[str, Any] | None:
        return {"metadata": {"name": name, "generation": 2}, "spec": dict(self.spec),
                "status": dict(self.status)}


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[Settings, FakeModule]]:
    s = settings(tmp_path)
    s.weston_ini.parent.mkdir(parents=True)
    module = FakeModule({"HDMI-A-1": state_line()})
    assert s.layout_control is not None
    with stand_in_weston(tmp_path) as weston, serving(s.layout_control, module):
        s.pid_file.write_text(f"{weston.pid}\n")
        yield s, module


def _apply(s: Settings, kube: Displays, hook: Hook) -> modes.Applied:
    return modes.apply(s, kube, EMPTY, s.compositor(), why="t", power_hook=hook)


def test_off_is_kms_then_ddc_and_the_verdict_says_both(
        node: tuple[Settings, FakeModule]) -> None:
    s, module = node
    hook = Hook()
    applied = _apply(s, Displays({"power": "Off"}), hook)
    assert module.requests[-1] == "CONFIGURE HDMI-A-1 power=off"
    assert hook.asked == [(HDMI, "Off")]
    done = applied.power[HDMI]
    assert (done.applied_by, done.complete) == (("KMS", "DDC/CI"), True)
    (verdict,) = modes.verdicts(applied, {})
    outcome = spec_outcome(verdict)
    assert (outcome.status, outcome.reason) == ("True", "Applied")
    assert outcome.message.endswith("; power Off through KMS and DDC/CI")
    assert done.to_status() == {"state": "Off", "appliedBy": ["KMS", "DDC/CI"],
                                "source": "Display", "kms": "Applied", "ddc": "Applied"}


def test_on_lights_the_output_and_sets_the_monitor_on(node: tuple[Settings, FakeModule]) -> None:
    s, module = node
    module.outputs["HDMI-A-1"] = state_line() + " power=off"
    hook = Hook(DdcPower("applied", "VCP 0xD6 reads 0x01"))
    applied = _apply(s, Displays({"power": "On"}), hook)
    assert module.requests[-1] == "CONFIGURE HDMI-A-1 modeset=1"
    assert hook.asked == [(HDMI, "On")] and applied.power[HDMI].complete


def test_a_monitor_without_ddc_is_kms_alone_and_says_so(node: tuple[Settings, FakeModule]) -> None:
    s, _ = node
    hook = Hook(DdcPower("none", "the monitor: it does not answer DDC/CI"))
    applied = _apply(s, Displays({"power": "Standby"}), hook)
    (verdict,) = modes.verdicts(applied, {})
    outcome = spec_outcome(verdict)
    assert outcome.reason == "Applied"
    assert outcome.message.endswith(
        "power Standby through KMS (DDC/CI none: the monitor: it does not answer DDC/CI)")
    assert applied.power[HDMI].to_status()["appliedBy"] == ["KMS"]


def test_kms_applied_and_ddc_failed_is_partly_applied_and_says_which(
        node: tuple[Settings, FakeModule]) -> None:
    s, _ = node
    hook = Hook(DdcPower("failed", "VCP 0xD6 set to 4, the monitor reads back 1"))
    applied = _apply(s, Displays({"power": "Off"}), hook)
    (verdict,) = modes.verdicts(applied, {})
    outcome = spec_outcome(verdict)
    assert (outcome.status, outcome.reason) == ("False", "PowerPartlyApplied")
    assert outcome.message == ("power Off through KMS (DDC/CI failed: VCP 0xD6 set to 4, the "
                               "monitor reads back 1)")


def test_a_backend_without_dpms_and_no_ddc_is_not_applied(
        node: tuple[Settings, FakeModule]) -> None:
    s, module = node
    module.refuse_power = "ERR unsupported power HDMI-A-1 cannot be powered off (no DPMS)"
    applied = _apply(s, Displays({"power": "Off"}),
                     Hook(DdcPower("none", "the monitor: no i2c bus is known for it")))
    (verdict,) = modes.verdicts(applied, {})
    outcome = spec_outcome(verdict)
    assert (outcome.status, outcome.reason) == ("False", "PowerNotApplied")
    assert "KMS unsupported: HDMI-A-1 cannot be powered off (no DPMS)" in outcome.message
    assert applied.outcome.restarted is None


def test_a_failed_kms_step_is_not_followed_by_ddc() -> None:
    """Nothing half-applied: the monitor is not told Off while the output could not be."""
    hook = Hook()
    outcome = Outcome(states={"X1": _state(powered=True)},
                      power_failed={"X1": LayoutConfigureFailed("failed", "power", "busy")})
    done = power.apply(HDMI, "X1", "Off", outcome, hook)
    assert hook.asked == [] and (done.kms, done.ddc) == ("failed", "skipped")
    assert not done.complete and done.applied_by == ()


@pytest.mark.parametrize(
    ("stated", "last", "expected"),
    [("Off", None, "Off"), (None, "Off", "On"), (None, "Standby", "On"), (None, "On", None),
     (None, None, None), ("On", "Off", "On")],
    ids=["stated", "removed-after-off", "removed-after-standby", "removed-after-on",
         "never-managed", "stated-on"],
)
def test_target(stated: DisplayPower | None, last: object, expected: str | None) -> None:
    assert power.target(stated, last) == expected


def test_removing_spec_power_after_off_turns_the_output_on(
        node: tuple[Settings, FakeModule]) -> None:
    s, module = node
    module.outputs["HDMI-A-1"] = state_line() + " power=off"
    hook = Hook(DdcPower("applied"))
    applied = _apply(s, Displays({}, {"power": {"state": "Off"}}), hook)
    assert module.requests[-1] == "CONFIGURE HDMI-A-1 modeset=1"
    assert hook.asked == [(HDMI, "On")] and applied.power[HDMI].state == "On"


def test_a_display_that_never_stated_power_is_left_alone(
        node: tuple[Settings, FakeModule]) -> None:
    s, module = node
    hook = Hook()
    applied = _apply(s, Displays({}), hook)
    assert hook.asked == [] and applied.power == {}
    assert module.requests == ["OUTPUTS"]


def _state(*, powered: bool) -> OutputState:
    return OutputState(name="X1", width=1920, height=1080, refresh_mhz=60000,
                       transform="normal", scale=1, x=0, y=0, logical_width=1920,
                       logical_height=1080, powered=powered)


def test_describe_names_each_step() -> None:
    done = PowerApplied("Off", "unsupported", "applied", "no DPMS", "VCP 0xD6 reads 0x04")
    assert done.describe() == "power Off through DDC/CI (KMS unsupported: no DPMS)"
    assert done.complete


def test_after_a_compositor_restart_only_the_power_is_applied_again(
        node: tuple[Settings, FakeModule]) -> None:
    """A weston that started again runs weston.ini (modes) and lit every output: the power
    alone is applied, a mode that differs is left to weston.ini (no CONFIGURE of it, so no
    restart where the backend cannot switch modes)."""
    s, module = node
    module.outputs["HDMI-A-1"] = state_line(mode="1024x768@60000")
    hook = Hook()
    applied = modes.apply_power(s, Displays({"power": "Off"}), EMPTY, s.compositor(), why="t",
                                power_hook=hook)
    assert module.requests == ["OUTPUTS", "CONFIGURE HDMI-A-1 power=off"]
    assert hook.asked == [(HDMI, "Off")] and applied.power[HDMI].complete


def test_a_claim_holding_the_output_does_not_hide_the_power_applied(
        node: tuple[Settings, FakeModule]) -> None:
    """The claim sets the mode (HeldByClaim), the Display's power applies all the same, and
    the condition's message says both."""
    s, _ = node
    entry = ClaimEntry(uid="u-1", name="kiosk", namespace="shop", state="prepared", devices=(),
                       config={HDMI: {"mode": "1280x720@60"}})
    applied = modes.apply(s, Displays({"power": "Off"}), Checkpoint(claims={"u-1": entry}),
                          s.compositor(), why="t", power_hook=Hook())
    (verdict,) = modes.verdicts(applied, {HDMI: entry})
    outcome = spec_outcome(verdict)
    assert outcome.reason == "HeldByClaim"
    assert outcome.message == (
        "claim shop/kiosk holds the output and sets its mode; spec.mode, transform and scale "
        "apply when the claim is released; power Off through KMS and DDC/CI")
