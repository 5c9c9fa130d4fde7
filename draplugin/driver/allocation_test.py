from __future__ import annotations

from typing import Any

import pytest

from draplugin.driver.allocation import AllocatedDevice, AllocationError, allocated_devices
from draplugin.driver.claimconfig import ClaimConfigError, DisplayConfig
from libdisplay.hardware.modes import Mode
from libdisplay.pod import DRIVER


def params(**fields: object) -> dict[str, object]:
    return {"apiVersion": "display.liken.sh/v1alpha1", "kind": "DisplayConfig", **fields}


def claim(results: list[dict[str, Any]], configs: list[dict[str, Any]] | None = None) -> Any:
    return {"status": {"allocation": {"devices": {"results": results, "config": configs or []}}}}


def result(device: str, *, request: str = "screen", pool: str = "n1",
           driver: str = DRIVER) -> dict[str, Any]:
    return {"request": request, "driver": driver, "pool": pool, "device": device}


def opaque(source: str, requests: list[str], parameters: object, *,
           driver: str = DRIVER) -> dict[str, Any]:
    return {"source": source, "requests": requests,
            "opaque": {"driver": driver, "parameters": parameters}}


def test_class_first_claim_later_per_request_and_other_drivers_skipped() -> None:
    got = allocated_devices(
        claim(
            [result("card0-hdmi-a-1", request="main/big"), result("card0-dp-1", request="side"),
             result("gpu0", driver="gpu.example.com")],
            [
                # listed first but from the claim: it still wins over the class config
                opaque("FromClaim", ["main"], params(mode="1280x720@60")),
                opaque("FromClass", [], params(mode="preferred", brightness=30)),
                opaque("FromClaim", [], {"anything": "for another driver"}, driver="other.io"),
                opaque("FromClaim", ["side"], params(scale=2)),
            ],
        ),
        pool="n1",
    )
    assert got == (
        AllocatedDevice(request="main/big", pool="n1", device="card0-hdmi-a-1",
                        config=DisplayConfig(mode=Mode(1280, 720, 60000), brightness=30)),
        AllocatedDevice(request="side", pool="n1", device="card0-dp-1",
                        config=DisplayConfig(mode="preferred", brightness=30, scale=2)),
    )
    assert got[0].request_name == "main"


ERRORS = {
    "unallocated": ({"status": {}}, "not allocated"),
    "other-driver-only": (claim([result("gpu0", driver="gpu.example.com")]),
                          "no device of driver display.liken.sh"),
    "other-pool": (claim([result("card0-dp-1", pool="n2")]),
                   "device 'card0-dp-1' is in pool 'n2', not this node's pool 'n1'"),
}


@pytest.mark.parametrize("case", list(ERRORS), ids=list(ERRORS))
def test_allocation_errors(case: str) -> None:
    obj, message = ERRORS[case]
    with pytest.raises(AllocationError, match=message):
        allocated_devices(obj, pool="n1")


def test_bad_config_names_its_source() -> None:
    obj = claim([result("card0-dp-1")], [opaque("FromClass", [], params(scale=7))])
    with pytest.raises(ClaimConfigError, match="^class config 0: field 'scale' value 7"):
        allocated_devices(obj, pool="n1")
