"""The resource.k8s.io/v1 rules: slice and claim validation, immutable fields, and the
DRADeviceTaints gate, directly and as lightkube sees them."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice
from lightkube.types import PatchType

from fakekube import dra, testing
from fakekube.client import sync_client
from fakekube.server import FakeKube
from fakekube.testing import as_dict, failure, load

JsonObject = dict[str, Any]
TAINT = {"key": "display.liken.sh/compositor-unavailable", "effect": "NoSchedule"}


def _slice(change: Callable[[JsonObject], None]) -> JsonObject:
    obj = testing.resource_slice("a")
    change(obj["spec"])
    return obj


def _many_attributes(spec: JsonObject) -> None:
    spec["devices"][0]["attributes"] = {f"a{i}": {"int": i} for i in range(33)}


def _devices(count: int, *, tainted: bool = False) -> Callable[[JsonObject], None]:
    def change(spec: JsonObject) -> None:
        spec["devices"] = [testing.device(f"d{i}") for i in range(count)]
        if tainted:
            spec["devices"][0]["taints"] = [TAINT]
    return change


@pytest.mark.parametrize(("change", "minor", "fields"), [
    (lambda s: None, 34, []),
    (_devices(128), 34, []),
    (_devices(129), 34, ["spec.devices"]),
    (_devices(65, tainted=True), 34, []),
    (_devices(65, tainted=True), 35, ["spec.devices"]),
    (_many_attributes, 34, ["spec.devices[0]"]),
    (lambda s: s["devices"][0].update(name="Card0_HDMI"), 34, ["spec.devices[0].name"]),
    (lambda s: s["devices"].append(copy.deepcopy(s["devices"][0])), 34,
     ["spec.devices[1].name"]),
    (lambda s: s["devices"][0]["attributes"].update({"edid-serial": {"string": "x"}}), 34,
     ["spec.devices[0].attributes[edid-serial]"]),
    (lambda s: s["devices"][0]["attributes"].update({"liken.sh/address": {"string": "0:2"}}), 34,
     []),
    (lambda s: s["devices"][0]["attributes"].update(model={"string": "x" * 65}), 34,
     ["spec.devices[0].attributes[model].string"]),
    (lambda s: s["devices"][0]["attributes"].update(model={"string": "x", "int": 1}), 34,
     ["spec.devices[0].attributes[model]"]),
    (lambda s: s["devices"][0]["attributes"].update(fw={"version": "1.2"}), 34,
     ["spec.devices[0].attributes[fw].version"]),
    (lambda s: s["devices"][0].update(taints=[{**TAINT, "effect": "None"}]), 34,
     ["spec.devices[0].taints[0].effect"]),
    (lambda s: s["devices"][0].update(taints=[{**TAINT, "effect": "None"}]), 35, []),
    (lambda s: s["devices"][0].update(taints=[TAINT] * 5), 34, ["spec.devices[0].taints"]),
    (lambda s: s.update(allNodes=True), 34, ["spec"]),
    (lambda s: s.pop("nodeName"), 34, ["spec"]),
    (lambda s: s.update(driver="Display_Liken"), 34, ["spec.driver"]),
    (lambda s: s["pool"].update(resourceSliceCount=0), 34, ["spec.pool.resourceSliceCount"]),
    (lambda s: s["pool"].update(name="n1/pool-a"), 34, []),
], ids=["valid", "128-devices", "129-devices", "65-tainted-on-1.34", "65-tainted-on-1.35",
        "33-attributes", "device-not-dns-label", "duplicate-device", "attribute-not-c-identifier",
        "attribute-with-domain", "string-too-long", "two-values", "version-not-semver",
        "effect-none-on-1.34", "effect-none-on-1.35", "five-taints-on-1.34", "two-node-choices",
        "no-node-choice", "driver-not-dns", "zero-slice-count", "pool-with-slash"])
def test_slice_rules(change: Callable[[JsonObject], None], minor: int,
                     fields: list[str]) -> None:
    assert [c.field for c in dra.slice_causes(_slice(change), None, minor=minor)] == fields


@pytest.mark.parametrize(("field", "value"), [
    ("driver", "gpu.example.com"), ("nodeName", "n2"), ("pool", {"name": "n2", "generation": 1,
                                                                   "resourceSliceCount": 1}),
], ids=["driver", "node", "pool-name"])
def test_slice_identity_fields_are_immutable(client: Client, field: str, value: Any) -> None:
    client.create(load(ResourceSlice, testing.resource_slice("a")))
    with pytest.raises(ApiError) as err:
        client.patch(ResourceSlice, "a", {"spec": {field: value}}, patch_type=PatchType.MERGE)
    status = failure(err.value)
    assert status["code"] == 422
    assert "field is immutable" in status["message"]


def test_claim_spec_is_immutable(client: Client) -> None:
    client.create(load(ResourceClaim, testing.resource_claim("c")))
    with pytest.raises(ApiError) as err:
        client.patch(ResourceClaim, "c", {"spec": {"devices": {"requests": [
            {"name": "other", "exactly": {"deviceClassName": "x"}}]}}},
            namespace="default", patch_type=PatchType.MERGE)
    assert [c["field"] for c in failure(err.value)["details"]["causes"]] == ["spec"]


@pytest.mark.parametrize(("request_", "fields"), [
    ({"name": "screen", "exactly": {"deviceClassName": "display.liken.sh"}}, []),
    ({"name": "Screen", "exactly": {"deviceClassName": "display.liken.sh"}},
     ["spec.devices.requests[0].name"]),
    ({"name": "screen"}, ["spec.devices.requests[0]"]),
    ({"name": "screen", "exactly": {"count": 1}},
     ["spec.devices.requests[0].exactly.deviceClassName"]),
    ({"name": "screen", "firstAvailable": [{"name": "big", "deviceClassName": "a"},
                                           {"name": "any"}]},
     ["spec.devices.requests[0].firstAvailable[1].deviceClassName"]),
], ids=["valid", "bad-name", "neither", "no-class", "subrequest-without-class"])
def test_claim_request_rules(request_: JsonObject, fields: list[str]) -> None:
    claim = testing.resource_claim("c")
    claim["spec"]["devices"]["requests"] = [request_]
    assert [c.field for c in dra.claim_causes(claim, None)] == fields


def test_taints_are_stamped_with_time_added_when_the_gate_is_on(client: Client) -> None:
    obj = testing.resource_slice("a")
    obj["spec"]["devices"][0]["taints"] = [TAINT]
    created = as_dict(client.create(load(ResourceSlice, obj)))
    taint = created["spec"]["devices"][0]["taints"][0]
    assert taint["key"] == TAINT["key"] and taint["timeAdded"]


def test_taints_are_dropped_silently_when_the_gate_is_off() -> None:
    with FakeKube(device_taints=False) as fake:
        client = sync_client(fake.url)
        try:
            obj = testing.resource_slice("a")
            obj["spec"]["devices"][0]["taints"] = [TAINT]
            created = as_dict(client.create(load(ResourceSlice, obj)))
            assert "taints" not in created["spec"]["devices"][0]
            assert [r.status for r in fake.request_log()] == [201]
        finally:
            client.close()
