"""The resource.k8s.io/v1 rules: slice and claim validation, immutable fields, and the
DRADeviceTaints gate, directly and as lightkube sees them. With DISPLAY_OPERATOR_REAL_API=1
the tests through the API run against a real kube-apiserver 1.37 (`tests.support.realapi`),
and the fake's rules are held to its answers."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice
from lightkube.types import PatchType

from fakekube import dra, testing
from fakekube.client import sync_client
from fakekube.server import FakeKube
from fakekube.status import Cause
from fakekube.testing import RawReply, as_dict, call, failure, load
from tests.support import realapi
from tests.support.realapi import ApiServer, real_kube  # noqa: F401 - a fixture

JsonObject = dict[str, Any]
TAINT = {"key": "display.liken.sh/compositor-unavailable", "effect": "NoSchedule"}
SLICES = "/apis/resource.k8s.io/v1/resourceslices"


@pytest.fixture
def api(real_kube: realapi.RealKube | None) -> Iterator[ApiServer]:  # noqa: F811
    """The fake at the real one's version, or the real one with the switch."""
    with realapi.api_server(real_kube, kube_version="1.37") as server:
        yield server


@pytest.fixture
def client(api: ApiServer) -> Iterator[Client]:
    c = sync_client(api.url, **realapi.client_options(api))
    try:
        yield c
    finally:
        c.close()


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


SLICE_CASES = [
    (lambda s: None, 34, []),
    (_devices(128), 34, []),
    (_devices(129), 34, ["spec.devices"]),
    (_devices(65, tainted=True), 34, []),
    (_devices(65, tainted=True), 35, ["spec.devices"]),
    (_many_attributes, 34, ["spec.devices[0]"]),
    (lambda s: s["devices"][0]["attributes"].update({"a" * 33: {"int": 1}}), 34,
     ["spec.devices[0].attributes"]),
    (lambda s: s["devices"][0].update(name="Card0_HDMI"), 34, ["spec.devices[0].name"]),
    (lambda s: s["devices"].append(copy.deepcopy(s["devices"][0])), 34,
     ["spec.devices[1]"]),
    (lambda s: s["devices"][0]["attributes"].update({"edid-serial": {"string": "x"}}), 34,
     ["spec.devices[0].attributes"]),
    (lambda s: s["devices"][0]["attributes"].update({"Bad_Domain/x": {"int": 1}}), 34,
     ["spec.devices[0].attributes"]),
    (lambda s: s["devices"][0]["attributes"].update(modes={"strings": ["1920x1080"]}), 34,
     ["spec.devices[0].attributes[modes]"]),
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

]
SLICE_IDS = ["valid", "128-devices", "129-devices", "65-tainted-on-1.34", "65-tainted-on-1.35",
        "33-attributes", "attribute-name-too-long", "device-not-dns-label", "duplicate-device",
        "attribute-not-c-identifier", "attribute-domain-not-dns", "list-attribute-gated-off",
        "attribute-with-domain", "string-too-long", "two-values", "version-not-semver",
        "effect-none-on-1.34", "effect-none-on-1.35", "five-taints-on-1.34", "two-node-choices",
        "no-node-choice", "driver-not-dns", "zero-slice-count", "pool-with-slash"]


@pytest.mark.parametrize(("change", "minor", "fields"), SLICE_CASES, ids=SLICE_IDS)
def test_slice_rules(change: Callable[[JsonObject], None], minor: int,
                     fields: list[str]) -> None:
    assert [c.field for c in dra.slice_causes(_slice(change), None, minor=minor)] == fields


# The cases of the real server's version (the cases for 1.34 alone left out).
AT_1_37 = [pytest.param(change, id=i) for (change, _, _), i in zip(SLICE_CASES, SLICE_IDS,
                                                                     strict=True)
           if not i.endswith("-on-1.34")]


@pytest.mark.parametrize("change", AT_1_37)
def test_slice_rules_as_the_server_answers(api: ApiServer,
                                           change: Callable[[JsonObject], None]) -> None:
    """The fields the server's 422 names are the fake's rules at 1.37."""
    obj = _slice(change)
    want = _fields_and_reasons(dra.slice_causes(obj, None, minor=37))
    _assert_answer(call(api.url, "POST", SLICES, obj, **realapi.client_options(api)), want)


def _fields_and_reasons(causes: list[Cause]) -> set[tuple[str, str]]:
    return {(c.field, c.reason) for c in causes}


def _assert_answer(reply: RawReply, want: set[tuple[str, str]]) -> None:
    """201 when no cause is wanted, else a 422 naming exactly the wanted fields and reasons."""
    if not want:
        assert reply.code == 201, reply.body
        return
    assert reply.code == 422, reply.body
    assert {(c["field"], c["reason"]) for c in reply.body["details"]["causes"]} == want


@pytest.mark.parametrize(("change", "code", "answer"), [
    (lambda s: s["pool"].update(generation="x"), 400, "BadRequest"),
    (lambda s: s.update(devices={"a": 1}), 400, "BadRequest"),
    (lambda s: s.pop("driver"), 422, [("spec.driver", "FieldValueRequired")]),
    (lambda s: s.update(bogus=1), 201, '299 - "unknown field \\"spec.bogus\\""'),
], ids=["wrong-type", "object-for-list", "missing-required", "unknown-field"])
def test_schema_errors_as_the_server_answers(api: ApiServer,
                                             change: Callable[[JsonObject], None], code: int,
                                             answer: object) -> None:
    """What the schema decides: a body that does not decode is a 400 (the message is the
    decoder's own and differs: Go's names its struct), a missing required field a 422 naming
    it, an unknown field dropped with the apiserver's Warning."""
    reply = call(api.url, "POST", SLICES, _slice(change), **realapi.client_options(api))
    assert reply.code == code, reply.body
    if code == 400:
        assert reply.body["reason"] == answer
        assert reply.body["message"].startswith(
            'ResourceSlice in version "v1" cannot be handled as a ResourceSlice: ')
    elif code == 422:
        assert [(c["field"], c["reason"]) for c in reply.body["details"]["causes"]] == answer
    else:
        assert reply.headers["Warning"] == answer


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
    assert failure(err.value)["details"]["causes"] == [
        {"field": "spec", "reason": "FieldValueInvalid",
         "message": "Invalid value: null: field is immutable"}]


SCREEN = {"name": "screen", "exactly": {"deviceClassName": "display.liken.sh"}}
CLAIM_CASES = [
    ([SCREEN], []),
    ([{**SCREEN, "name": "Screen"}], ["spec.devices.requests[0].name"]),
    ([{"name": "screen"}], ["spec.devices.requests[0]"]),
    ([{"name": "screen", "exactly": {"count": 1}}],
     ["spec.devices.requests[0].exactly.deviceClassName"]),
    ([{"name": "screen", "firstAvailable": [{"name": "big", "deviceClassName": "a"},
                                            {"name": "any"}]}],
     ["spec.devices.requests[0].firstAvailable[1].deviceClassName"]),
    ([SCREEN, SCREEN], ["spec.devices.requests[1]"]),
]
CLAIM_IDS = ["valid", "bad-name", "neither", "no-class", "subrequest-without-class",
             "duplicate-request"]


def _claim(requests: list[JsonObject]) -> JsonObject:
    claim = testing.resource_claim("c")
    claim["spec"]["devices"]["requests"] = copy.deepcopy(requests)
    return claim


@pytest.mark.parametrize(("requests", "fields"), CLAIM_CASES, ids=CLAIM_IDS)
def test_claim_request_rules(requests: list[JsonObject], fields: list[str]) -> None:
    assert [c.field for c in dra.claim_causes(_claim(requests), None)] == fields


@pytest.mark.parametrize("requests", [r for r, _ in CLAIM_CASES], ids=CLAIM_IDS)
def test_claim_request_rules_as_the_server_answers(api: ApiServer,
                                                   requests: list[JsonObject]) -> None:
    claim = _claim(requests)
    want = _fields_and_reasons(dra.claim_causes(claim, None))
    _assert_answer(call(api.url, "POST",
                        "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims", claim,
                        **realapi.client_options(api)), want)


def test_taints_are_stamped_with_time_added_when_the_gate_is_on(client: Client) -> None:
    obj = testing.resource_slice("a")
    obj["spec"]["devices"][0]["taints"] = [TAINT]
    created = as_dict(client.create(load(ResourceSlice, obj)))
    taint = created["spec"]["devices"][0]["taints"][0]
    assert taint["key"] == TAINT["key"] and taint["timeAdded"]


@realapi.fake_only("the DRADeviceTaints gate is GA and locked on in 1.37")
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
