"""The TokenRequest API: authorized by RBAC as `create serviceaccounts/token`, the token it
issues authenticates as the ServiceAccount (and is authorized as it) until it expires, and the
apiserver's refusals: no such ServiceAccount, too short a life, a bound Pod that is not there
or has another uid."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from fakekube import testing
from fakekube.server import FakeKube
from fakekube.testing import call

JsonObject = dict[str, Any]
RBAC = "/apis/rbac.authorization.k8s.io/v1"
TOKEN = "/api/v1/namespaces/team/serviceaccounts/robot/token"
PODS = "/api/v1/namespaces/team/pods"


def _admin(fake: FakeKube, path: str, body: JsonObject) -> JsonObject:
    reply = call(fake.url, "POST", path, body, token=fake.admin_token)
    assert reply.code == 201, reply.body
    return reply.body


def _grant(fake: FakeKube, name: str, rules: list[JsonObject], subject: JsonObject) -> None:
    _admin(fake, f"{RBAC}/clusterroles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name}, "rules": rules})
    _admin(fake, f"{RBAC}/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name}, "subjects": [subject],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": name}})


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with FakeKube(authorize=True, token_min_expiration_s=1) as server:
        server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
        server.create({"apiVersion": "v1", "kind": "ServiceAccount",
                       "metadata": {"name": "robot", "namespace": "team"}})
        server.create(testing.pod("p1", namespace="team"))
        _grant(fake=server, name="token-issuer", subject={
            "kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "issuer"},
            rules=[{"apiGroups": [""], "resources": ["serviceaccounts/token"],
                    "verbs": ["create"]}])
        _grant(fake=server, name="robot-reads-pods", subject={
            "kind": "ServiceAccount", "name": "robot", "namespace": "team"},
            rules=[{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}])
        yield server


def _request(fake: FakeKube, token: str, spec: JsonObject | None = None,
             path: str = TOKEN) -> testing.RawReply:
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": spec or {}}
    return call(fake.url, "POST", path, body, token=token)


def test_a_token_of_the_service_account_authorized_as_it(fake: FakeKube) -> None:
    reply = _request(fake, fake.user_token("issuer"), {"expirationSeconds": 3607})
    assert reply.code == 201, reply.body
    assert reply.body["kind"] == "TokenRequest"
    assert reply.body["spec"]["expirationSeconds"] == 3607
    assert reply.body["status"]["expirationTimestamp"].endswith("Z")
    token = reply.body["status"]["token"]
    assert call(fake.url, "GET", PODS, token=token).code == 200, "the SA's RBAC allows this"
    assert [(r.path, r.user) for r in fake.request_log()][-2:] == [
        (TOKEN, "issuer"), (PODS, "system:serviceaccount:team:robot")], "the log names them"
    denied = call(fake.url, "GET", "/api/v1/nodes", token=token)
    assert denied.code == 403
    assert 'User "system:serviceaccount:team:robot" cannot list' in denied.body["message"]
    review = _admin(fake, "/apis/authentication.k8s.io/v1/tokenreviews", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {"token": token}})
    assert review["status"]["user"]["username"] == "system:serviceaccount:team:robot"


def test_who_may_not_create_tokens_is_refused_as_the_apiserver_does(fake: FakeKube) -> None:
    reply = _request(fake, fake.user_token("mallory"))
    assert reply.code == 403
    assert reply.body["message"].startswith(
        'serviceaccounts "robot" is forbidden: User "mallory" cannot create resource'
        ' "serviceaccounts/token" in API group "" in the namespace "team"')
    (denial,) = fake.denials()
    assert (denial.verb, denial.resource, denial.subresource) == (
        "create", "serviceaccounts", "token")


def test_the_token_expires(fake: FakeKube) -> None:
    reply = _request(fake, fake.admin_token, {"expirationSeconds": 1})
    token = reply.body["status"]["token"]
    assert call(fake.url, "GET", PODS, token=token).code == 200
    deadline = time.monotonic() + 10
    while call(fake.url, "GET", PODS, token=token).code == 200:
        assert time.monotonic() < deadline, "the token outlived its expirationSeconds"
        time.sleep(0.1)
    assert call(fake.url, "GET", PODS, token=token).code == 401


@pytest.mark.parametrize(
    ("spec", "path", "code", "message"),
    [
        ({}, "/api/v1/namespaces/team/serviceaccounts/ghost/token", 404,
         'serviceaccounts "ghost" not found'),
        ({"expirationSeconds": 599}, TOKEN, 422, "may not specify a duration less than 10"),
        ({"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "gone"}}, TOKEN, 404,
         'pods "gone" not found'),
        ({"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p1", "uid": "x"}},
         TOKEN, 409, "does not match the UID in record"),
    ],
    ids=["no-such-account", "too-short", "bound-pod-missing", "bound-pod-uid"],
)
def test_what_the_apiserver_refuses(spec: JsonObject, path: str, code: int,
                                    message: str) -> None:
    with FakeKube(authorize=True) as fake:  # the real floor of 10 minutes
        fake.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
        fake.create({"apiVersion": "v1", "kind": "ServiceAccount",
                     "metadata": {"name": "robot", "namespace": "team"}})
        fake.create(testing.pod("p1", namespace="team"))
        reply = _request(fake, fake.admin_token, spec, path=path)
    assert reply.code == code, reply.body
    assert message in reply.body["message"]


def test_a_pod_bound_token_for_the_pod_that_is_there(fake: FakeKube) -> None:
    pod = fake.get("v1", "Pod", "p1", namespace="team")
    assert pod is not None
    ref = {"kind": "Pod", "apiVersion": "v1", "name": "p1", "uid": pod["metadata"]["uid"]}
    reply = _request(fake, fake.admin_token, {"boundObjectRef": ref})
    assert reply.code == 201, reply.body
    assert reply.body["spec"]["expirationSeconds"] == 3600, "the apiserver's default"
