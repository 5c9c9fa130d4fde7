"""Watches as lightkube drives them: synthetic ADDED from "0", replay from N, 410 after
compaction, streams ended cleanly or cut, server timeouts, selector transitions, and the wire
format of the chunked stream. With DISPLAY_OPERATOR_REAL_API=1 the tests that need no fault hook
run against a real kube-apiserver 1.37 (`tests.support.realapi`)."""

from __future__ import annotations

import concurrent.futures
import json
import ssl
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceSlice
from lightkube.types import PatchType, on_error_retry

from fakekube import testing
from fakekube.client import sync_client
from fakekube.server import FakeKube
from fakekube.testing import as_dict, failure, load
from tests.support import realapi
from tests.support.realapi import ApiServer, real_kube  # noqa: F401 - a fixture

WAIT_SECONDS = 20.0
JsonObject = dict[str, Any]
Seen = list[tuple[str, str]]
# The fake's compact() stands for history older than anything the apiserver still serves: a
# real one answers recent versions from its watch cache whatever etcd compacted.
COMPACTION = "compact() and history_limit, the fake's fault hooks"


@pytest.fixture
def fake(real_kube: realapi.RealKube | None) -> Iterator[ApiServer]:  # noqa: F811
    with realapi.api_server(real_kube) as server:
        yield server


@pytest.fixture
def client(fake: ApiServer) -> Iterator[Client]:
    c = sync_client(fake.url, **realapi.client_options(fake))
    try:
        yield c
    finally:
        c.close()


def start_taking(events: Iterator[tuple[str, Any]],
                 count: int) -> concurrent.futures.Future[list[tuple[str, JsonObject]]]:
    """Read the next `count` events of a watch on another thread, as (type, object dict).
    lightkube sends the watch request only once iteration starts."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(lambda: [(kind, as_dict(obj))
                                    for kind, obj in (next(events) for _ in range(count))])
    finally:
        pool.shutdown(wait=False)


def take_objects(events: Iterator[tuple[str, Any]], count: int) -> list[tuple[str, JsonObject]]:
    """The next `count` events of a watch, failing instead of hanging."""
    return start_taking(events, count).result(timeout=WAIT_SECONDS)


def take(events: Iterator[tuple[str, Any]], count: int) -> Seen:
    return [(kind, str(obj["metadata"]["name"])) for kind, obj in take_objects(events, count)]


def wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _slice(client: Client, name: str, **kwargs: Any) -> str:
    created = as_dict(client.create(load(ResourceSlice, testing.resource_slice(name, **kwargs))))
    return str(created["metadata"]["resourceVersion"])


def _watch_requests(fake: ApiServer) -> list[str | None]:
    return [r.param("resourceVersion") for r in fake.request_log() if r.param("watch") == "true"]


@pytest.mark.parametrize("since", [None, "0"], ids=["absent", "zero"])
def test_watch_from_zero_starts_with_synthetic_added(client: Client, since: str | None) -> None:
    _slice(client, "a")
    _slice(client, "b")
    events = client.watch(ResourceSlice, resource_version=since)
    assert take(events, 2) == [("ADDED", "a"), ("ADDED", "b")]
    client.patch(ResourceSlice, "a", {"metadata": {"labels": {"x": "y"}}},
                 patch_type=PatchType.MERGE)
    client.delete(ResourceSlice, "b")
    assert take(events, 2) == [("MODIFIED", "a"), ("DELETED", "b")]


def test_watch_from_n_replays_only_later_history(client: Client) -> None:
    rv_a = _slice(client, "a")
    _slice(client, "b")
    client.delete(ResourceSlice, "a")
    events = client.watch(ResourceSlice, resource_version=rv_a)
    assert take(events, 2) == [("ADDED", "b"), ("DELETED", "a")]


def test_deleted_event_carries_the_deletion_resource_version(fake: ApiServer,
                                                             client: Client) -> None:
    rv = _slice(client, "a")
    client.delete(ResourceSlice, "a")
    [(kind, obj)] = take_objects(client.watch(ResourceSlice, resource_version=rv), 1)
    assert kind == "DELETED"
    assert int(obj["metadata"]["resourceVersion"]) > int(rv)
    if isinstance(fake, FakeKube):  # a real store's version moves on with its own leases
        assert obj["metadata"]["resourceVersion"] == str(fake.store.resource_version)


@realapi.fake_only(COMPACTION)
def test_watch_from_a_compacted_version_raises_410_expired(fake: FakeKube,
                                                           client: Client) -> None:
    rv = _slice(client, "a")
    _slice(client, "b")
    compacted = fake.compact()
    with pytest.raises(ApiError) as err:
        take(client.watch(ResourceSlice, resource_version=rv), 1)
    status = failure(err.value)
    assert (status["code"], status["reason"]) == (410, "Expired")
    assert status["message"] == f"too old resource version: {rv} ({compacted})"


@realapi.fake_only(COMPACTION)
def test_lightkube_retry_restarts_an_expired_watch_from_scratch(fake: FakeKube,
                                                                client: Client) -> None:
    rv = _slice(client, "a")
    _slice(client, "b")
    fake.compact()
    events = client.watch(ResourceSlice, resource_version=rv, on_error=on_error_retry)
    assert take(events, 2) == [("ADDED", "a"), ("ADDED", "b")]
    assert _watch_requests(fake) == [rv, None]


@realapi.fake_only(COMPACTION)
def test_history_limit_expires_only_versions_older_than_what_it_keeps() -> None:
    small = FakeKube(history_limit=2).start()
    client = sync_client(small.url)
    try:
        first = _slice(client, "a")
        last = _slice(client, "b")
        _slice(client, "c")
        _slice(client, "d")
        with pytest.raises(ApiError):
            take(client.watch(ResourceSlice, resource_version=first), 1)
        assert take(client.watch(ResourceSlice, resource_version=last), 2) == [
            ("ADDED", "c"), ("ADDED", "d")]
    finally:
        client.close()
        small.stop()


@realapi.fake_only("drop_watches(), a fault hook")
def test_a_cleanly_dropped_watch_resumes_from_the_last_version(fake: FakeKube,
                                                               client: Client) -> None:
    _slice(client, "a")
    events = client.watch(ResourceSlice)
    assert take(events, 1) == [("ADDED", "a")]
    last = fake.store.resource_version
    assert fake.drop_watches() == 1
    _slice(client, "b")
    assert take(events, 1) == [("ADDED", "b")]
    assert _watch_requests(fake) == [None, str(last)]


@realapi.fake_only("drop_watches(), a fault hook")
def test_an_abruptly_dropped_watch_is_a_transport_error(fake: FakeKube, client: Client) -> None:
    _slice(client, "a")
    events = client.watch(ResourceSlice)
    assert take(events, 1) == [("ADDED", "a")]
    fake.drop_watches(abrupt=True)
    with pytest.raises(Exception) as err:
        take(events, 1)
    assert not isinstance(err.value, ApiError)
    assert type(err.value).__name__ == "RemoteProtocolError"


def test_server_timeout_ends_the_stream_and_lightkube_rewatches(fake: ApiServer,
                                                                client: Client) -> None:
    rv = _slice(client, "a")
    events = client.watch(ResourceSlice, resource_version=rv, server_timeout=1)
    pending = start_taking(events, 1)
    wait_for(lambda: len(_watch_requests(fake)) >= 2, "lightkube to re-watch after timeout")
    _slice(client, "b")
    [(kind, obj)] = pending.result(timeout=WAIT_SECONDS)
    assert (kind, obj["metadata"]["name"]) == ("ADDED", "b")
    timeouts = [r.param("timeoutSeconds") for r in fake.request_log() if r.param("watch")]
    assert set(timeouts) == {"1"}


def test_selector_transitions_become_added_and_deleted(client: Client) -> None:
    _slice(client, "a", labels={"app": "display"})
    events = client.watch(ResourceSlice, labels={"app": "display"})
    assert take(events, 1) == [("ADDED", "a")]
    _slice(client, "other", labels={"app": "other"})
    client.patch(ResourceSlice, "a", {"metadata": {"labels": {"app": "gone"}}},
                 patch_type=PatchType.MERGE)
    client.patch(ResourceSlice, "other", {"metadata": {"labels": {"app": "display"}}},
                 patch_type=PatchType.MERGE)
    assert take(events, 2) == [("DELETED", "a"), ("ADDED", "other")]


def test_namespaced_watches_see_only_their_namespace(client: Client) -> None:
    client.create(load(Pod, testing.pod("p", namespace="kube-system")))
    client.create(load(Pod, testing.pod("q", namespace="default")))
    assert take(client.watch(Pod, namespace="default"), 1) == [("ADDED", "q")]
    assert take(client.watch(Pod, namespace="*"), 2) == [("ADDED", "q"), ("ADDED", "p")]


def test_wait_watches_one_object_by_name(client: Client) -> None:
    client.create(load(Pod, testing.pod("p")))
    client.patch(Pod.Status, "p", {"status": {"conditions": [{"type": "Ready",
                                                               "status": "True"}]}},
                 namespace="default", patch_type=PatchType.MERGE)
    ready = client.wait(Pod, "p", for_conditions=["Ready"], namespace="default")
    assert as_dict(ready)["metadata"]["name"] == "p"


@pytest.mark.parametrize("path", [
    "/apis/resource.k8s.io/v1/resourceslices?watch=true&timeoutSeconds=1",
    "/apis/resource.k8s.io/v1/watch/resourceslices?timeoutSeconds=1",
], ids=["query", "watch-prefix"])
def test_stream_is_chunked_json_lines_ending_at_the_timeout(fake: ApiServer, client: Client,
                                                            path: str) -> None:
    _slice(client, "a")
    with _open(fake, path) as resp:
        assert resp.headers["Transfer-Encoding"] == "chunked"
        lines = resp.read().splitlines()  # returns once the server ends the stream
    events = [json.loads(line) for line in lines]
    assert [e["type"] for e in events] == ["ADDED"]
    obj = events[0]["object"]
    assert (obj["kind"], obj["apiVersion"]) == ("ResourceSlice", "resource.k8s.io/v1")


def _open(fake: ApiServer, path: str) -> Any:
    """A raw streaming GET of `path` as the administrator."""
    options = realapi.client_options(fake)
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
    if "ca" in options:
        handlers.append(urllib.request.HTTPSHandler(
            context=ssl.create_default_context(cadata=options["ca"].decode())))
    headers = {"Authorization": f"Bearer {options['token']}"} if "token" in options else {}
    return urllib.request.build_opener(*handlers).open(
        urllib.request.Request(fake.url + path, headers=headers), timeout=WAIT_SECONDS)


def test_a_watch_asking_no_timeout_stays_open(fake: ApiServer, client: Client) -> None:
    """timeoutSeconds=0 is no timeout asked (the server's own, minutes), not an end now: an
    object made after the watch began still arrives on it."""
    rv = _slice(client, "a")
    with _open(fake, "/apis/resource.k8s.io/v1/resourceslices?watch=true&timeoutSeconds=0"
                     f"&resourceVersion={rv}") as resp:
        _slice(client, "b")
        event = json.loads(resp.readline())
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "b")


@realapi.fake_only("bookmark_interval, the fake's knob (the apiserver's is about a minute)")
def test_bookmarks_only_when_allowed_at_the_store_version() -> None:
    with FakeKube(bookmark_interval=0.1) as fake:
        fake.create({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "other", "namespace": "default"}})
        now = fake.store.resource_version
        url = f"{fake.url}/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1"
        with urllib.request.urlopen(url + "&allowWatchBookmarks=true", timeout=10) as r:
            events = [json.loads(line) for line in r.read().splitlines() if line.strip()]
        kinds = [e["type"] for e in events]
        assert kinds[0] == "ADDED" and "BOOKMARK" in kinds
        bookmark = next(e for e in events if e["type"] == "BOOKMARK")["object"]
        assert bookmark["metadata"] == {"resourceVersion": str(now)}
        assert bookmark["kind"] == "ConfigMap"
        with urllib.request.urlopen(url, timeout=10) as r:
            plain = [json.loads(line)["type"] for line in r.read().splitlines() if line.strip()]
        assert plain == ["ADDED"]
    assert sum(fake.requests.bytes_sent().values()) > 0
