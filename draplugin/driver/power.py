"""An output's power: the Display's `spec.power`, applied through KMS and DDC/CI.

Precedence, one rule (docs/guide/displayconfig.md and the CRD say the same): the Display's
`spec.power`, when stated, is the output's power whoever holds it, so a person's schedule is
never overridden by a tenant; a claim's `power` parameter applies only where its Display
states none, and stays what it always was, a DDC/CI setting made at the claim's prepare
(`draplugin.driver.state.plan_claim` leaves it out where the Display states a power).

A Display's power is applied in two steps, KMS first:

- **KMS**: the compositor's output powered off or lit (`draplugin.compositor.Wanted.power`,
  the layout module's `power=off` / `modeset=1`: weston_output_power_off / _on). Off and
  Standby both stop the signal; weston and the tenant's connection stay.
- **DDC/CI**: where the monitor answers DDC/CI and lists its power feature (VCP 0xD6) with
  that value, the feature is set and read back (On 01, Standby 02, Off 04).

Nothing is half-applied silently: when KMS failed, DDC/CI is not tried (the output stays as
the module put it back); when KMS worked and DDC/CI failed, the outcome says exactly that.
A backend without DPMS (x11, headless) cannot power an output off: that is `unsupported`,
not a failure, and DDC/CI alone applies it where the monitor speaks it.

When a Display's `spec.power` is removed after it was Off or Standby (its status says so),
the output is brought back On by the same two steps; a Display that never stated a power is
left alone (no DDC/CI traffic for it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from draplugin.compositor import Outcome
from libdisplay.display import DisplayPower

DDC_VALUES: Final[Mapping[DisplayPower, int]] = {"On": 0x01, "Standby": 0x02, "Off": 0x04}
"""MCCS VCP 0xD6 (power mode) values for a Display's power states."""

KmsResult = Literal["applied", "unsupported", "failed", "pending"]
"""`pending`: the compositor is not running; it is applied once it answers."""
DdcResult = Literal["applied", "none", "failed", "skipped"]
"""`none`: the monitor does not speak DDC/CI or has no such power value; `skipped`: not
tried because KMS failed."""
Method = Literal["KMS", "DDC/CI"]


class PowerHook(Protocol):
    """Sets a monitor's DDC/CI power feature (`draplugin.node.ddcmap.ClaimDdc`)."""

    def set_power(self, device: str, state: DisplayPower) -> DdcPower: ...


@dataclass(frozen=True, slots=True)
class DdcPower:
    """What DDC/CI did with a power state: applied (set and read back, or read as already
    so), none (why not: no DDC/CI, no such value), or failed (the error)."""

    result: DdcResult
    detail: str = ""


class NoPower:
    """No DDC/CI on this operator (`--no-publish`: no monitor's bus is known)."""

    def set_power(self, device: str, state: DisplayPower) -> DdcPower:
        return DdcPower("none", "the operator maps no i2c bus without its node publisher")


@dataclass(frozen=True, slots=True)
class PowerApplied:
    """One output's power as the operator applied it: the state, and how each step went."""

    state: DisplayPower
    kms: KmsResult
    ddc: DdcResult
    kms_detail: str = ""
    ddc_detail: str = ""

    @property
    def applied_by(self) -> tuple[Method, ...]:
        """The steps that took effect, in the order they ran."""
        steps: list[Method] = []
        if self.kms == "applied":
            steps.append("KMS")
        if self.ddc == "applied":
            steps.append("DDC/CI")
        return tuple(steps)

    @property
    def complete(self) -> bool:
        """Whether the state took effect, and no step that could apply it failed."""
        return bool(self.applied_by) and "failed" not in (self.kms, self.ddc)

    def describe(self) -> str:
        """`power Off through KMS and DDC/CI` or what kept it from taking effect."""
        how = " and ".join(self.applied_by)
        text = f"power {self.state}" + (f" through {how}" if how else " not applied")
        notes = []
        if self.kms != "applied":
            notes.append(f"KMS {self.kms}" + (f": {self.kms_detail}" if self.kms_detail else ""))
        if self.ddc != "applied":
            notes.append(f"DDC/CI {self.ddc}"
                         + (f": {self.ddc_detail}" if self.ddc_detail else ""))
        return text + (f" ({'; '.join(notes)})" if notes else "")

    def to_status(self, *, source: str = "Display") -> dict[str, object]:
        """`status.power` (the CRD's schema)."""
        return {"state": self.state, "appliedBy": list(self.applied_by), "source": source,
                "kms": _KMS_STATUS[self.kms], "ddc": _DDC_STATUS[self.ddc]}


_KMS_STATUS: Final[Mapping[KmsResult, str]] = {
    "applied": "Applied", "unsupported": "Unsupported", "failed": "Failed",
    "pending": "Pending"}
_DDC_STATUS: Final[Mapping[DdcResult, str]] = {
    "applied": "Applied", "none": "Unsupported", "failed": "Failed", "skipped": "Skipped"}


def target(stated: DisplayPower | None, last_applied: object) -> DisplayPower | None:
    """The power to apply: the spec's; On when the spec no longer states one but the status
    shows the operator applied another; None (leave the output alone) otherwise."""
    if stated is not None:
        return stated
    if last_applied in ("Off", "Standby"):
        return "On"
    return None


def kms_result(output: str, state: DisplayPower, outcome: Outcome) -> tuple[KmsResult, str]:
    """What the compositor's step did for `output` (its name there)."""
    if output in outcome.power_failed:
        return "failed", str(outcome.power_failed[output])
    if output in outcome.failed:
        return "failed", f"the output's other settings failed: {outcome.failed[output]}"
    if output in outcome.power_unsupported:
        return "unsupported", outcome.power_unsupported[output]
    running = outcome.states.get(output)
    if running is None:
        return "pending", "the compositor is not running; it is applied when it answers"
    if running.powered != (state == "On"):
        return "failed", f"the output is {'on' if running.powered else 'off'}"
    return "applied", ""


def apply(device: str, output: str, state: DisplayPower, outcome: Outcome,
          hook: PowerHook) -> PowerApplied:
    """The DDC/CI step for one output after the compositor's (`outcome`), and the whole."""
    kms, kms_detail = kms_result(output, state, outcome)
    if kms == "failed":
        return PowerApplied(state, kms, "skipped", kms_detail,
                            "not tried: the output was left as the compositor put it back")
    ddc = hook.set_power(device, state)
    return PowerApplied(state, kms, ddc.result, kms_detail, ddc.detail)
