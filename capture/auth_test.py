"""Reviews: bearer parsing, audiences, the answers' mapping to 401/403/503, the bounded caches,
shared concurrent reviews, and the real HTTP calls against the fake apiserver (and, with
DISPLAY_OPERATOR_REAL_API=1, the in-cluster calls against a real kube-apiserver 1.37:
`tests.support.realapi`)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from capture import auth
from capture.auth import (
    ForbiddenError,
    HttpReviews,
    Reviewer,
    ReviewUnavailableError,
    UnauthenticatedError,
    User,
)
from fakekube.server import FakeKube
from tests.support import realapi
from tests.support.realapi import ApiServer, real_kube  # noqa: F401 - a fixture

DISPLAY = "node-a.card0-hdmi-a-1"


class CountingReviews:
    """A ReviewApi that answers from two dicts and counts the calls."""

    def __init__(self, users: dict[str, dict[str, Any]], allowed: set[str], *,
                 audiences: Sequence[str] | None = None) -> None:
        self.users = users
        self.allowed = allowed
        self.audiences = audiences
        self.calls = 0
        self.gate: asyncio.Event | None = None

    async def token_review(self, token: str, audiences: Sequence[str]) -> Mapping[str, Any]:
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        user = self.users.get(token)
        granted = list(audiences if self.audiences is None else self.audiences)
        return ({"authenticated": True, "user": user, "audiences": granted} if user
                else {"error": "bad token"})

    async def access_review(self, spec: Mapping[str, Any]) -> Mapping[str, Any]:
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        return {"allowed": spec["user"] in self.allowed}


@pytest.mark.parametrize(
    ("header", "error"),
    [(None, "no Authorization"), ("", "no Authorization"), ("Basic abc", "Bearer"),
     ("Bearer ", "Bearer"), ("Bearer", "Bearer"),
     # aiohttp hands a non-UTF-8 byte over as a surrogate escape.
     (b"Bearer ab\xffcd".decode("utf-8", "surrogateescape"), "characters"),
     ("Bearer a b", "characters"), ("Bearer caf\u00e9", "characters")],
    ids=["missing", "empty", "basic", "empty-token", "no-token", "non-utf8", "space", "latin"],
)
def test_bearer_token_refuses(header: str | None, error: str) -> None:
    with pytest.raises(UnauthenticatedError, match=error):
        auth.bearer_token(header)


def test_bearer_token_reads_the_token() -> None:
    assert auth.bearer_token("bearer abc.def") == "abc.def"


def test_access_spec_names_the_display_capture_subresource() -> None:
    user = User("alice", uid="u1", groups=("g",), extra=(("scopes", ("a",)),))
    assert auth.access_spec(user, DISPLAY) == {
        "user": "alice", "uid": "u1", "groups": ["g"], "extra": {"scopes": ["a"]},
        "resourceAttributes": {"group": "display.liken.sh", "resource": "displays",
                               "subresource": "capture", "verb": "get", "name": DISPLAY},
    }


def test_answers_are_cached_until_the_ttl() -> None:
    now = [0.0]
    api = CountingReviews({"t": {"username": "alice"}}, {"alice"})
    reviewer = Reviewer(api, ttl_s=10.0, clock=lambda: now[0])

    async def twice() -> None:
        for _ in range(2):
            user = await reviewer.authenticate("t")
            await reviewer.authorize(user, DISPLAY)

    asyncio.run(twice())
    assert api.calls == 2
    now[0] = 11.0
    asyncio.run(twice())
    assert api.calls == 4


def test_denials_raise_and_are_cached_too() -> None:
    api = CountingReviews({"t": {"username": "bob"}}, set())
    reviewer = Reviewer(api, ttl_s=10.0)

    async def attempt() -> None:
        with pytest.raises(UnauthenticatedError, match="not accepted"):
            await reviewer.authenticate("other")
        with pytest.raises(ForbiddenError, match="bob may not get displays/capture of"):
            await reviewer.authorize(await reviewer.authenticate("t"), DISPLAY)

    asyncio.run(attempt())
    asyncio.run(attempt())
    assert api.calls == 3


def test_http_reviews_against_the_fake_apiserver() -> None:
    with FakeKube() as fake:
        fake.policy.add_token("tok", "alice", groups=("viewers",), audiences=(auth.AUDIENCE,))
        fake.policy.add_token("api-tok", "alice")
        fake.allow("get", "displays", group="viewers", api_group="display.liken.sh",
                   subresource="capture", name=DISPLAY)

        async def scenario() -> None:
            reviews = HttpReviews(fake.url)
            try:
                reviewer = Reviewer(reviews, ttl_s=1.0)
                user = await reviewer.authenticate("tok")
                assert user == User("alice", groups=("viewers",))
                await reviewer.authorize(user, DISPLAY)
                with pytest.raises(ForbiddenError):
                    await reviewer.authorize(user, "node-a.card0-dp-1")
                with pytest.raises(UnauthenticatedError):
                    await reviewer.authenticate("nope")
                # A token for the API server itself is no token for captures.
                with pytest.raises(UnauthenticatedError, match="audience display-capture"):
                    await reviewer.authenticate("api-tok")
            finally:
                await reviews.close()

        asyncio.run(scenario())


def test_http_reviews_from_a_kubeconfig(tmp_path: Path) -> None:
    """Outside a cluster (a simulated node published into one) the reviews use a kubeconfig."""
    with FakeKube() as fake:
        fake.policy.add_token("tok", "alice", audiences=(auth.AUDIENCE,))
        config = tmp_path / "config"
        config.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
            f"clusters: [{{name: k, cluster: {{server: '{fake.url}'}}}}]\n"
            "users: [{name: u, user: {token: admin}}]\n"
            "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
        )

        async def scenario() -> User:
            reviews = HttpReviews(None, kubeconfig=config)
            try:
                return await Reviewer(reviews, ttl_s=1.0).authenticate("tok")
            finally:
                await reviews.close()

        assert asyncio.run(scenario()) == User("alice", groups=())
    with pytest.raises(ReviewUnavailableError, match="user.exec"):
        config.write_text(config.read_text().replace("{token: admin}", "{exec: {command: x}}"))
        HttpReviews(None, kubeconfig=config)


def test_http_reviews_unreachable_is_unavailable() -> None:
    async def scenario() -> None:
        reviews = HttpReviews("http://127.0.0.1:9")
        try:
            with pytest.raises(ReviewUnavailableError, match="apiserver unreachable"):
                await reviews.token_review("tok", [auth.AUDIENCE])
        finally:
            await reviews.close()

    asyncio.run(scenario())


def test_in_cluster_without_a_service_host_is_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    async def scenario() -> None:
        HttpReviews(None)

    with pytest.raises(ReviewUnavailableError, match="KUBERNETES_SERVICE_HOST"):
        asyncio.run(scenario())


def test_in_cluster_reviews_verify_the_mounted_ca_and_follow_a_rotated_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The capture container's default: the fake's HTTPS verified with the mounted CA, the
    service-account token re-read when the kubelet rotates it (a 503 until it is valid)."""
    from tests.support.https_apiserver import ServiceAccountDir

    with FakeKube(tls=True, authorize=True) as fake:
        fake.policy.add_token("tok", "alice", audiences=(auth.AUDIENCE,))
        (tmp_path / "ca").write_bytes(fake.ca_pem)
        account = ServiceAccountDir(tmp_path / "sa", ca=tmp_path / "ca", token="not-issued")
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", fake.host)
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(fake.port))
        monkeypatch.delenv("KUBECONFIG", raising=False)

        async def scenario() -> User:
            reviews = HttpReviews(None, account=account.root)
            try:
                with pytest.raises(ReviewUnavailableError, match="401"):
                    await reviews.token_review("tok", [auth.AUDIENCE])
                account.rotate(fake.admin_token)
                return await Reviewer(reviews, ttl_s=1.0).authenticate("tok")
            finally:
                await reviews.close()

        assert asyncio.run(asyncio.wait_for(scenario(), 30)) == User("alice", groups=())


def test_in_cluster_reviews_of_service_account_tokens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    real_kube: realapi.RealKube | None,  # noqa: F811
) -> None:
    """As in a cluster: the capture container's ServiceAccount (allowed the two reviews)
    reviews a viewer's ServiceAccount token issued for captures, and RBAC on
    displays/capture decides; the identity is the one the API server gives the token."""
    from tests.support.https_apiserver import ServiceAccountDir

    with realapi.api_server(real_kube, tls=True, authorize=True) as server:
        for namespace, name in (("team", "viewer"), ("display", "capture")):
            if server.get("v1", "Namespace", namespace) is None:
                server.create({"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": namespace}})
            server.create({"apiVersion": "v1", "kind": "ServiceAccount",
                           "metadata": {"name": name, "namespace": namespace}})
        capture = "system:serviceaccount:display:capture"
        server.allow("create", "tokenreviews", user=capture, api_group="authentication.k8s.io")
        server.allow("create", "subjectaccessreviews", user=capture,
                     api_group="authorization.k8s.io")
        server.allow("get", "displays", group="system:serviceaccounts:team",
                     api_group="display.liken.sh", subresource="capture", name=DISPLAY)
        viewer = server.service_account_token("team", "viewer", audiences=[auth.AUDIENCE])
        for_the_api = server.service_account_token("team", "viewer")
        (tmp_path / "ca").write_bytes(server.ca_pem)
        account = ServiceAccountDir(tmp_path / "sa", ca=tmp_path / "ca",
                                    token=server.service_account_token("display", "capture"))
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", server.host)
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(server.port))
        monkeypatch.delenv("KUBECONFIG", raising=False)

        async def scenario() -> User:
            reviews = HttpReviews(None, account=account.root)
            try:
                reviewer = Reviewer(reviews, ttl_s=1.0)
                user = await reviewer.authenticate(viewer)
                await reviewer.authorize(user, DISPLAY)
                with pytest.raises(ForbiddenError):
                    await reviewer.authorize(user, "node-a.card0-dp-1")
                with pytest.raises(UnauthenticatedError):
                    await reviewer.authenticate("nope")
                with pytest.raises(UnauthenticatedError, match="audience display-capture"):
                    await reviewer.authenticate(for_the_api)
                return user
            finally:
                await reviews.close()

        user = asyncio.run(asyncio.wait_for(scenario(), 60))
        assert (user.username, user.groups) == (
            "system:serviceaccount:team:viewer",
            ("system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated"))
        viewer_account = server.get("v1", "ServiceAccount", "viewer", namespace="team")
        assert viewer_account is not None and user.uid == viewer_account["metadata"]["uid"]
        assert [key for key, _ in user.extra] == ["authentication.kubernetes.io/credential-id"]


def test_a_token_authenticated_for_another_audience_is_refused() -> None:
    api = CountingReviews({"t": {"username": "alice"}}, {"alice"}, audiences=["other"])
    with pytest.raises(UnauthenticatedError, match="audience display-capture"):
        asyncio.run(Reviewer(api, ttl_s=10.0).authenticate("t"))


def test_caches_stay_within_their_bound_and_garbage_evicts_no_user() -> None:
    api = CountingReviews({"good": {"username": "alice"}}, {"alice"})
    reviewer = Reviewer(api, ttl_s=60.0, max_entries=8)

    async def flood() -> None:
        await reviewer.authenticate("good")
        for index in range(1000):
            with pytest.raises(UnauthenticatedError):
                await reviewer.authenticate(f"garbage{index}")
        calls = api.calls
        await reviewer.authenticate("good")
        assert api.calls == calls, "the accepted token was evicted by rejected ones"

    asyncio.run(flood())
    assert reviewer.cached_sizes() == (1, 8, 0)


def test_expired_answers_are_pruned_once_per_ttl_not_per_miss(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prunes: list[float] = []
    real_prune = auth.Lru.prune

    def counting_prune(self: auth.Lru[Any, Any], now: float) -> None:
        prunes.append(now)
        real_prune(self, now)

    monkeypatch.setattr(auth.Lru, "prune", counting_prune)
    now = [0.0]
    reviewer = Reviewer(CountingReviews({}, set()), ttl_s=10.0, clock=lambda: now[0])

    async def misses(count: int) -> None:
        for index in range(count):
            with pytest.raises(UnauthenticatedError):
                await reviewer.authenticate(f"miss{now[0]}-{index}")

    asyncio.run(misses(500))
    assert prunes == []
    now[0] = 10.0
    asyncio.run(misses(500))
    assert prunes == [10.0] * 3  # the three caches, once
    now[0] = 21.0
    asyncio.run(misses(1))
    assert reviewer.cached_sizes() == (0, 1, 0)


def test_concurrent_identical_reviews_share_one_call() -> None:
    api = CountingReviews({"t": {"username": "alice"}}, {"alice"})
    reviewer = Reviewer(api, ttl_s=10.0)

    async def together() -> None:
        api.gate = asyncio.Event()
        users = asyncio.gather(*(reviewer.authenticate("t") for _ in range(50)))
        await asyncio.sleep(0)
        api.gate.set()
        (user, *others) = await users
        assert all(other == user for other in others)
        assert api.calls == 1
        api.gate = asyncio.Event()
        decisions = asyncio.gather(*(reviewer.authorize(user, DISPLAY) for _ in range(50)))
        await asyncio.sleep(0)
        api.gate.set()
        await decisions
        assert api.calls == 2

    asyncio.run(together())


def test_a_cancelled_caller_leaves_the_shared_review_to_the_others() -> None:
    api = CountingReviews({"t": {"username": "alice"}}, set())
    reviewer = Reviewer(api, ttl_s=10.0)

    async def scenario() -> None:
        api.gate = asyncio.Event()
        first = asyncio.ensure_future(reviewer.authenticate("t"))
        second = asyncio.ensure_future(reviewer.authenticate("t"))
        await asyncio.sleep(0)
        first.cancel()
        api.gate.set()
        assert (await second).username == "alice"
        assert api.calls == 1

    asyncio.run(scenario())
