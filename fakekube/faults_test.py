"""The fault hooks and logs tests use: injected write failures, restart counts, the kubelet's
slice cleanup, and the request and event logs."""

from __future__ import annotations

import pytest
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceSlice

from fakekube import status, testing
from fakekube.faults import FaultCode
from fakekube.server import FakeKube
from fakekube.testing import as_dict, failure, load, names


@pytest.mark.parametrize(("code", "reason"), [
    (409, "Conflict"), (429, "TooManyRequests"), (500, "InternalError"),
], ids=["conflict", "too-many-requests", "internal-error"])
def test_next_writes_fail_with_the_injected_status(fake: FakeKube, client: Client,
                                                   code: FaultCode, reason: str) -> None:
    fake.fail_next_writes(2, code)
    for name in ("a", "b"):
        with pytest.raises(ApiError) as err:
            client.create(load(ResourceSlice, testing.resource_slice(name)))
        assert (failure(err.value)["code"], failure(err.value)["reason"]) == (code, reason)
    client.create(load(ResourceSlice, testing.resource_slice("c")))
    assert names(client.list(ResourceSlice)) == ["c"]
    assert [r.status for r in fake.request_log() if r.method == "POST"][-3:] == [code, code, 201]


def test_too_many_requests_says_when_to_retry(fake: FakeKube, client: Client) -> None:
    fake.fail_next_writes(1, 429, retry_after=7)
    with pytest.raises(ApiError) as err:
        client.create(load(Node, testing.node("n1")))
    assert failure(err.value)["details"] == {"retryAfterSeconds": 7}
    assert err.value.response.headers["Retry-After"] == "7"


def test_faults_can_target_one_resource_and_spare_reads(fake: FakeKube, client: Client) -> None:
    fake.fail_next_writes(1, 500, resource="resourceslices")
    client.create(load(Node, testing.node("n1")))
    assert names(client.list(ResourceSlice)) == []
    with pytest.raises(ApiError):
        client.create(load(ResourceSlice, testing.resource_slice("a")))
    assert fake.faults.pending() == 0


@pytest.mark.parametrize(("count", "code", "retry_after"), [(0, 409, 1), (1, 404, 1),
                                                            (1, 429, -1)],
                         ids=["no-count", "unknown-code", "negative-retry"])
def test_fault_arguments_are_checked(fake: FakeKube, count: int, code: int,
                                     retry_after: int) -> None:
    with pytest.raises(ValueError, match="count|code|retry_after"):
        fake.fail_next_writes(count, code, retry_after=retry_after)  # type: ignore[arg-type]


@pytest.mark.parametrize(("init", "field"), [(False, "containerStatuses"),
                                             (True, "initContainerStatuses")],
                         ids=["container", "init-container"])
def test_restart_counts_are_set_as_the_kubelet_reports_them(fake: FakeKube, client: Client,
                                                            init: bool, field: str) -> None:
    client.create(load(Pod, testing.pod("display-node", containers=("weston", "operator"))))
    fake.set_restart_count("default", "display-node", "weston", 1, init=init)
    fake.set_restart_count("default", "display-node", "weston", 3, init=init)
    fake.set_restart_count("default", "display-node", "operator", 0, init=init)
    pod = as_dict(client.get(Pod, "display-node", namespace="default"))
    assert {s["name"]: s["restartCount"] for s in pod["status"][field]} == {
        "weston": 3, "operator": 0}
    assert pod["status"]["phase"] == "Pending"
    modified = [e for e in fake.events if e.kind == ("", "pods") and e.type == "MODIFIED"]
    assert len(modified) == 3


def test_restart_count_of_a_missing_pod_is_not_found(fake: FakeKube) -> None:
    with pytest.raises(status.ApiFailure) as err:
        fake.set_restart_count("default", "missing", "weston", 1)
    assert err.value.code == 404


@pytest.mark.parametrize(("driver", "deleted", "left"), [
    (None, ["a", "c"], ["b"]),
    ("display.liken.sh", ["a"], ["b", "c"]),
], ids=["all-drivers", "one-driver"])
def test_kubelet_start_deletes_the_slices_of_its_node(fake: FakeKube, client: Client,
                                                      driver: str | None, deleted: list[str],
                                                      left: list[str]) -> None:
    for name, node, drv in (("a", "n1", "display.liken.sh"), ("b", "n2", "display.liken.sh"),
                            ("c", "n1", "gpu.example.com")):
        client.create(load(ResourceSlice, testing.resource_slice(name, node=node, driver=drv)))
    assert fake.delete_node_slices("n1", driver=driver) == deleted
    assert names(client.list(ResourceSlice)) == left
    assert [e.obj["metadata"]["name"] for e in fake.events if e.type == "DELETED"] == deleted


def test_request_log_records_method_path_query_and_status(fake: FakeKube,
                                                          client: Client) -> None:
    fake.requests.clear()
    client.create(load(Node, testing.node("n1")))
    client.get(Node, "n1")
    list(client.list(Node, labels={"a": "b"}))
    with pytest.raises(ApiError):
        client.get(Node, "missing")
    log = fake.request_log()
    assert [(r.method, r.path, r.status) for r in log] == [
        ("POST", "/api/v1/nodes", 201), ("GET", "/api/v1/nodes/n1", 200),
        ("GET", "/api/v1/nodes", 200), ("GET", "/api/v1/nodes/missing", 404)]
    assert log[2].param("labelSelector") == "a=b"


def _get(url: str) -> tuple[int, str, bytes]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/api/v1/nodes", timeout=10) as reply:
            return reply.status, reply.headers["Content-Type"], reply.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read()


def test_an_outage_drops_answers_html_or_delays_until_cleared(fake: FakeKube) -> None:
    import http.client
    import time
    import urllib.error

    fake.set_outage("drop")
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError, urllib.error.URLError)):
        _get(fake.url)
    fake.set_outage("html", code=502)
    code, content_type, body = _get(fake.url)
    assert (code, content_type) == (502, "text/html") and body.startswith(b"<html>")
    fake.set_outage("slow", delay=0.3)
    started = time.monotonic()
    assert _get(fake.url)[0] == 200
    assert time.monotonic() - started >= 0.3
    fake.set_outage(None)
    assert _get(fake.url)[:2] == (200, "application/json")
    assert [r.status for r in fake.request_log()][-4:] == [0, 502, 200, 200]


def test_the_outage_hook_over_http(fake: FakeKube) -> None:
    import json
    import urllib.request

    def hook(body: dict[str, object]) -> int:
        request = urllib.request.Request(f"{fake.url}/_fakekube/outage",
                                         data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=10) as reply:
            return int(reply.status)

    assert hook({"kind": "html", "code": 503}) == 200
    assert _get(fake.url)[0] == 503
    assert hook({"kind": None}) == 200  # the admin path is never in the outage
    assert _get(fake.url)[0] == 200
