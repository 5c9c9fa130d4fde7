"""Schema checks on writes: pruning with warnings, strict field validation, type and required
errors on built-in kinds, and structural pruning, defaults and validation of custom resources."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.generic_resource import create_global_resource
from lightkube.types import PatchType

from fakekube import testing
from fakekube.schema import Schemas
from fakekube.server import FakeKube
from fakekube.testing import as_dict, call, failure, load
from tests.support import realapi
from tests.support.realapi import ApiServer, real_kube  # noqa: F401 - a fixture

Display = create_global_resource("display.liken.sh", "v1alpha1", "Display", "displays")
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
DISPLAYS = "/apis/display.liken.sh/v1alpha1/displays"
JsonObject = dict[str, Any]


def _with(obj: JsonObject, path: str, value: Any) -> JsonObject:
    """`obj` with the field at a dotted path (numbers index lists) set, or removed for None."""
    node: Any = obj
    *parents, last = path.split(".")
    for part in parents:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    if value is None:
        del node[last]
    else:
        node[last] = value
    return obj


def test_unknown_fields_are_dropped_with_a_warning(fake: FakeKube) -> None:
    body = _with(testing.resource_slice("a"), "spec.devices.0.bogus", 1)
    reply = testing.call(fake.url, "POST", SLICES, body)
    assert reply.code == 201
    assert "bogus" not in reply.body["spec"]["devices"][0]
    assert reply.headers.get_all("Warning") == ['299 - "unknown field \\"spec.devices[0].bogus\\""']


def test_strict_field_validation_refuses_unknown_fields(fake: FakeKube) -> None:
    body = _with(testing.resource_slice("a"), "spec.bogus", 1)
    reply = testing.call(fake.url, "POST", f"{SLICES}?fieldValidation=Strict", body)
    assert (reply.code, reply.body["reason"]) == (400, "BadRequest")
    assert reply.body["message"] == 'strict decoding error: unknown field "spec.bogus"'


@pytest.mark.parametrize(("path", "value", "code", "field"), [
    ("spec.pool.generation", "one", 400, None),
    ("spec.devices", {"name": "x"}, 400, None),
    ("spec.driver", None, 422, "spec.driver"),
    ("spec.pool.name", None, 422, "spec.pool.name"),
    ("spec.devices.0.name", None, 422, "spec.devices[0].name"),
], ids=["wrong-type", "object-for-list", "missing-driver", "missing-pool-name",
        "missing-device-name"])
def test_built_in_schema_errors(fake: FakeKube, path: str, value: Any, code: int,
                                field: str | None) -> None:
    # Raw HTTP: lightkube's typed models would refuse these bodies before sending them.
    reply = testing.call(fake.url, "POST", SLICES, _with(testing.resource_slice("a"), path, value))
    assert (reply.code, reply.body["code"]) == (code, code)
    if field is not None:
        assert field in [c["field"] for c in reply.body["details"]["causes"]]


def test_custom_resources_are_pruned_and_defaulted(fake: FakeKube, client: Client) -> None:
    fake.register_crd(testing.display_crd())
    body = _with(testing.display("d"), "spec.bogus", True)
    body["spec"].update(mode=None, transform=None)  # nulls of non-nullable fields are dropped
    created = as_dict(client.create(load(Display, body)))
    assert created["spec"] == {"node": "n1", "connector": "HDMI-A-1", "transform": "normal"}
    status = {"connected": True, "extra": 1, "edid": {"manufacturer": "DEL", "serial": 7}}
    updated = as_dict(client.patch(Display.Status, "d", {"status": status},
                                   patch_type=PatchType.MERGE))
    # status.edid keeps unknown fields (x-kubernetes-preserve-unknown-fields), status.extra not.
    assert updated["status"] == {"connected": True,
                                 "edid": {"manufacturer": "DEL", "serial": 7}}


@pytest.mark.parametrize(("path", "value", "field"), [
    ("spec.mode", "huge", "spec.mode"),
    ("spec.transform", "sideways", "spec.transform"),
    ("spec.scale", "two", "spec.scale"),
    ("spec.scale", 0, "spec.scale"),
    ("spec.node", None, "spec.node"),
], ids=["pattern", "enum", "type", "minimum", "required"])
def test_custom_resource_validation_is_422_naming_the_field(
        fake: FakeKube, client: Client, path: str, value: Any, field: str) -> None:
    fake.register_crd(testing.display_crd())
    with pytest.raises(ApiError) as err:
        client.create(load(Display, _with(testing.display("d"), path, value)))
    status = failure(err.value)
    assert (status["code"], status["reason"]) == (422, "Invalid")
    assert [c["field"] for c in status["details"]["causes"]] == [field]
    assert status["message"].startswith(f'Display.display.liken.sh "d" is invalid: {field}: ')


def test_nullable_fields_accept_null(fake: FakeKube) -> None:
    fake.register_crd(testing.display_crd())
    reply = testing.call(fake.url, "POST", DISPLAYS, _with(testing.display("d"), "spec.scale", 2))
    assert reply.code == 201
    reply.body["spec"]["scale"] = None
    assert testing.call(fake.url, "PUT", f"{DISPLAYS}/d", reply.body).code == 200


def test_kube_version_must_be_a_minor() -> None:
    with pytest.raises(ValueError, match="1.34"):
        Schemas("v1.34.2")


def test_a_crd_schema_that_declares_metadata_never_prunes_it(fake: FakeKube) -> None:
    # Real CRDs (ours in deploy/ included) declare `metadata: {type: object}` with no
    # properties; the apiserver still keeps name, labels and the rest.
    crd = testing.display_crd()
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["properties"]["metadata"] = {"type": "object"}
    schema["properties"]["apiVersion"] = {"type": "string"}
    fake.register_crd(crd)
    stored = fake.create(
        {
            "apiVersion": "display.liken.sh/v1alpha1",
            "kind": "Display",
            "metadata": {"name": "n1.card0-dp-1", "labels": {"a": "b"}},
            "spec": {"node": "n1", "connector": "DP-1"},
        }
    )
    assert stored["metadata"]["name"] == "n1.card0-dp-1"
    assert stored["metadata"]["labels"] == {"a": "b"}


@pytest.fixture
def api(real_kube: realapi.RealKube | None) -> Iterator[ApiServer]:  # noqa: F811
    """The fake, or with DISPLAY_OPERATOR_REAL_API=1 a real kube-apiserver 1.37."""
    with realapi.api_server(real_kube) as server:
        server.register_crd(testing.display_crd())
        yield server


DISPLAYS = "/apis/display.liken.sh/v1alpha1/displays"
TRANSFORMS = '"normal", "rotate-90", "rotate-180", "rotate-270"'


@pytest.mark.parametrize(("spec", "cause"), [
    ({"mode": "fast"}, ("spec.mode", "FieldValueInvalid",
                        "Invalid value: \"fast\": spec.mode in body should match "
                        "'^(preferred|\\d+x\\d+@\\d+)$'")),
    ({"transform": "sideways"}, ("spec.transform", "FieldValueNotSupported",
                                 f'Unsupported value: "sideways": supported values: {TRANSFORMS}')),
    ({"scale": 0}, ("spec.scale", "FieldValueInvalid",
                    "Invalid value: 0: spec.scale in body should be greater than or equal to 1")),
], ids=["pattern", "enum", "minimum"])
def test_a_crd_schema_failure_as_the_server_words_it(api: ApiServer, spec: JsonObject,
                                                     cause: tuple[str, str, str]) -> None:
    """The CRD schema's answers word for word as kube-apiserver 1.37.2 gives them (clients and
    people read the message)."""
    body = testing.display("d1")
    body["spec"].update(spec)
    reply = call(api.url, "POST", DISPLAYS, body, **realapi.client_options(api))
    assert reply.code == 422, reply.body
    field, reason, message = cause
    assert reply.body["details"]["causes"] == [
        {"field": field, "reason": reason, "message": message}]
    assert reply.body["message"] == (
        f'Display.display.liken.sh "d1" is invalid: {field}: {message}')


def test_unknown_fields_are_warned_of_in_path_order_status_included(api: ApiServer) -> None:
    """Decoding warns of every unknown field as sent, the status a create does not keep
    included."""
    body = testing.display("d1")
    body["spec"].update(zeta=1, alpha=2)
    body["status"] = {"bogus": True}
    reply = call(api.url, "POST", DISPLAYS, body, **realapi.client_options(api))
    assert reply.code == 201, reply.body
    assert reply.headers.get_all("Warning") == [
        f'299 - "unknown field \\"{path}\\""'
        for path in ("spec.alpha", "spec.zeta", "status.bogus")]
