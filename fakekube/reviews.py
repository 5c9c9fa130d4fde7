"""TokenReview and SubjectAccessReview as kube-apiserver answers them. A TokenReview asks the
`Policy`, which stands in for the apiserver's authenticators: the tokens the fake issued or a test
added, each mapped to an identity. A SubjectAccessReview asks the fake's one authorizer
(`fakekube.rbac`: the RBAC objects in the store), the same that decides requests when the fake
authorizes them, so a review and a request always agree.

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
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """The user's `extra` as a TokenReview shows it: a ServiceAccount token's credential id,
    and the pod and node it is bound to."""

    def extra_value(self, key: str) -> str | None:
        return next((values[0] for k, values in self.extra if k == key and values), None)


class Policy:
    """Who a token is (authentication only: what they may do is RBAC's). Safe to change while
    the server runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens: dict[str, Identity] = {}
        # What the API server itself answers to: a review with no spec.audiences asks for these.
        self.api_audiences: tuple[str, ...] = (DEFAULT_AUDIENCE,)

    def add_token(self, token: str, username: str, *, uid: str = "",
                  groups: tuple[str, ...] = (),
                  audiences: tuple[str, ...] | None = None,
                  expires_at: float | None = None,
                  extra: tuple[tuple[str, tuple[str, ...]], ...] = ()) -> None:
        """A token issued for `audiences` (the API server's own when None), valid until
        `expires_at` (seconds since the epoch; None: for ever)."""
        with self._lock:
            self._tokens[token] = Identity(username, uid, groups,
                                           audiences or self.api_audiences, expires_at, extra)

    def identity(self, token: str) -> Identity | None:
        """Who the token is, or None for a token never issued or expired."""
        with self._lock:
            who = self._tokens.get(token)
        if who is not None and who.expires_at is not None and time.time() >= who.expires_at:
            return None
        return who


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
            if who.extra:
                user["extra"] = {k: list(v) for k, v in who.extra}
            result = {"authenticated": True, "user": user, "audiences": granted}
    return {**body, "metadata": body.get("metadata") or {}, "status": result}


def access_review(authorizer: Authorizer, body: JsonObject) -> JsonObject:
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
    user = str(spec.get("user") or "")
    groups = tuple(spec.get("groups") or ())
    decision = authorizer.authorize(user, groups, review_attributes(spec))
    result: JsonObject = {"allowed": decision.allowed}
    if decision.reason:
        result["reason"] = decision.reason
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
