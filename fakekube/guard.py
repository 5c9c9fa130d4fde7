"""Authentication and authorization of every request, in front of routing, as kube-apiserver's
filters run: a bearer token the fake issued (or a test added to the policy) whose audiences meet
the API server's, else 401; then the authorizer's decision on the request's attributes, else
403 with the apiserver's Status body. Each 401 and 403 is logged on one line and kept as a
`Denial`, so a test or `simnode status` can show what was refused.

A request without a token is the anonymous user (`system:anonymous` in
`system:unauthenticated`), authorized like any other, as a default kube-apiserver
(`--anonymous-auth=true`) does: the bootstrap roles let it read /healthz, /livez, /readyz and
/version and nothing else. A token that is not known is a 401.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

from fakekube import requestinfo, status
from fakekube.rbac import Authorizer
from fakekube.requestinfo import Attributes
from fakekube.reviews import DEFAULT_AUDIENCE, Identity, Policy

log = logging.getLogger(__name__)
JsonObject = dict[str, Any]
_KEPT_DENIALS = 10_000
ANONYMOUS = Identity("system:anonymous", groups=("system:unauthenticated",),
                     audiences=(DEFAULT_AUDIENCE,))


@dataclass(frozen=True, slots=True)
class Denial:
    """One refused request. `at` is seconds since the epoch; `user` is empty for a 401."""

    at: float
    user: str
    verb: str
    api_group: str
    resource: str
    subresource: str
    namespace: str
    name: str
    path: str
    code: int
    message: str = ""

    def line(self) -> str:
        resource = self.resource + (f"/{self.subresource}" if self.subresource else "")
        if self.api_group:
            resource += f".{self.api_group}"
        what = f"{resource} {self.namespace or '-'}/{self.name or '-'}" if self.resource else (
            f"path {self.path}")
        return f"{self.code} user={self.user or '<none>'} verb={self.verb} {what}"

    def to_json(self) -> JsonObject:
        return asdict(self)


class Denials:
    """The most recent denials, oldest first; safe to use from every connection thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: collections.deque[Denial] = collections.deque(maxlen=_KEPT_DENIALS)

    def add(self, denial: Denial) -> None:
        with self._lock:
            self._items.append(denial)

    def items(self) -> list[Denial]:
        with self._lock:
            return list(self._items)


def bearer_token(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer X` header (scheme case-insensitive)."""
    scheme, _, token = (header or "").strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def forbidden_reason(user: str, attrs: Attributes) -> str:
    # The apiserver's forbiddenMessage, which clients and people read.
    if not attrs.resource_request:
        return f'User "{user}" cannot {attrs.verb} path "{attrs.path}"'
    where = (f'in the namespace "{attrs.namespace}"' if attrs.namespace
             else "at the cluster scope")
    return (f'User "{user}" cannot {attrs.verb} resource "{attrs.combined_resource}" in API '
            f'group "{attrs.api_group}" {where}')


class Guard:
    def __init__(self, policy: Policy, authorizer: Authorizer, denials: Denials) -> None:
        self.policy = policy
        self.authorizer = authorizer
        self.denials = denials

    def authenticate(self, header: str | None) -> Identity | None:
        token = bearer_token(header)
        if token is None:
            return ANONYMOUS
        who = self.policy.identity(token)
        if who is None or not set(who.audiences) & set(self.policy.api_audiences):
            return None
        return who

    def check(self, method: str, raw_path: str, header: str | None) -> Identity:
        """The caller, when it may do this; else raises the 401 or 403 ApiFailure."""
        attrs = requestinfo.attributes(method, raw_path)
        who = self.authenticate(header)
        if who is None:
            failure = status.unauthorized()
            self._record(attrs, "", failure)
            raise failure
        decision = self.authorizer.authorize(who.username, who.groups, attrs)
        if decision.allowed:
            return who
        why = forbidden_reason(who.username, attrs)
        if decision.reason:
            why += f": {decision.reason}"
        plural = attrs.resource if attrs.resource_request else ""
        failure = status.forbidden(attrs.api_group, plural, attrs.name, why)
        self._record(attrs, who.username, failure)
        raise failure

    def _record(self, attrs: Attributes, user: str, failure: status.ApiFailure) -> None:
        denial = Denial(at=time.time(), user=user, verb=attrs.verb, api_group=attrs.api_group,
                        resource=attrs.resource, subresource=attrs.subresource,
                        namespace=attrs.namespace, name=attrs.name, path=attrs.path,
                        code=failure.code, message=failure.message)
        self.denials.add(denial)
        log.warning("fakekube denied %s", denial.line())
