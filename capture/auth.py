"""Who may see a screen: a TokenReview for the bearer token, a SubjectAccessReview for the Display.

A caller may capture an output when RBAC lets them `get` the `capture` subresource of that
output's Display (`displays.display.liken.sh`, cluster-scoped). Tokens are reviewed for the
capture server's own audience (`display-capture`: `kubectl create token SA --audience
display-capture`) and accepted only when the API server says so in `status.audiences`, so a
token a caller sends here is worth nothing to the API server or to any other service.

Answers, allowed or not, are cached for a few seconds per token and per (user, Display), so a
live view refreshing every second costs the API server nothing more. The caches are LRUs of
bounded size, expired entries are dropped once per TTL, rejected tokens are kept apart from
accepted ones (a flood of garbage evicts no real user), and concurrent reviews of one token or
one (user, Display) share a single call. No token or a rejected one is `UnauthenticatedError`
(401), a denial is `ForbiddenError` (403), an API server that cannot answer is
`ReviewUnavailableError` (503): the caller may retry, and nothing is shown meanwhile.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Generic, Protocol, TypeVar

from libdisplay.display import GROUP, PLURAL
from libdisplay.kube import access as kubeaccess
from libdisplay.kube.errors import ApiCallError

log = logging.getLogger(__name__)

SUBRESOURCE = "capture"
VERB = "get"
AUDIENCE: Final = "display-capture"
CACHE_ENTRIES: Final = 4096
# RFC 6750 b64token: what a bearer token may be made of (a JWT is).
_TOKEN_RE: Final = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


class AuthError(Exception):
    """Base of every error this module raises; `status` is the HTTP answer."""

    status = 500


class UnauthenticatedError(AuthError):
    status = 401


class ForbiddenError(AuthError):
    status = 403


class ReviewUnavailableError(AuthError):
    status = 503


@dataclass(frozen=True, slots=True)
class User:
    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


class ReviewApi(Protocol):
    """The two review calls, as the apiserver answers them (the `status` of each object)."""

    async def token_review(self, token: str, audiences: Sequence[str]) -> Mapping[str, Any]: ...

    async def access_review(self, spec: Mapping[str, Any]) -> Mapping[str, Any]: ...


def bearer_token(authorization: str | None) -> str:
    """The token of an `Authorization: Bearer <token>` header."""
    if not authorization:
        raise UnauthenticatedError("no Authorization header: send Authorization: Bearer <token>")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise UnauthenticatedError("Authorization must be Bearer <token>")
    token = token.strip()
    # Headers arrive decoded with surrogate escapes: a byte that is not ASCII is no token.
    if not _TOKEN_RE.fullmatch(token):
        raise UnauthenticatedError("the bearer token has characters no token has")
    return token


def user_from_review(status: Mapping[str, Any], audience: str = AUDIENCE) -> User:
    """The user a TokenReview's status names, if it authenticated the token for `audience`."""
    if not status.get("authenticated"):
        log.debug("token rejected: %s", status.get("error") or "not authenticated")
        raise UnauthenticatedError(f"token not accepted for audience {audience}")
    if audience not in (status.get("audiences") or ()):
        log.debug("token authenticated for %s, not %s", status.get("audiences"), audience)
        raise UnauthenticatedError(f"token not accepted for audience {audience}")
    user = status.get("user") or {}
    extra = user.get("extra") or {}
    return User(
        username=str(user.get("username", "")),
        uid=str(user.get("uid", "")),
        groups=tuple(user.get("groups") or ()),
        extra=tuple(sorted((key, tuple(values)) for key, values in extra.items())),
    )


def access_spec(user: User, display: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "user": user.username,
        "groups": list(user.groups),
        "resourceAttributes": {
            "group": GROUP,
            "resource": PLURAL,
            "subresource": SUBRESOURCE,
            "verb": VERB,
            "name": display,
        },
    }
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = {key: list(values) for key, values in user.extra}
    return spec


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
T = TypeVar("T")


class Lru(Generic[K, V]):
    """At most `size` answers, each until its expiry; the least recently used goes first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: K, now: float) -> tuple[V] | None:
        """(value,) while `key` is cached and live, else None."""
        item = self._items.get(key)
        if item is None or item[0] <= now:
            return None
        self._items.move_to_end(key)
        return (item[1],)

    def put(self, key: K, value: V, expires: float) -> None:
        self._items[key] = (expires, value)
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def prune(self, now: float) -> None:
        for key in [k for k, (expires, _) in self._items.items() if expires <= now]:
            del self._items[key]


class Shared(Generic[K, T]):
    """One call per key at a time: later callers of a key in flight await the first's result.
    A caller that is cancelled leaves the call running for the others."""

    def __init__(self) -> None:
        self._running: dict[K, asyncio.Task[T]] = {}

    def __len__(self) -> int:
        return len(self._running)

    async def run(self, key: K, call: Callable[[], Awaitable[T]]) -> T:
        task = self._running.get(key)
        if task is None:
            task = asyncio.ensure_future(call())
            self._running[key] = task
            task.add_done_callback(lambda done: self._finished(key, done))
        return await asyncio.shield(task)

    def _finished(self, key: K, task: asyncio.Task[T]) -> None:
        if self._running.get(key) is task:
            del self._running[key]
        if not task.cancelled():
            task.exception()  # retrieved here, so a call whose callers all left logs nothing


def token_key(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Reviewer:
    """Authenticate tokens and authorize Displays through `api`, caching answers `ttl_s`."""

    def __init__(
        self, api: ReviewApi, *, ttl_s: float, audience: str = AUDIENCE,
        max_entries: int = CACHE_ENTRIES, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._ttl = ttl_s
        self.audience = audience
        self._clock = clock
        self._users: Lru[str, User] = Lru(max_entries)
        self._rejected: Lru[str, UnauthenticatedError] = Lru(max_entries)
        self._decisions: Lru[tuple[User, str], bool] = Lru(max_entries)
        self._token_reviews: Shared[str, User | UnauthenticatedError] = Shared()
        self._access_reviews: Shared[tuple[User, str], bool] = Shared()
        self._next_prune = clock() + ttl_s

    def _now(self) -> float:
        """The time, dropping expired answers once per TTL (not on every miss)."""
        now = self._clock()
        if now >= self._next_prune:
            for cache in (self._users, self._rejected, self._decisions):
                cache.prune(now)
            self._next_prune = now + self._ttl
        return now

    def cached_sizes(self) -> tuple[int, int, int]:
        """Entries held: accepted tokens, rejected tokens, decisions."""
        return len(self._users), len(self._rejected), len(self._decisions)

    def knows(self, token: str) -> bool:
        """Whether `token` is an accepted token cached now (answered without a review)."""
        return self._users.get(token_key(token), self._now()) is not None

    async def authenticate(self, token: str) -> User:
        key = token_key(token)
        now = self._now()
        if (user := self._users.get(key, now)) is not None:
            return user[0]
        if (rejected := self._rejected.get(key, now)) is not None:
            raise rejected[0]
        answer = await self._token_reviews.run(key, lambda: self._review_token(key, token))
        if isinstance(answer, UnauthenticatedError):
            raise answer
        return answer

    async def _review_token(self, key: str, token: str) -> User | UnauthenticatedError:
        status = await self._api.token_review(token, [self.audience])
        expires = self._clock() + self._ttl
        try:
            user = user_from_review(status, self.audience)
        except UnauthenticatedError as exc:
            self._rejected.put(key, exc, expires)
            return exc
        self._users.put(key, user, expires)
        return user

    async def authorize(self, user: User, display: str) -> None:
        key = (user, display)
        cached = self._decisions.get(key, self._now())
        allowed = cached[0] if cached is not None else await self._access_reviews.run(
            key, lambda: self._review_access(user, display)
        )
        if not allowed:
            raise ForbiddenError(
                f"{user.username} may not {VERB} {PLURAL}/{SUBRESOURCE} of {display}"
            )

    async def _review_access(self, user: User, display: str) -> bool:
        status = await self._api.access_review(access_spec(user, display))
        allowed = bool(status.get("allowed"))
        self._decisions.put((user, display), allowed, self._clock() + self._ttl)
        if not allowed:
            log.info("denied %s capture of Display %s: %s", user.username, display,
                     status.get("reason", "no reason given"))
        return allowed


_REVIEW_TIMEOUT_S = 10.0


class HttpReviews:
    """ReviewApi over the API server `libdisplay.kube.access` finds: `kube_url` (plain HTTP, a
    simulated node's fake), else a kubeconfig, else the pod's service account (its CA
    verifies the server; its token is re-read when rotated). Any failed call is 503, its
    `ApiCallError` the cause. `account` is for tests; the binary reads the kubelet's mount."""

    def __init__(self, kube_url: str | None, *, kubeconfig: Path | None = None,
                 account: Path = kubeaccess.SERVICE_ACCOUNT) -> None:
        from libdisplay.kube.aiohttp_client import AioKube

        try:
            endpoint = kubeaccess.discover(api_server=kube_url, kubeconfig=kubeconfig,
                                           account_dir=account)
            self._api = AioKube(endpoint, timeout_s=_REVIEW_TIMEOUT_S)
        except ApiCallError as exc:
            raise ReviewUnavailableError(str(exc)) from exc

    async def close(self) -> None:
        await self._api.close()

    async def _create(self, path: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        try:
            answer = await self._api.post_json(path, body)
        except ApiCallError as exc:
            if exc.code is not None:
                raise ReviewUnavailableError(f"apiserver answered {exc}") from exc
            raise ReviewUnavailableError(
                f"apiserver unreachable at {self._api.endpoint.url}: {exc}"
            ) from exc
        status = answer.get("status")
        return status if isinstance(status, dict) else {}

    async def token_review(self, token: str, audiences: Sequence[str]) -> Mapping[str, Any]:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": token, "audiences": list(audiences)}}
        return await self._create("/apis/authentication.k8s.io/v1/tokenreviews", body)

    async def access_review(self, spec: Mapping[str, Any]) -> Mapping[str, Any]:
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": dict(spec)}
        return await self._create("/apis/authorization.k8s.io/v1/subjectaccessreviews", body)
