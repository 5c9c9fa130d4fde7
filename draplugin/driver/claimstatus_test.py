"""claimstatus: the status.devices entry built from what the compositor reports, and the
values the API would refuse, named before any call. (The writes through the API, with the
rendered base's RBAC, are in tests/deploy/claimstatus_test.py.)"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from draplugin.claims import ClaimRef
from draplugin.driver import claimstatus
from draplugin.driver.claimstatus import AppliedOutput, DeviceStatus


@dataclass(frozen=True)
class _State:
    """Shaped as libdisplay.compositor.layout.OutputState."""

    name: str = "X2"
    width: int = 1280
    height: int = 720
    refresh_mhz: int = 59940
    transform: str = "rotate-270"
    scale: int = 1


def test_from_the_layout_modules_answer() -> None:
    applied = AppliedOutput.from_output_state("card0-dp-1", _State())
    assert applied.data() == {"apiVersion": "display.liken.sh/v1alpha1", "kind": "AppliedOutput",
                              "output": "X2", "mode": "1280x720@59.94",
                              "transform": "rotate-270", "scale": 1}
    flipped = AppliedOutput.from_output_state("card0-dp-1",
                                              _State(transform="flipped-rotate-180"))
    assert flipped.data()["transform"] == "flipped-rotate-180"


def test_ready_condition_keeps_its_time_while_readiness_is_unchanged() -> None:
    applied = AppliedOutput(device="card0-dp-1", output="DP-1", mode="1920x1080@60")
    first = claimstatus.entry(DeviceStatus.ready_with(applied), pool="n1", generation=1)
    old = {**first, "conditions": [{**first["conditions"][0],
                                    "lastTransitionTime": "2020-01-01T00:00:00Z"}]}
    rotated = AppliedOutput(device="card0-dp-1", output="DP-1", mode="1920x1080@60",
                            transform="rotate-90")
    again = claimstatus.entry(DeviceStatus.ready_with(rotated), pool="n1", generation=2,
                              previous=old)
    assert again["conditions"][0]["lastTransitionTime"] == "2020-01-01T00:00:00Z"
    assert again["conditions"][0]["observedGeneration"] == 2
    failed = claimstatus.entry(DeviceStatus.not_ready("card0-dp-1", "ApplyFailed", "no"),
                               pool="n1", generation=2, previous=old)
    assert failed["conditions"][0]["lastTransitionTime"] != "2020-01-01T00:00:00Z"
    assert "data" not in failed


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: AppliedOutput(device="", output="DP-1", mode="1x1"), "device"),
        (lambda: AppliedOutput(device="d", output="DP-1", mode="1x1", transform="90"),
         "transform"),
        # The layout module's former short name: one vocabulary, weston.ini's.
        (lambda: AppliedOutput(device="d", output="DP-1", mode="1x1", transform="flipped-90"),
         "transform"),
        (lambda: AppliedOutput(device="d", output="DP-1", mode="1x1", scale=9), "scale"),
        (lambda: AppliedOutput(device="d", output="DP-1", mode="1x1", scale=True), "scale"),
        (lambda: DeviceStatus.not_ready("d", "not a reason", "m"), "reason"),
    ],
    ids=["empty-device", "transform", "transform-short-flipped", "scale-9", "scale-bool", "reason"],
)
def test_a_value_the_api_would_refuse_names_its_field(build: Callable[[], object],
                                                      field: str) -> None:
    with pytest.raises(claimstatus.ClaimStatusError) as raised:
        build()
    assert raised.value.field == field


def test_a_device_listed_twice_is_refused_before_any_call() -> None:
    applied = AppliedOutput(device="card0-dp-1", output="DP-1", mode="1920x1080@60")
    writer = claimstatus.ClaimStatusWriter(None, pool="n1")  # type: ignore[arg-type]
    with pytest.raises(claimstatus.ClaimStatusError) as raised:
        writer.report(ClaimRef("ns", "c", "u"),
                      [DeviceStatus.ready_with(applied)] * 2)
    assert raised.value.field == "device"
