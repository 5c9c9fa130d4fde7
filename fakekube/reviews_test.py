"""TokenReview and SubjectAccessReview through lightkube, answered from the test policy."""

from __future__ import annotations

from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.resources.authentication_v1 import TokenReview
from lightkube.resources.authorization_v1 import SubjectAccessReview

from fakekube.reviews import Policy
from fakekube.server import FakeKube
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


def _access_review(client: Client, user: str, name: str, *,
                   groups: tuple[str, ...] = ()) -> JsonObject:
    spec = {"user": user, "groups": list(groups), "resourceAttributes": {
        "verb": "get", "group": "display.liken.sh", "resource": "displays", "name": name}}
    result: JsonObject = as_dict(client.create(load(SubjectAccessReview, {"spec": spec})))[
        "status"]
    return result


def test_access_reviews_follow_the_allow_rules(fake: FakeKube, client: Client) -> None:
    fake.policy.allow("get", "displays", user="alice", api_group="display.liken.sh",
                      name="n1-hdmi-a-1")
    fake.policy.allow("*", "displays", group="screen-admins", api_group="display.liken.sh")
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


def test_allow_needs_exactly_one_subject() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        Policy().allow("get", "displays", user="alice", group="admins")


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
