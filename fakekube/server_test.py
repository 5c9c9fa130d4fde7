"""FakeKube driven by the real lightkube sync client over HTTP: CRUD of every kind the project
uses, server-owned fields, conflicts, the status subresource, selectors, deletes and lifecycle,
and the Status bodies clients branch on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from lightkube import ApiError, Client, operators
from lightkube.generic_resource import create_global_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Namespace, Node, Pod
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim, ResourceSlice
from lightkube.types import CascadeType, PatchType

from fakekube import testing
from fakekube.server import FakeKube
from fakekube.testing import as_dict, failure, load, names

Display = create_global_resource("display.liken.sh", "v1alpha1", "Display", "displays")
JsonObject = dict[str, Any]
DEVICE_CLASS = {"metadata": {"name": "display.liken.sh"}, "spec": {"selectors": [
    {"cel": {"expression": "device.driver == 'display.liken.sh'"}}]}}

KINDS = [
    pytest.param(ResourceSlice, testing.resource_slice("n1-display"), None, id="resourceslice"),
    pytest.param(ResourceClaim, testing.resource_claim("screen"), "default", id="resourceclaim"),
    pytest.param(DeviceClass, DEVICE_CLASS, None, id="deviceclass"),
    pytest.param(Node, testing.node("n1"), None, id="node"),
    pytest.param(Pod, testing.pod("kiosk"), "default", id="pod"),
    pytest.param(Display, testing.display("n1-hdmi-a-1"), None, id="display-crd"),
]


def _serve(fake: FakeKube, res: Any) -> None:
    if res is Display:
        fake.register_crd(testing.display_crd())


def _slice(client: Client, name: str, **kwargs: Any) -> JsonObject:
    return as_dict(client.create(load(ResourceSlice, testing.resource_slice(name, **kwargs))))


@pytest.mark.parametrize(("res", "obj", "namespace"), KINDS)
def test_create_answers_201_and_fills_server_fields(
        fake: FakeKube, client: Client, res: Any, obj: JsonObject, namespace: str | None) -> None:
    _serve(fake, res)
    meta = as_dict(client.create(load(res, obj)))["metadata"]
    assert meta["uid"] and meta["creationTimestamp"] and meta["generation"] == 1
    assert int(meta["resourceVersion"]) == fake.store.resource_version
    assert [r.status for r in fake.request_log() if r.method == "POST"][-1] == 201


@pytest.mark.parametrize(("res", "obj", "namespace"), KINDS)
def test_get_list_replace_patch_delete(
        fake: FakeKube, client: Client, res: Any, obj: JsonObject, namespace: str | None) -> None:
    _serve(fake, res)
    name = obj["metadata"]["name"]
    created = as_dict(client.create(load(res, obj)))
    got = as_dict(client.get(res, name, namespace=namespace))
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    assert name in names(client.list(res, namespace=namespace))

    got["metadata"]["labels"] = {"stage": "replaced"}
    replaced = as_dict(client.replace(load(res, got)))
    assert int(replaced["metadata"]["resourceVersion"]) > int(
        created["metadata"]["resourceVersion"])

    merged = as_dict(client.patch(res, name, {"metadata": {"annotations": {"a": "1"}}},
                                  namespace=namespace, patch_type=PatchType.MERGE))
    assert merged["metadata"]["labels"] == {"stage": "replaced"}
    assert merged["metadata"]["annotations"] == {"a": "1"}
    ops = [{"op": "add", "path": "/metadata/labels/extra", "value": "x"},
           {"op": "remove", "path": "/metadata/annotations/a"}]
    patched = as_dict(client.patch(res, name, ops, namespace=namespace,
                                   patch_type=PatchType.JSON))
    assert patched["metadata"]["labels"] == {"stage": "replaced", "extra": "x"}
    assert not patched["metadata"].get("annotations")

    client.delete(res, name, namespace=namespace)
    with pytest.raises(ApiError) as err:
        client.get(res, name, namespace=namespace)
    assert (failure(err.value)["code"], failure(err.value)["reason"]) == (404, "NotFound")


def test_resource_version_is_global_and_lists_carry_it(client: Client) -> None:
    a = _slice(client, "a")
    n = as_dict(client.create(load(Node, testing.node("n1"))))
    b = _slice(client, "b")
    rvs = [int(o["metadata"]["resourceVersion"]) for o in (a, n, b)]
    assert rvs == sorted(rvs) and len(set(rvs)) == 3
    listed = client.list(ResourceSlice)
    assert names(listed) == ["a", "b"]
    assert listed.resourceVersion == str(rvs[-1])


def test_list_pages_with_limit_and_continue(fake: FakeKube, client: Client) -> None:
    for name in ("a", "b", "c", "d", "e"):
        _slice(client, name)
    assert names(client.list(ResourceSlice, chunk_size=2)) == ["a", "b", "c", "d", "e"]
    pages = [r for r in fake.request_log() if r.method == "GET" and r.param("limit") == "2"]
    assert len(pages) == 3 and pages[1].param("continue")


def test_generate_name_gets_a_random_suffix(client: Client) -> None:
    obj = testing.resource_slice("")
    obj["metadata"] = {"generateName": "n1-display-"}
    name = str(as_dict(client.create(load(ResourceSlice, obj)))["metadata"]["name"])
    suffix = name.removeprefix("n1-display-")
    assert len(suffix) == 5 and set(suffix) <= set("bcdfghjklmnpqrstvwxz2456789")


def test_generation_moves_with_spec_not_with_metadata(client: Client) -> None:
    _slice(client, "a")
    labelled = client.patch(ResourceSlice, "a", {"metadata": {"labels": {"x": "y"}}},
                            patch_type=PatchType.MERGE)
    assert as_dict(labelled)["metadata"]["generation"] == 1
    bumped = client.patch(ResourceSlice, "a", {"spec": {"pool": {"generation": 2}}},
                          patch_type=PatchType.MERGE)
    assert as_dict(bumped)["metadata"]["generation"] == 2


def test_update_that_changes_nothing_is_not_a_write(fake: FakeKube, client: Client) -> None:
    created = _slice(client, "a")
    events = len(fake.events)
    again = as_dict(client.replace(load(ResourceSlice, created)))
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert len(fake.events) == events


def _stale_replace(client: Client) -> None:
    obj = testing.resource_slice("a")
    obj["metadata"]["resourceVersion"] = "1"
    client.replace(load(ResourceSlice, obj))


def _stale_merge_patch(client: Client) -> None:
    client.patch(ResourceSlice, "a", {"metadata": {"resourceVersion": "1", "labels": {"x": "y"}}},
                 patch_type=PatchType.MERGE)


def _stale_json_patch(client: Client) -> None:
    client.patch(ResourceSlice, "a", [{"op": "replace", "path": "/metadata/resourceVersion",
                                       "value": "1"}], patch_type=PatchType.JSON)


@pytest.mark.parametrize("write", [_stale_replace, _stale_merge_patch, _stale_json_patch],
                         ids=["replace", "merge-patch", "json-patch"])
def test_stale_resource_version_is_a_conflict(client: Client,
                                              write: Callable[[Client], None]) -> None:
    _slice(client, "a")
    with pytest.raises(ApiError) as err:
        write(client)
    status = failure(err.value)
    assert (status["code"], status["reason"]) == (409, "Conflict")
    assert status["message"] == (
        'Operation cannot be fulfilled on resourceslices.resource.k8s.io "a": the object has been '
        "modified; please apply your changes to the latest version and try again")
    assert status["details"] == {"name": "a", "group": "resource.k8s.io", "kind": "resourceslices"}


def test_custom_resources_refuse_an_update_without_resource_version(
        fake: FakeKube, client: Client) -> None:
    fake.register_crd(testing.display_crd())
    client.create(load(Display, testing.display("d")))
    with pytest.raises(ApiError) as err:
        client.replace(load(Display, testing.display("d", mode="preferred")))
    status = failure(err.value)
    assert status["code"] == 422
    assert status["details"]["causes"][0]["field"] == "metadata.resourceVersion"


def test_status_on_create_follows_the_kind(client: Client) -> None:
    claim = testing.resource_claim("c")
    claim["status"] = {"reservedFor": [{"resource": "pods", "name": "p", "uid": "1"}]}
    assert "status" not in as_dict(client.create(load(ResourceClaim, claim)))
    pod = testing.pod("p")
    pod["status"] = {"phase": "Running"}
    assert as_dict(client.create(load(Pod, pod)))["status"] == {"phase": "Pending"}
    node = testing.node("n1")
    node["status"] = {"capacity": {"cpu": "2"}}
    assert as_dict(client.create(load(Node, node)))["status"] == {"capacity": {"cpu": "2"}}


ALLOCATION = {"allocation": {"devices": {"results": [{
    "request": "screen", "driver": "display.liken.sh", "pool": "n1",
    "device": "card0-hdmi-a-1"}]}}}


def test_main_update_keeps_status_and_status_update_keeps_spec(client: Client) -> None:
    client.create(load(ResourceClaim, testing.resource_claim("c")))
    with_status = as_dict(client.patch(ResourceClaim.Status, "c", {"status": ALLOCATION},
                                       namespace="default", patch_type=PatchType.MERGE))
    assert with_status["status"] == ALLOCATION

    main = as_dict(client.patch(ResourceClaim, "c",
                                {"metadata": {"labels": {"l": "1"}}, "status": None},
                                namespace="default", patch_type=PatchType.MERGE))
    assert main["metadata"]["labels"] == {"l": "1"}
    assert main["status"] == ALLOCATION

    main["spec"]["devices"]["requests"][0]["name"] = "changed"
    main["status"] = {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u1"}]}
    only_status = as_dict(client.replace(load(ResourceClaim.Status, main), "c",
                                         namespace="default"))
    assert only_status["spec"]["devices"]["requests"][0]["name"] == "screen"
    assert only_status["status"] == {"reservedFor": [{"resource": "pods", "name": "p",
                                                      "uid": "u1"}]}


def test_custom_resource_status_subresource(fake: FakeKube, client: Client) -> None:
    fake.register_crd(testing.display_crd())
    obj = testing.display("d")
    obj["status"] = {"connected": True}
    created = as_dict(client.create(load(Display, obj)))
    assert "status" not in created  # a create drops status when the CRD has the subresource
    updated = as_dict(client.patch(Display.Status, "d", {"status": {"connected": True},
                                                         "spec": {"mode": "preferred"}},
                                   patch_type=PatchType.MERGE))
    assert updated["status"] == {"connected": True}
    assert "mode" not in updated["spec"] and updated["metadata"]["generation"] == 1


def test_apply_creates_then_merges(fake: FakeKube, client: Client) -> None:
    first = load(ResourceSlice, testing.resource_slice("a", labels={"keep": "1"}))
    client.apply(first, field_manager="publisher")
    assert [r.status for r in fake.request_log() if r.method == "PATCH"] == [201]
    again = load(ResourceSlice, testing.resource_slice("a", labels={"new": "2"}))
    applied = as_dict(client.apply(again, field_manager="publisher"))
    # The approximation: no field ownership, so the label the manager stopped sending stays.
    assert applied["metadata"]["labels"] == {"keep": "1", "new": "2"}


def test_strategic_merge_is_a_merge_patch_that_replaces_lists(client: Client) -> None:
    client.create(load(Pod, testing.pod("p", containers=("a", "b"))))
    patched = client.patch(Pod, "p", {"spec": {"containers": [{"name": "a", "image": "x:2"}]}},
                           namespace="default")
    assert [c["name"] for c in as_dict(patched)["spec"]["containers"]] == ["a"]


@pytest.mark.parametrize(("labels", "expected"), [
    ({"app": "display"}, ["a", "b"]),
    ({"app": operators.not_equal("display")}, ["c", "d"]),
    ({"app": ("display", "other")}, ["a", "b", "c"]),
    ({"app": operators.not_in(["display"])}, ["c", "d"]),
    ({"tier": None}, ["b"]),
    ({"tier": operators.not_exists()}, ["a", "c", "d"]),
    ({"app": "display", "tier": operators.not_exists()}, ["a"]),
], ids=["equal", "not-equal", "in", "notin", "exists", "not-exists", "and"])
def test_label_selectors(client: Client, labels: JsonObject, expected: list[str]) -> None:
    for name, lab in (("a", {"app": "display"}), ("b", {"app": "display", "tier": "x"}),
                      ("c", {"app": "other"}), ("d", {})):
        _slice(client, name, labels=lab)
    assert names(client.list(ResourceSlice, labels=labels)) == expected


@pytest.mark.parametrize(("fields", "expected"), [
    ({"spec.nodeName": "n1"}, ["a", "c"]),
    ({"spec.driver": "other.example.com"}, ["c"]),
    ({"spec.nodeName": "n1", "spec.driver": "display.liken.sh"}, ["a"]),
    ({"metadata.name": "b"}, ["b"]),
], ids=["node", "driver", "node-and-driver", "name"])
def test_field_selectors_on_slices(client: Client, fields: JsonObject,
                                   expected: list[str]) -> None:
    for name, node, driver in (("a", "n1", "display.liken.sh"), ("b", "n2", "display.liken.sh"),
                               ("c", "n1", "other.example.com")):
        _slice(client, name, node=node, driver=driver)
    assert names(client.list(ResourceSlice, fields=fields)) == expected


@pytest.mark.parametrize("label", ["spec.pool.name", "metadata.namespace", "spec.devices"])
def test_slices_refuse_fields_the_apiserver_does_not_index(client: Client, label: str) -> None:
    with pytest.raises(ApiError) as err:
        list(client.list(ResourceSlice, fields={label: "n1"}))
    status = failure(err.value)
    assert (status["code"], status["reason"]) == (400, "BadRequest")
    assert label in status["message"]


def test_field_selectors_on_pods_and_custom_selectable_fields(fake: FakeKube,
                                                              client: Client) -> None:
    client.create(load(Pod, testing.pod("on-n1", node_name="n1")))
    client.create(load(Pod, testing.pod("on-n2", node_name="n2")))
    assert names(client.list(Pod, namespace="default", fields={"spec.nodeName": "n1"})) == [
        "on-n1"]
    fake.register_crd(testing.display_crd())
    client.create(load(Display, testing.display("a", node="n1")))
    client.create(load(Display, testing.display("b", node="n2")))
    assert names(client.list(Display, fields={"spec.node": "n2"})) == ["b"]


def test_delete_answers_the_object_or_a_success_status(fake: FakeKube, client: Client) -> None:
    _slice(client, "a")
    node = as_dict(client.create(load(Node, testing.node("n1"))))
    deleted_slice = testing.call(fake.url, "DELETE", "/apis/resource.k8s.io/v1/resourceslices/a")
    assert (deleted_slice.code, deleted_slice.body["kind"]) == (200, "ResourceSlice")
    deleted_node = testing.call(fake.url, "DELETE", "/api/v1/nodes/n1")
    assert deleted_node.body["status"] == "Success"
    assert deleted_node.body["details"] == {"name": "n1", "kind": "nodes",
                                            "uid": node["metadata"]["uid"]}


def test_deletecollection_with_a_selector(fake: FakeKube, client: Client) -> None:
    for name, node in (("a", "n1"), ("b", "n2"), ("c", "n1")):
        _slice(client, name, node=node)
    reply = testing.call(fake.url, "DELETE",
                         "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dn1")
    assert reply.body["kind"] == "ResourceSliceList"
    assert [i["metadata"]["name"] for i in reply.body["items"]] == ["a", "c"]
    assert names(client.list(ResourceSlice)) == ["b"]


def test_finalizers_hold_a_deleted_object_until_removed(client: Client) -> None:
    obj = testing.resource_slice("a")
    obj["metadata"]["finalizers"] = ["display.liken.sh/cleanup"]
    client.create(load(ResourceSlice, obj))
    client.delete(ResourceSlice, "a")
    assert as_dict(client.get(ResourceSlice, "a"))["metadata"]["deletionTimestamp"]
    client.patch(ResourceSlice, "a", {"metadata": {"finalizers": None}},
                 patch_type=PatchType.MERGE)
    with pytest.raises(ApiError) as err:
        client.get(ResourceSlice, "a")
    assert failure(err.value)["code"] == 404


@pytest.mark.parametrize(("cascade", "left"), [(None, []), (CascadeType.ORPHAN, ["n1-display"])],
                         ids=["background", "orphan"])
def test_deleting_an_owner_collects_its_dependents(client: Client, cascade: CascadeType | None,
                                                   left: list[str]) -> None:
    node = as_dict(client.create(load(Node, testing.node("n1"))))
    obj = testing.resource_slice("n1-display")
    obj["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": "n1",
                                           "uid": node["metadata"]["uid"]}]
    client.create(load(ResourceSlice, obj))
    client.delete(Node, "n1", cascade=cascade)
    assert names(client.list(ResourceSlice)) == left


def test_namespaces_must_exist_and_take_their_objects_along(client: Client) -> None:
    with pytest.raises(ApiError) as err:
        client.create(load(ResourceClaim, testing.resource_claim("c", namespace="kiosk")))
    assert failure(err.value)["message"] == 'namespaces "kiosk" not found'
    client.create(load(Namespace, {"metadata": {"name": "kiosk"}}))
    client.create(load(ResourceClaim, testing.resource_claim("c", namespace="kiosk")))
    client.delete(Namespace, "kiosk")
    assert names(client.list(ResourceClaim, namespace="*")) == []


def test_crd_created_over_the_api_is_served_and_its_deletion_removes_the_kind(
        fake: FakeKube, client: Client) -> None:
    client.create(load(CustomResourceDefinition, testing.display_crd()))
    client.create(load(Display, testing.display("d")))
    crd = as_dict(client.get(CustomResourceDefinition, "displays.display.liken.sh"))
    assert {c["type"]: c["status"] for c in crd["status"]["conditions"]}["Established"] == "True"
    client.delete(CustomResourceDefinition, "displays.display.liken.sh")
    gone = testing.call(fake.url, "GET", "/apis/display.liken.sh/v1alpha1/displays")
    assert gone.code == 404
    assert [e.type for e in fake.events if e.kind == ("display.liken.sh", "displays")] == [
        "ADDED", "DELETED"]


def test_dry_run_stores_nothing(client: Client) -> None:
    client.create(load(ResourceSlice, testing.resource_slice("a")), dry_run=True)
    assert names(client.list(ResourceSlice)) == []


def test_python_api_reads_and_seeds_objects(fake: FakeKube, client: Client) -> None:
    fake.create(testing.resource_slice("seeded"))
    assert as_dict(client.get(ResourceSlice, "seeded"))["spec"]["driver"] == "display.liken.sh"
    stored = fake.get("resource.k8s.io/v1", "ResourceSlice", "seeded")
    assert stored is not None and stored["metadata"]["generation"] == 1
    assert [o["metadata"]["name"] for o in fake.objects("v1", "Namespace")] == [
        "default", "kube-node-lease", "kube-public", "kube-system"]


SLICES = "/apis/resource.k8s.io/v1/resourceslices"


@pytest.mark.parametrize(("method", "path", "body", "content_type", "code", "reason"), [
    ("GET", f"{SLICES}/missing", None, "application/json", 404, "NotFound"),
    ("GET", "/apis/resource.k8s.io/v1/widgets", None, "application/json", 404, "NotFound"),
    ("POST", f"{SLICES}/a", testing.resource_slice("a"), "application/json", 405,
     "MethodNotAllowed"),
    ("GET", "/apis/authentication.k8s.io/v1/tokenreviews", None, "application/json", 405,
     "MethodNotAllowed"),
    ("PATCH", f"{SLICES}/a", {"metadata": {}}, "text/plain", 415, "UnsupportedMediaType"),
    ("POST", SLICES, testing.resource_slice("a"), "text/plain", 415, "UnsupportedMediaType"),
    ("POST", SLICES, testing.resource_slice("Bad_Name"), "application/json", 422, "Invalid"),
    ("POST", SLICES, b"{not json", "application/json", 400, "BadRequest"),
    ("GET", f"{SLICES}?labelSelector=a+in+()", None, "application/json", 400, "BadRequest"),
], ids=["missing-object", "unknown-resource", "post-to-item", "get-create-only", "patch-media",
        "post-media", "invalid-name", "bad-json", "bad-selector"])
def test_failures_are_status_bodies(fake: FakeKube, method: str, path: str, body: object,
                                    content_type: str, code: int, reason: str) -> None:
    reply = testing.call(fake.url, method, path, body, content_type=content_type)
    assert (reply.code, reply.body["kind"], reply.body["status"]) == (code, "Status", "Failure")
    assert (reply.body["code"], reply.body["reason"]) == (code, reason)
    assert reply.body["message"]
    assert reply.headers["Content-Type"] == "application/json"


def test_lightkube_sees_status_details(client: Client) -> None:
    with pytest.raises(ApiError) as missing:
        client.get(ResourceSlice, "missing")
    assert failure(missing.value) == {
        "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure", "code": 404,
        "reason": "NotFound", "message": 'resourceslices.resource.k8s.io "missing" not found',
        "details": {"name": "missing", "group": "resource.k8s.io", "kind": "resourceslices"}}
    _slice(client, "a")
    with pytest.raises(ApiError) as exists:
        _slice(client, "a")
    assert (failure(exists.value)["code"], failure(exists.value)["reason"]) == (409,
                                                                                "AlreadyExists")
    with pytest.raises(ApiError) as invalid:
        _slice(client, "UPPER")
    status = failure(invalid.value)
    assert (status["code"], status["reason"]) == (422, "Invalid")
    assert status["details"]["kind"] == "ResourceSlice"
    assert [c["field"] for c in status["details"]["causes"]] == ["metadata.name"]
