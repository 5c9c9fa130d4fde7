"""TokenReview and SubjectAccessReview answers from a policy the test configures, standing in
for the apiserver's authenticators and RBAC: tokens map to users, and allow rules
(user or group, verb, API group, resource, subresource, namespace, name) grant access; anything
not allowed is denied. `*` in a rule (and `None` for namespace and name) matches anything.
Non-resource requests (`nonResourceAttributes`) are always denied. When the fake authorizes
requests (`FakeKube(authorize=True)`), SubjectAccessReview answers from the same RBAC
authorizer as requests do instead, non-resource ones included.

Audiences work as kube-apiserver's: every token the policy knows was issued for audiences
(the API server's own, `DEFAULT_AUDIENCE`, unless `add_token` names others); a review with no
`spec.audiences` asks for the API server's audiences; a token is authenticated only when its
audiences and the asked-for ones meet, and `status.audiences` is where they meet.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fakekube import status
from fakekube.requestinfo import Attributes
from fakekube.status import Cause

if TYPE_CHECKING:
    from fakekube.rbac import Authorizer

JsonObject = dict[str, Any]
DEFAULT_AUDIENCE = "https://kubernetes.default.svc.cluster.local"


@dataclass(frozen=True, slots=True)
class Identity:
    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    audiences: tuple[str, ...] = (DEFAULT_AUDIENCE,)
    expires_at: float | None = None
    """Seconds since the epoch after which the token no longer authenticates (None: never)."""


@dataclass(frozen=True, slots=True)
class Rule:
    verb: str
    resource: str
    user: str | None = None
    group: str | None = None
    api_group: str = ""
    subresource: str = ""
    namespace: str | None = None
    name: str | None = None

    def grants(self, user: str, groups: tuple[str, ...], attrs: JsonObject) -> bool:
        if self.user is not None and self.user != user:
            return False
        if self.group is not None and self.group not in groups:
            return False
        return (
            self.verb in ("*", attrs.get("verb", ""))
            and self.resource in ("*", attrs.get("resource", ""))
            and self.api_group in ("*", attrs.get("group", ""))
            and self.subresource in ("*", attrs.get("subresource", ""))
            and self.namespace in (None, attrs.get("namespace", ""))
            and self.name in (None, attrs.get("name", ""))
        )


class Policy:
    """Who a token is and what they may do. Safe to change while the server runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens: dict[str, Identity] = {}
        self._rules: list[Rule] = []
        # What the API server itself answers to: a review with no spec.audiences asks for these.
        self.api_audiences: tuple[str, ...] = (DEFAULT_AUDIENCE,)

    def add_token(self, token: str, username: str, *, uid: str = "",
                  groups: tuple[str, ...] = (),
                  audiences: tuple[str, ...] | None = None,
                  expires_at: float | None = None) -> None:
        """A token issued for `audiences` (the API server's own when None), valid until
        `expires_at` (seconds since the epoch; None: for ever)."""
        with self._lock:
            self._tokens[token] = Identity(username, uid, groups,
                                           audiences or self.api_audiences, expires_at)

    def allow(self, verb: str, resource: str, *, user: str | None = None,
              group: str | None = None, api_group: str = "", subresource: str = "",
              namespace: str | None = None, name: str | None = None) -> None:
        if (user is None) == (group is None):
            raise ValueError("allow() needs exactly one of user= or group=")
        with self._lock:
            self._rules.append(Rule(verb, resource, user, group, api_group, subresource,
                                    namespace, name))

    def identity(self, token: str) -> Identity | None:
        """Who the token is, or None for a token never issued or expired."""
        with self._lock:
            who = self._tokens.get(token)
        if who is not None and who.expires_at is not None and time.time() >= who.expires_at:
            return None
        return who

    def allowed(self, user: str, groups: tuple[str, ...], attrs: JsonObject) -> bool:
        with self._lock:
            return any(r.grants(user, groups, attrs) for r in self._rules)


def _review_resource(kind: str, group: str, plural: str, body: JsonObject) -> status.Resource:
    return status.Resource(group, plural, kind, str(body.get("metadata", {}).get("name", "")))


def token_review(policy: Policy, body: JsonObject) -> JsonObject:
    spec = body.get("spec") or {}
    token = spec.get("token")
    if not isinstance(token, str) or not token:
        res = _review_resource("TokenReview", "authentication.k8s.io", "tokenreviews", body)
        raise status.invalid(res, [Cause("spec.token", "FieldValueRequired", "Required value")])
    wanted = tuple(spec.get("audiences") or ()) or policy.api_audiences
    who = policy.identity(token)
    result: JsonObject
    if who is None:
        result = {"user": {}, "error": "[invalid bearer token, token lookup failed]"}
    else:
        granted = [a for a in wanted if a in who.audiences]
        if not granted:
            result = {"user": {}, "error": "[invalid bearer token, token audiences "
                                           f"{list(who.audiences)} is invalid for the target "
                                           f"audiences {list(wanted)}]"}
        else:
            user: JsonObject = {"username": who.username, "groups": list(who.groups)}
            if who.uid:
                user["uid"] = who.uid
            result = {"authenticated": True, "user": user, "audiences": granted}
    return {**body, "metadata": body.get("metadata") or {}, "status": result}


def access_review(policy: Policy, body: JsonObject,
                  authorizer: Authorizer | None = None) -> JsonObject:
    """The review's answer: from `authorizer` (RBAC, when the fake authorizes requests, so a
    review and a request agree), else from the policy's allow rules."""
    spec = body.get("spec") or {}
    causes = []
    if not spec.get("user") and not spec.get("groups"):
        causes.append(Cause("spec.user", "FieldValueInvalid",
                            "Invalid value: \"\": at least one of user or group must be specified"))
    if bool(spec.get("resourceAttributes")) == bool(spec.get("nonResourceAttributes")):
        causes.append(Cause("spec.resourceAttributes", "FieldValueInvalid",
                            "exactly one of nonResourceAttributes or resourceAttributes must be "
                            "specified"))
    if causes:
        res = _review_resource("SubjectAccessReview", "authorization.k8s.io",
                               "subjectaccessreviews", body)
        raise status.invalid(res, causes)
    attrs = spec.get("resourceAttributes")
    user = str(spec.get("user") or "")
    groups = tuple(spec.get("groups") or ())
    result: JsonObject
    if authorizer is not None:
        decision = authorizer.authorize(user, groups, review_attributes(spec))
        result = {"allowed": decision.allowed}
        if decision.reason:
            result["reason"] = decision.reason
    elif attrs and policy.allowed(user, groups, attrs):
        result = {"allowed": True, "reason": "allowed by fakekube policy"}
    else:
        result = {"allowed": False, "reason": "no fakekube policy rule allows this request"}
    return {**body, "metadata": body.get("metadata") or {}, "status": result}


def review_attributes(spec: JsonObject) -> Attributes:
    """The attributes a SubjectAccessReview asks about, as the apiserver builds them."""
    res = spec.get("resourceAttributes")
    if res:
        return Attributes(verb=str(res.get("verb") or ""), resource_request=True,
                          api_group=str(res.get("group") or ""),
                          api_version=str(res.get("version") or ""),
                          namespace=str(res.get("namespace") or ""),
                          resource=str(res.get("resource") or ""),
                          subresource=str(res.get("subresource") or ""),
                          name=str(res.get("name") or ""))
    non = spec.get("nonResourceAttributes") or {}
    return Attributes(verb=str(non.get("verb") or ""), resource_request=False,
                      path=str(non.get("path") or ""))
