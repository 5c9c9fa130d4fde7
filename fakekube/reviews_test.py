"""TokenReview and SubjectAccessReview through lightkube: tokens from the policy, access from
RBAC (the fake's one authorizer) also when the fake does not authorize requests."""

from __future__ import annotations

from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.resources.authentication_v1 import TokenReview
from lightkube.resources.authorization_v1 import SubjectAccessReview
from lightkube.resources.rbac_authorization_v1 import ClusterRole, RoleBinding

from fakekube.grants import Grant
from fakekube.server import FakeKube
from fakekube.status import ApiFailure
from fakekube.testing import as_dict, failure, load

JsonObject = dict[str, Any]


def _token_review(client: Client, token: str, audiences: list[str] | None = None) -> JsonObject:
    spec: JsonObject = {"token": token}
    if audiences is not None:
        spec["audiences"] = audiences
    result: JsonObject = as_dict(client.create(load(TokenReview, {"spec": spec})))["status"]
    return result


def test_known_token_authenticates_as_its_user(fake: FakeKube, client: Client) -> None:
    fake.policy.add_token("t0k3n", "system:serviceaccount:kiosk:viewer", uid="u1",
                          groups=("system:serviceaccounts",))
    assert _token_review(client, "t0k3n") == {
        "authenticated": True,
        "user": {"username": "system:serviceaccount:kiosk:viewer", "uid": "u1",
                 "groups": ["system:serviceaccounts"]},
        "audiences": ["https://kubernetes.default.svc.cluster.local"]}
    assert [r.status for r in fake.request_log()] == [201]


@pytest.mark.parametrize(("token", "audiences"), [("unknown", None), ("t0k3n", ["capture"])],
                         ids=["unknown-token", "wrong-audience"])
def test_other_tokens_do_not_authenticate(fake: FakeKube, client: Client, token: str,
                                          audiences: list[str] | None) -> None:
    fake.policy.add_token("t0k3n", "alice", audiences=("https://kubernetes.default.svc",))
    result = _token_review(client, token, audiences)
    assert not result.get("authenticated")
    assert "invalid bearer token" in result["error"]


def _access_review(client: Client, user: str, name: str, *, groups: tuple[str, ...] = (),
                   namespace: str = "") -> JsonObject:
    spec = {"user": user, "groups": list(groups), "resourceAttributes": {
        "verb": "get", "group": "display.liken.sh", "resource": "displays", "name": name,
        "namespace": namespace}}
    result: JsonObject = as_dict(client.create(load(SubjectAccessReview, {"spec": spec})))[
        "status"]
    return result


def test_access_reviews_follow_the_grants(fake: FakeKube, client: Client) -> None:
    fake.allow("get", "displays", user="alice", api_group="display.liken.sh",
               name="n1-hdmi-a-1")
    fake.allow("*", "displays", group="screen-admins", api_group="display.liken.sh")
    assert _access_review(client, "alice", "n1-hdmi-a-1")["allowed"] is True
    assert _access_review(client, "alice", "n1-dp-1")["allowed"] is False
    assert _access_review(client, "bob", "n1-dp-1")["allowed"] is False
    assert _access_review(client, "bob", "n1-dp-1", groups=("screen-admins",))["allowed"] is True


def test_an_access_review_without_a_subject_is_invalid(client: Client) -> None:
    with pytest.raises(ApiError) as err:
        client.create(load(SubjectAccessReview, {"spec": {"resourceAttributes": {
            "verb": "get", "resource": "displays"}}}))
    status = failure(err.value)
    assert (status["code"], status["reason"]) == (422, "Invalid")
    assert [c["field"] for c in status["details"]["causes"]] == ["spec.user"]


def test_access_reviews_answer_from_roles_applied_through_the_api(client: Client) -> None:
    """Not only `allow`: any RBAC object decides, as on a real apiserver."""
    rbac = "rbac.authorization.k8s.io/v1"
    client.create(load(ClusterRole, {"apiVersion": rbac, "metadata": {"name": "viewer"},
        "rules": [{"apiGroups": ["display.liken.sh"], "resources": ["displays"],
                   "verbs": ["get"]}]}))
    client.create(load(RoleBinding, {"apiVersion": rbac,
        "metadata": {"name": "carol-views", "namespace": "default"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "viewer"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                      "name": "carol"}]}))
    in_default = _access_review(client, "carol", "n1-dp-1", namespace="default")
    assert in_default == {"allowed": True, "reason": 'RBAC: allowed by RoleBinding '
                          '"carol-views/default" of ClusterRole "viewer" to User "carol"'}
    assert _access_review(client, "carol", "n1-dp-1", namespace="kube-system")["allowed"] is False
    assert _access_review(client, "carol", "n1-dp-1")["allowed"] is False


def test_a_non_resource_review_answers_from_rbac(client: Client) -> None:
    def allowed(groups: list[str]) -> bool:
        spec = {"user": "alice", "groups": groups,
                "nonResourceAttributes": {"verb": "get", "path": "/metrics"}}
        answer = as_dict(client.create(load(SubjectAccessReview, {"spec": spec})))
        return bool(answer["status"]["allowed"])

    assert not allowed([])
    assert allowed(["system:masters"])


@pytest.mark.parametrize(
    ("subjects", "message"),
    [({"user": "alice", "group": "admins"}, "exactly one of user= or group="),
     ({}, "exactly one of user= or group="),
     ({"user": ""}, "user must not be empty")],
    ids=["both", "neither", "empty-user"])
def test_a_bad_grant_is_refused_and_leaves_nothing(fake: FakeKube, subjects: dict[str, str],
                                                   message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fake.allow("get", "displays", **subjects)
    assert _granted(fake) == []


def test_a_grant_whose_binding_fails_leaves_no_role(fake: FakeKube,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def without_role_ref(self: Grant, role_name: str) -> JsonObject:
        return {k: v for k, v in real_binding(self, role_name).items() if k != "roleRef"}

    real_binding = Grant.binding
    monkeypatch.setattr(Grant, "binding", without_role_ref)
    with pytest.raises(ApiFailure, match="roleRef"):
        fake.allow("get", "displays", user="alice")
    assert _granted(fake) == []


def test_a_namespaced_grant_is_a_role_and_binding_in_that_namespace(fake: FakeKube,
                                                                    client: Client) -> None:
    name = fake.allow("get", "displays", user="alice", api_group="display.liken.sh",
                      namespace="default", subresource="capture")
    assert name.startswith("fakekube-allow-")
    role = fake.get("rbac.authorization.k8s.io/v1", "Role", name, namespace="default")
    assert role is not None and role["rules"] == [{
        "verbs": ["get"], "apiGroups": ["display.liken.sh"], "resources": ["displays/capture"]}]
    spec = {"user": "alice", "resourceAttributes": {
        "verb": "get", "group": "display.liken.sh", "resource": "displays",
        "subresource": "capture", "namespace": "default", "name": "n1-dp-1"}}
    assert as_dict(client.create(load(SubjectAccessReview, {"spec": spec})))["status"][
        "allowed"] is True


def _granted(fake: FakeKube) -> list[str]:
    """The roles and bindings `allow` left in the store."""
    found = []
    for kind in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
        for obj in fake.objects("rbac.authorization.k8s.io/v1", kind):
            if obj["metadata"]["name"].startswith("fakekube-allow-"):
                found.append(f"{kind}/{obj['metadata']['name']}")
    return found


@pytest.mark.parametrize(
    ("issued", "asked", "expected"),
    [(None, None, ["https://kubernetes.default.svc.cluster.local"]),
     (("display-capture",), ["display-capture"], ["display-capture"]),
     (("display-capture", "other"), ["other", "third"], ["other"]),
     (("display-capture",), None, None),
     (None, ["display-capture"], None)],
    ids=["api-token-for-the-api", "audience-token-for-its-audience", "intersection",
         "audience-token-for-the-api", "api-token-for-an-audience"],
)
def test_audiences_work_as_the_apiserver_s(
    fake: FakeKube, client: Client, issued: tuple[str, ...] | None, asked: list[str] | None,
    expected: list[str] | None,
) -> None:
    """No spec.audiences means the API server's own; a token for another audience fails."""
    fake.policy.add_token("t0k3n", "alice", audiences=issued)
    result = _token_review(client, "t0k3n", asked)
    if expected is None:
        assert not result.get("authenticated")
        assert "is invalid for the target audiences" in result["error"]
    else:
        assert (result["authenticated"], result["audiences"]) == (True, expected)
