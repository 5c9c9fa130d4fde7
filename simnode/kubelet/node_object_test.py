"""cluster: node names, and the Node object's life (a FakeKube stands in for the cluster):
created labelled and tainted, kept Ready, deleted with this node's slices, and someone else's
Node left alone."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from fakekube.server import FakeKube
from fakekube.testing import node, resource_slice
from simnode.cluster.api import Access, Api, ClusterError
from simnode.kubelet import node_object
from simnode.kubelet.node_object import SIMULATED_LABEL

WAIT_S = 20.0


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as fake:
        yield fake


@pytest.mark.parametrize(
    ("name", "ok"),
    [("sim-node-1", True), ("rack1.sim-2", True), ("Sim", False), ("-sim", False),
     ("a" * 64, False), ("sim_1", False)],
    ids=["default", "dotted", "upper-case", "leading-dash", "too-long", "underscore"],
)
def test_node_names(name: str, ok: bool) -> None:
    if ok:
        assert node_object.check_node_name(name) == name
    else:
        with pytest.raises(ClusterError, match="not a DNS-1123 subdomain of at most 63"):
            node_object.check_node_name(name)


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _status_patches(kube: FakeKube, name: str) -> int:
    return sum(1 for r in kube.request_log()
               if r.method == "PATCH" and r.path == f"/api/v1/nodes/{name}/status")


def test_the_node_is_created_kept_ready_and_withdrawn_with_its_slices(kube: FakeKube) -> None:
    published = node_object.NodeObject(Api(Access(server=kube.url)), "sim-1", heartbeat_s=0.1)
    published.publish()
    try:
        found = kube.get("v1", "Node", "sim-1")
        assert found is not None
        assert found["metadata"]["labels"][SIMULATED_LABEL] == "true"
        assert found["spec"]["taints"] == [
            {"key": SIMULATED_LABEL, "value": "true", "effect": "NoSchedule"}]
        (ready,) = found["status"]["conditions"]
        assert (ready["type"], ready["status"]) == ("Ready", "True")
        assert found["status"]["allocatable"]["pods"] == "110"
        _wait(lambda: _status_patches(kube, "sim-1") >= 3, "heartbeats")
    finally:
        kube.create(resource_slice("mine", node="sim-1"))
        kube.create(resource_slice("other-node", node="sim-2"))
        kube.create(resource_slice("other-driver", node="sim-1", driver="gpu.example.com"))
        deleted = published.withdraw()
    assert deleted == ["ResourceSlice mine", "Node sim-1"]
    assert kube.get("v1", "Node", "sim-1") is None
    beats = _status_patches(kube, "sim-1")
    time.sleep(0.3)
    assert _status_patches(kube, "sim-1") == beats, "the heartbeat stopped"
    left = {s["metadata"]["name"] for s in kube.objects("resource.k8s.io/v1", "ResourceSlice")}
    assert left == {"other-node", "other-driver"}


def test_a_node_a_killed_run_left_is_taken_over(kube: FakeKube) -> None:
    kube.create(node("sim-1", labels={SIMULATED_LABEL: "true"}))
    published = node_object.NodeObject(Api(Access(server=kube.url)), "sim-1")
    published.publish()
    assert published.withdraw() == ["Node sim-1"]


def test_someone_elses_node_is_refused_and_left_alone(kube: FakeKube) -> None:
    kube.create(node("worker-1"))
    kube.create(resource_slice("theirs", node="worker-1"))
    published = node_object.NodeObject(Api(Access(server=kube.url)), "worker-1")
    with pytest.raises(node_object.NodeTakenError, match="Node worker-1 exists .* choose another"):
        published.publish()
    assert published.withdraw() == []
    assert kube.get("v1", "Node", "worker-1") is not None
    assert kube.get("resource.k8s.io/v1", "ResourceSlice", "theirs") is not None
