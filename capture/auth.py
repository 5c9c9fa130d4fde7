"""Who may see a screen: a TokenReview for the bearer token, a SubjectAccessReview for the Display.

A caller may capture an output when RBAC lets them `get` the `capture` subresource of that
output's Display (`displays.display.liken.sh`, cluster-scoped). Answers, allowed or not, are
cached for a few seconds per token and per (user, Display), so a live view refreshing every
second costs the apiserver nothing more. No token or a rejected one is
`UnauthenticatedError` (401), a denial is `ForbiddenError` (403), an apiserver that cannot
answer is `ReviewUnavailableError` (503): the caller may retry, and nothing is shown meanwhile.
"""

from __future__ import annotations

import hashlib
import logging
import os
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from libdisplay.display import GROUP, PLURAL

log = logging.getLogger(__name__)

SUBRESOURCE = "capture"
VERB = "get"


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

    async def token_review(self, token: str) -> Mapping[str, Any]: ...

    async def access_review(self, spec: Mapping[str, Any]) -> Mapping[str, Any]: ...


def bearer_token(authorization: str | None) -> str:
    """The token of an `Authorization: Bearer <token>` header."""
    if not authorization:
        raise UnauthenticatedError("no Authorization header: send Authorization: Bearer <token>")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise UnauthenticatedError("Authorization must be Bearer <token>")
    return token.strip()


def user_from_review(status: Mapping[str, Any]) -> User:
    if not status.get("authenticated"):
        raise UnauthenticatedError(f"token rejected: {status.get('error') or 'not authenticated'}")
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


class Reviewer:
    """Authenticate tokens and authorize Displays through `api`, caching answers `ttl_s`."""

    def __init__(
        self, api: ReviewApi, *, ttl_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._api = api
        self._ttl = ttl_s
        self._clock = clock
        self._users: dict[str, tuple[float, User | UnauthenticatedError]] = {}
        self._decisions: dict[tuple[User, str], tuple[float, bool]] = {}

    def _prune(self) -> None:
        now = self._clock()
        self._users = {k: v for k, v in self._users.items() if v[0] > now}
        self._decisions = {k: v for k, v in self._decisions.items() if v[0] > now}

    async def authenticate(self, token: str) -> User:
        key = hashlib.sha256(token.encode()).hexdigest()
        cached = self._users.get(key)
        if cached is None or cached[0] <= self._clock():
            self._prune()
            try:
                answer: User | UnauthenticatedError = user_from_review(
                    await self._api.token_review(token)
                )
            except UnauthenticatedError as exc:
                answer = exc
            cached = (self._clock() + self._ttl, answer)
            self._users[key] = cached
        if isinstance(cached[1], UnauthenticatedError):
            raise cached[1]
        return cached[1]

    async def authorize(self, user: User, display: str) -> None:
        key = (user, display)
        cached = self._decisions.get(key)
        if cached is None or cached[0] <= self._clock():
            status = await self._api.access_review(access_spec(user, display))
            cached = (self._clock() + self._ttl, bool(status.get("allowed")))
            self._decisions[key] = cached
            if not cached[1]:
                log.info("denied %s capture of Display %s: %s", user.username, display,
                         status.get("reason", "no reason given"))
        if not cached[1]:
            raise ForbiddenError(
                f"{user.username} may not {VERB} {PLURAL}/{SUBRESOURCE} of {display}"
            )


SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
_REVIEW_TIMEOUT_S = 10.0


class HttpReviews:
    """ReviewApi over aiohttp: in-cluster (service account token and CA, re-read per call so
    a rotated token is used), a kubeconfig's cluster and user, or a plain-HTTP URL. Transport
    errors and non-201 answers are 503."""

    def __init__(self, kube_url: str | None, *, kubeconfig: Path | None = None,
                 account: Path = SERVICE_ACCOUNT) -> None:
        import aiohttp

        self._account = account
        self._in_cluster = False
        self._token: str | None = None
        ssl_context: ssl.SSLContext | bool = False
        if kube_url is not None:
            self._url = kube_url.rstrip("/")
        elif kubeconfig is not None:
            self._url, self._token, ssl_context = _from_kubeconfig(kubeconfig)
        else:
            host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
            port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
            if not host:
                raise ReviewUnavailableError("not in a cluster: KUBERNETES_SERVICE_HOST is unset")
            self._url = f"https://{host}:{port}" if ":" not in host else f"https://[{host}]:{port}"
            ssl_context = ssl.create_default_context(cafile=os.fspath(account / "ca.crt"))
            self._in_cluster = True
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=_REVIEW_TIMEOUT_S),
            connector=aiohttp.TCPConnector(ssl=ssl_context),
        )

    async def close(self) -> None:
        await self._session.close()

    def _headers(self) -> dict[str, str]:
        if not self._in_cluster:
            return {"Authorization": f"Bearer {self._token}"} if self._token else {}
        try:
            token = (self._account / "token").read_text().strip()
        except OSError as exc:
            raise ReviewUnavailableError(f"cannot read the service account token: {exc}") from exc
        return {"Authorization": f"Bearer {token}"}

    async def _create(self, path: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        import aiohttp

        try:
            async with self._session.post(
                self._url + path, json=body, headers=self._headers()
            ) as response:
                if response.status not in (200, 201):
                    text = (await response.text())[:200]
                    raise ReviewUnavailableError(
                        f"apiserver answered {response.status} to {path}: {text}"
                    )
                answer = await response.json()
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise ReviewUnavailableError(f"apiserver unreachable at {self._url}: {exc!r}") from exc
        status = answer.get("status") if isinstance(answer, dict) else None
        return status if isinstance(status, dict) else {}

    async def token_review(self, token: str) -> Mapping[str, Any]:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": token}}
        return await self._create("/apis/authentication.k8s.io/v1/tokenreviews", body)

    async def access_review(self, spec: Mapping[str, Any]) -> Mapping[str, Any]:
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": dict(spec)}
        return await self._create("/apis/authorization.k8s.io/v1/subjectaccessreviews", body)


def _from_kubeconfig(path: Path) -> tuple[str, str | None, ssl.SSLContext | bool]:
    """URL, bearer token and TLS of a kubeconfig's current context."""
    from libdisplay import kubeconfig

    try:
        creds = kubeconfig.load(path)
        tls = creds.tls()
    except kubeconfig.KubeconfigError as exc:
        raise ReviewUnavailableError(str(exc)) from exc
    return creds.server, creds.token, tls or False
