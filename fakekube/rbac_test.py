"""RBAC as the fake enforces it with authorize=True: each dimension of a rule allowed and denied,
bindings and subjects, the 403 Status body, SubjectAccessReview agreeing with requests, and the
Node authorizer's own-node checks. Roles and bindings are created through the API with the
admin token, as a cluster owner applies them. With DISPLAY_OPERATOR_REAL_API=1 they run against
a real kube-apiserver 1.37 (`tests.support.realapi`), but for the fake's own records."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from fakekube import testing
from fakekube.server import FakeKube
from fakekube.testing import RawReply
from tests.support import realapi
from tests.support.realapi import ApiServer, real_kube  # noqa: F401 - a fixture

JsonObject = dict[str, Any]
RBAC = "/apis/rbac.authorization.k8s.io/v1"
DISPLAYS = "/apis/display.liken.sh/v1alpha1/displays"


@pytest.fixture
def fake(real_kube: realapi.RealKube | None) -> Iterator[ApiServer]:  # noqa: F811
    with realapi.api_server(real_kube, authorize=True) as server:
        server.register_crd(testing.display_crd())
        server.create(testing.display("d1"))
        server.create(testing.display("d2"))
        for ns in ("team", "other"):
            server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        server.create({**testing.pod("p1", namespace="team", node_name="n1")})
        server.create({**testing.pod("p2", namespace="team", node_name="n2")})
        yield server


def call(fake: ApiServer, method: str, path: str, body: object = None, *, token: str | None = None,
         content_type: str = "application/json") -> RawReply:
    """A raw request to `fake` (trusting its CA when it has one)."""
    ca = fake.ca_pem if fake.url.startswith("https:") else None
    return testing.call(fake.url, method, path, body, token=token, content_type=content_type,
                        ca=ca)


def admin(fake: ApiServer, method: str, path: str, body: object = None) -> RawReply:
    reply = call(fake, method, path, body, token=fake.admin_token)
    assert reply.code < 300, reply.body
    return reply


def cluster_role(fake: ApiServer, name: str, *rules: JsonObject) -> None:
    admin(fake, "POST", f"{RBAC}/clusterroles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name}, "rules": list(rules)})


def bind(fake: ApiServer, name: str, role: str, *subjects: JsonObject,
         namespace: str | None = None, role_kind: str = "ClusterRole") -> None:
    kind = "RoleBinding" if namespace else "ClusterRoleBinding"
    path = f"{RBAC}/namespaces/{namespace}/rolebindings" if namespace else (
        f"{RBAC}/clusterrolebindings")
    admin(fake, "POST", path, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": list(subjects)})


def user(name: str) -> JsonObject:
    return {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": name}


def grant(fake: ApiServer, *rules: JsonObject, who: str = "alice") -> str:
    """A ClusterRole of `rules` bound cluster-wide to user `who`; returns `who`'s token."""
    cluster_role(fake, f"r-{who}", *rules)
    bind(fake, f"b-{who}", f"r-{who}", user(who))
    return fake.user_token(who)


def rule(groups: list[str], resources: list[str], verbs: list[str],
         names: list[str] | None = None) -> JsonObject:
    out: JsonObject = {"apiGroups": groups, "resources": resources, "verbs": verbs}
    if names is not None:
        out["resourceNames"] = names
    return out


def code(fake: ApiServer, token: str, method: str, path: str, body: object = None) -> int:
    return call(fake, method, path, body, token=token).code


def test_verbs_and_the_verb_wildcard(fake: ApiServer) -> None:
    token = grant(fake, rule(["display.liken.sh"], ["displays"], ["get"]))
    assert code(fake, token, "GET", f"{DISPLAYS}/d1") == 200
    assert code(fake, token, "GET", DISPLAYS) == 403  # list is not get
    assert code(fake, token, "DELETE", f"{DISPLAYS}/d1") == 403
    bob = grant(fake, rule(["display.liken.sh"], ["displays"], ["*"]), who="bob")
    assert code(fake, bob, "GET", DISPLAYS) == 200
    assert code(fake, bob, "DELETE", f"{DISPLAYS}/d1") == 200


def test_api_groups(fake: ApiServer) -> None:
    token = grant(fake, rule(["display.liken.sh"], ["*"], ["list"]))
    assert code(fake, token, "GET", DISPLAYS) == 200
    assert code(fake, token, "GET", "/api/v1/nodes") == 403  # core group not granted
    bob = grant(fake, rule(["*"], ["nodes", "displays"], ["list"]), who="bob")
    assert code(fake, bob, "GET", "/api/v1/nodes") == 200
    assert code(fake, bob, "GET", DISPLAYS) == 200


def test_subresources_are_their_own_resource(fake: ApiServer) -> None:
    token = grant(fake, rule(["display.liken.sh"], ["displays"], ["patch"]))
    merge = {"status": {"connected": True}}
    assert call(fake, "PATCH", f"{DISPLAYS}/d1/status", merge, token=token,
                content_type="application/merge-patch+json").code == 403
    assert call(fake, "PATCH", f"{DISPLAYS}/d1", {"metadata": {"labels": {"a": "b"}}},
                token=token, content_type="application/merge-patch+json").code == 200
    bob = grant(fake, rule(["display.liken.sh"], ["displays/status"], ["patch"]), who="bob")
    assert call(fake, "PATCH", f"{DISPLAYS}/d1/status", merge, token=bob,
                content_type="application/merge-patch+json").code == 200
    assert call(fake, "PATCH", f"{DISPLAYS}/d1", {"metadata": {"labels": {"a": "c"}}},
                token=bob, content_type="application/merge-patch+json").code == 403
    carol = grant(fake, rule(["*"], ["*/status"], ["get"]), who="carol")
    assert code(fake, carol, "GET", "/api/v1/namespaces/team/pods/p1/status") == 200
    assert code(fake, carol, "GET", "/api/v1/namespaces/team/pods/p1") == 403


def test_resource_names(fake: ApiServer) -> None:
    token = grant(fake, rule(["display.liken.sh"], ["displays"],
                             ["get", "list", "watch", "create", "delete"], names=["d1"]))
    assert code(fake, token, "GET", f"{DISPLAYS}/d1") == 200
    assert code(fake, token, "GET", f"{DISPLAYS}/d2") == 403
    assert code(fake, token, "GET", DISPLAYS) == 403  # a list names no object
    assert code(fake, token, "GET", f"{DISPLAYS}?fieldSelector=metadata.name%3Dd1") == 200
    assert code(fake, token, "GET", f"{DISPLAYS}?fieldSelector=metadata.name%3Dd2") == 403
    # A create names no object on the URL, so a rule listing names never allows it.
    assert code(fake, token, "POST", DISPLAYS, testing.display("d1")) == 403
    assert code(fake, token, "DELETE", DISPLAYS) == 403  # deletecollection names none either
    assert code(fake, token, "DELETE", f"{DISPLAYS}/d1") == 200


@realapi.fake_only("the fake's own non-resource URLs")
def test_non_resource_urls(fake: ApiServer) -> None:
    token = grant(fake, {"nonResourceURLs": ["/_fakekube/req*"], "verbs": ["get"]})
    assert code(fake, token, "GET", "/_fakekube/requests") == 200
    assert code(fake, token, "GET", "/_fakekube/denials") == 403
    assert code(fake, token, "POST", "/_fakekube/compact") == 403  # verb post not granted
    # The bootstrap policy lets every authenticated user read health and version.
    assert code(fake, token, "GET", "/healthz") == 200
    assert code(fake, token, "GET", "/version") == 200


def test_role_binding_grants_a_cluster_role_in_its_namespace_only(fake: ApiServer) -> None:
    cluster_role(fake, "pod-reader", rule([""], ["pods"], ["get", "list"]))
    bind(fake, "read", "pod-reader", user("alice"), namespace="team")
    token = fake.user_token("alice")
    assert code(fake, token, "GET", "/api/v1/namespaces/team/pods") == 200
    assert code(fake, token, "GET", "/api/v1/namespaces/other/pods") == 403
    assert code(fake, token, "GET", "/api/v1/pods") == 403  # all namespaces is cluster scope


def test_role_and_service_account_subject(fake: ApiServer) -> None:
    admin(fake, "POST", f"{RBAC}/namespaces/team/roles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "pods"}, "rules": [rule([""], ["pods"], ["get"])]})
    # A ServiceAccount subject without a namespace means the binding's namespace.
    bind(fake, "sa", "pods", {"kind": "ServiceAccount", "name": "runner"}, namespace="team",
         role_kind="Role")
    mine = fake.service_account_token("team", "runner")
    same_name_elsewhere = fake.service_account_token("other", "runner")
    assert code(fake, mine, "GET", "/api/v1/namespaces/team/pods/p1") == 200
    assert code(fake, same_name_elsewhere, "GET", "/api/v1/namespaces/team/pods/p1") == 403


def test_group_subject_and_masters(fake: ApiServer) -> None:
    cluster_role(fake, "nodes", rule([""], ["nodes"], ["list"]))
    bind(fake, "ops", "nodes", {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io",
                                "name": "ops"})
    assert code(fake, fake.user_token("dave", ["ops"]), "GET", "/api/v1/nodes") == 200
    assert code(fake, fake.user_token("erin", ["devs"]), "GET", "/api/v1/nodes") == 403
    masters = fake.user_token("frank", ["system:masters"])
    # Not by the cluster-admin binding: system:masters is allowed before RBAC is asked.
    admin(fake, "DELETE", f"{RBAC}/clusterrolebindings/cluster-admin")
    assert code(fake, masters, "DELETE", f"{DISPLAYS}/d2") == 200
    if isinstance(fake, FakeKube):  # the fake's own records
        assert code(fake, masters, "GET", "/fakekube/denials") == 200


def test_forbidden_status_body(fake: ApiServer) -> None:
    token = fake.service_account_token("ns", "sa")
    reply = call(fake, "PATCH", f"{DISPLAYS}/x/status", {"status": {}}, token=token,
                 content_type="application/merge-patch+json")
    assert reply.code == 403
    assert reply.body == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'displays.display.liken.sh "x" is forbidden: User '
                   '"system:serviceaccount:ns:sa" cannot patch resource "displays/status" in '
                   'API group "display.liken.sh" at the cluster scope',
        "reason": "Forbidden",
        "details": {"name": "x", "group": "display.liken.sh", "kind": "displays"},
        "code": 403,
    }
    listed = call(fake, "GET", "/api/v1/namespaces/team/pods", token=token)
    assert listed.body["message"] == (
        'pods is forbidden: User "system:serviceaccount:ns:sa" cannot list resource "pods" in '
        'API group "" in the namespace "team"')
    assert listed.body["details"] == {"kind": "pods"}
    if not isinstance(fake, FakeKube):
        return  # the rest asks for a non-resource URL only the fake serves
    path = call(fake, "POST", "/_fakekube/compact", token=token)
    assert path.body["message"] == (
        'forbidden: User "system:serviceaccount:ns:sa" cannot post path "/_fakekube/compact"')


def test_a_binding_to_a_missing_role_says_so(fake: ApiServer) -> None:
    bind(fake, "dangling", "no-such-role", user("alice"))
    reply = call(fake, "GET", "/api/v1/nodes", token=fake.user_token("alice"))
    assert reply.code == 403
    assert reply.body["message"].endswith(
        ': RBAC: clusterrole.rbac.authorization.k8s.io "no-such-role" not found')


def test_forbidden_comes_before_not_found(fake: ApiServer) -> None:
    token = fake.user_token("alice")
    assert code(fake, token, "GET", "/apis/nothing.example/v1/things") == 403
    assert code(fake, fake.admin_token, "GET", "/apis/nothing.example/v1/things") == 404


def test_unknown_tokens_are_401_and_no_token_is_the_anonymous_user(fake: ApiServer) -> None:
    unauthorized = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "Unauthorized", "reason": "Unauthorized", "code": 401}
    reply = call(fake, "GET", "/api/v1/nodes", token="not-a-token")
    assert (reply.code, reply.body) == (401, unauthorized)
    anonymous = call(fake, "GET", "/api/v1/nodes")
    assert (anonymous.code, anonymous.body["message"]) == (403, (
        'nodes is forbidden: User "system:anonymous" cannot list resource "nodes" in API group '
        '"" at the cluster scope'))
    assert call(fake, "GET", "/healthz").code == 200  # system:public-info-viewer
    # A token issued for another audience is not one for the API server.
    other = fake.service_account_token("team", "runner", audiences=["display-capture"])
    assert code(fake, other, "GET", "/healthz") == 401
    assert code(fake, fake.service_account_token("team", "runner"), "GET", "/healthz") == 200


@realapi.fake_only("the fake's record of denials")
def test_denials_are_kept_and_served_to_admins(fake: ApiServer) -> None:
    token = fake.service_account_token("ns", "sa")
    call(fake, "DELETE", f"{DISPLAYS}/d1", token=token)
    call(fake, "GET", "/api/v1/nodes", token="not-a-token")
    first, second = fake.denials()
    assert (first.user, first.verb, first.api_group, first.resource, first.name, first.code,
            first.path) == ("system:serviceaccount:ns:sa", "delete", "display.liken.sh",
                            "displays", "d1", 403, f"{DISPLAYS}/d1")
    assert (second.user, second.code, second.resource) == ("", 401, "nodes")
    served = call(fake, "GET", "/fakekube/denials", token=fake.admin_token)
    assert [d["code"] for d in served.body["items"]] == [403, 401]
    assert served.body["items"][0]["resource"] == "displays"
    assert code(fake, token, "GET", "/fakekube/denials") == 403
    assert len(fake.denials()) == 3  # the refused look at the denials is one too


def test_service_account_token_review_identity(fake: ApiServer) -> None:
    account = fake.create({"apiVersion": "v1", "kind": "ServiceAccount",
                           "metadata": {"name": "runner", "namespace": "team"}})
    cluster_role(fake, "reviewer", rule(["authentication.k8s.io"], ["tokenreviews"],
                                        ["create"]))
    bind(fake, "reviewer", "reviewer", user("capture"))
    caller = fake.user_token("capture")
    sa_token = fake.service_account_token("team", "runner", audiences=["display-capture"])
    review: JsonObject = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                          "spec": {"token": sa_token, "audiences": ["display-capture"]}}
    reply = call(fake, "POST", "/apis/authentication.k8s.io/v1/tokenreviews", review,
                 token=caller)
    assert reply.code == 201
    credential = reply.body["status"]["user"].pop("extra")
    assert reply.body["status"] == {
        "authenticated": True, "audiences": ["display-capture"],
        "user": {"username": "system:serviceaccount:team:runner",
                 "uid": account["metadata"]["uid"],
                 "groups": ["system:serviceaccounts", "system:serviceaccounts:team",
                            "system:authenticated"]}}
    # The token's id (its JWT's jti), which audit logs show.
    (jti,) = credential.pop("authentication.kubernetes.io/credential-id")
    assert credential == {} and re.fullmatch(r"JTI=[0-9a-f-]{36}", jti)
    review["spec"]["audiences"] = ["elsewhere"]
    reply = call(fake, "POST", "/apis/authentication.k8s.io/v1/tokenreviews", review,
                 token=caller)
    assert reply.body["status"].get("authenticated") is not True


def _review(user: str, groups: list[str], verb: str, resource: str, *, group: str = "",
            subresource: str = "", namespace: str = "", name: str = "") -> JsonObject:
    attrs = {"verb": verb, "group": group, "resource": resource, "subresource": subresource,
             "namespace": namespace, "name": name}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": groups,
                     "resourceAttributes": {k: v for k, v in attrs.items() if v}}}


def test_subject_access_review_agrees_with_requests(fake: ApiServer) -> None:
    token = grant(fake, rule(["display.liken.sh"], ["displays"], ["get"], names=["d1"]),
                  rule([""], ["pods/status"], ["patch"]))
    cases = [
        (("get", "displays"), {"group": "display.liken.sh", "name": "d1"},
         ("GET", f"{DISPLAYS}/d1")),
        (("get", "displays"), {"group": "display.liken.sh", "name": "d2"},
         ("GET", f"{DISPLAYS}/d2")),
        (("list", "displays"), {"group": "display.liken.sh"}, ("GET", DISPLAYS)),
        (("patch", "pods"), {"subresource": "status", "namespace": "team", "name": "p1"},
         ("PATCH", "/api/v1/namespaces/team/pods/p1/status")),
        (("patch", "pods"), {"namespace": "team", "name": "p1"},
         ("PATCH", "/api/v1/namespaces/team/pods/p1")),
    ]
    for (verb, resource), extra, (method, path) in cases:
        answer = admin(fake, "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                       _review("alice", ["system:authenticated"], verb, resource, **extra))
        request = call(fake, method, path, {"metadata": {}}, token=token,
                       content_type="application/merge-patch+json")
        assert answer.body["status"]["allowed"] == (request.code < 400), (verb, extra)
    allowed = admin(fake, "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                    _review("alice", [], "get", "displays", group="display.liken.sh",
                            name="d1"))
    assert allowed.body["status"]["reason"] == (
        'RBAC: allowed by ClusterRoleBinding "b-alice" of ClusterRole "r-alice" to User "alice"')


def test_kubelet_writes_status_of_its_own_pods_only(fake: ApiServer) -> None:
    kubelet = fake.user_token("system:node:n1", ["system:nodes"])
    status = {"status": {"phase": "Running"}}
    merge = "application/merge-patch+json"
    assert call(fake, "PATCH", "/api/v1/namespaces/team/pods/p1/status", status,
                token=kubelet, content_type=merge).code == 200
    reply = call(fake, "PATCH", "/api/v1/namespaces/team/pods/p2/status", status,
                 token=kubelet, content_type=merge)
    assert reply.code == 403
    assert "can only update pod status for pods with spec.nodeName set to itself" in (
        reply.body["message"])
    # Its own pods only, by field selector (AuthorizeNodeWithSelectors).
    assert code(fake, kubelet, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1") == 200
    for path in ("/api/v1/namespaces/team/pods", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn2"):
        refused = call(fake, "GET", path, token=kubelet)
        assert refused.code == 403
        assert refused.body["message"].endswith(
            ": node: can only list/watch pods with spec.nodeName field selector")
    assert code(fake, kubelet, "DELETE", f"{DISPLAYS}/d1") == 403
    # The group is what makes a node: the name alone is just a user.
    impostor = fake.user_token("system:node:n1")
    assert call(fake, "PATCH", "/api/v1/namespaces/team/pods/p1/status", status,
                token=impostor, content_type=merge).code == 403


def test_the_scheduler_has_its_bootstrap_role(fake: ApiServer) -> None:
    scheduler = fake.user_token("system:kube-scheduler")
    assert code(fake, scheduler, "GET", "/apis/resource.k8s.io/v1/resourceslices") == 200
    assert code(fake, scheduler, "DELETE", f"{DISPLAYS}/d1") == 403


@realapi.fake_only("the fake's mode without authorization")
def test_default_fake_allows_everything() -> None:
    with FakeKube() as plain:
        assert call(plain, "GET", "/api/v1/nodes").code == 200
        assert plain.denials() == []
        assert plain.get("rbac.authorization.k8s.io/v1", "ClusterRole", "cluster-admin") is None


def test_bindings_are_validated_and_their_role_ref_is_fixed(fake: ApiServer) -> None:
    def crb(name: str, ref_kind: str, *subjects: JsonObject) -> JsonObject:
        return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": ref_kind,
                            "name": "r"},
                "subjects": list(subjects)}

    path = f"{RBAC}/clusterrolebindings"
    to_role = call(fake, "POST", path, crb("a", "Role", user("alice")),
                   token=fake.admin_token)
    assert to_role.code == 422
    assert [c["field"] for c in to_role.body["details"]["causes"]] == ["roleRef.kind"]
    no_namespace = call(fake, "POST", path,
                        crb("b", "ClusterRole", {"kind": "ServiceAccount", "name": "sa"}),
                        token=fake.admin_token)
    assert [c["field"] for c in no_namespace.body["details"]["causes"]] == [
        "subjects[0].namespace"]
    admin(fake, "POST", path, crb("c", "ClusterRole", user("alice")))
    moved = call(fake, "PATCH", f"{path}/c", {"roleRef": {"name": "other"}},
                 token=fake.admin_token, content_type="application/merge-patch+json")
    assert moved.code == 422
    assert moved.body["message"].endswith(
        'is invalid: roleRef: Invalid value: {"APIGroup":"rbac.authorization.k8s.io",'
        '"Kind":"ClusterRole","Name":"other"}: field is immutable')
    subjects = call(fake, "PATCH", f"{path}/c", {"subjects": [user("bob")]},
                    token=fake.admin_token, content_type="application/merge-patch+json")
    assert subjects.code == 200
