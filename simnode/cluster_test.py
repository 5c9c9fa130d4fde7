"""cluster: the embedded fake and a kubeconfig's cluster as `up` starts them (a FakeKube stands
in for the real cluster), the copy of one context for the binaries, and the Node object's life:
created labelled and tainted, kept Ready, deleted with this node's slices, and someone else's
Node left alone."""

from __future__ import annotations

import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from fakekube.server import FakeKube
from fakekube.testing import node, resource_slice
from libdisplay import kubeconfig
from simnode import cluster
from simnode.api import DISPLAYS, Access, Api, ClusterError, UnreachableError
from simnode.state import NODE_LABEL

WAIT_S = 20.0


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as fake:
        yield fake


@pytest.fixture
def with_crd(kube: FakeKube) -> FakeKube:
    kube.register_crd(cluster.display_crd())
    return kube


def _kubeconfig(path: Path, server: str) -> Path:
    """Two contexts: `broken` (current, a dead server) and `sim`, whose user reads a token file
    and whose cluster a CA file, both named relative to the kubeconfig."""
    (path.parent / "token").write_text("t0ken\n")
    (path.parent / "ca.crt").write_text("not read for plain HTTP\n")
    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": "broken",
        "contexts": [{"name": "broken", "context": {"cluster": "dead", "user": "u"}},
                     {"name": "sim", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "dead", "cluster": {"server": "http://127.0.0.1:1"}},
                     {"name": "c", "cluster": {"server": server,
                                               "certificate-authority": "ca.crt"}}],
        "users": [{"name": "u", "user": {"tokenFile": "token"}}],
    }
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(
    ("name", "ok"),
    [("sim-node-1", True), ("rack1.sim-2", True), ("Sim", False), ("-sim", False),
     ("a" * 64, False), ("sim_1", False)],
    ids=["default", "dotted", "upper-case", "leading-dash", "too-long", "underscore"],
)
def test_node_names(name: str, ok: bool) -> None:
    if ok:
        assert cluster.check_node_name(name) == name
    else:
        with pytest.raises(ClusterError, match="not a DNS-1123 subdomain of at most 63"):
            cluster.check_node_name(name)


def test_the_embedded_fake_serves_the_display_crd() -> None:
    embedded = cluster.Embedded()
    try:
        access = embedded.start()
        assert access.kubeconfig is None
        assert embedded.child_args() == [f"--api-server={access.server}"]
        assert Api(access).items(DISPLAYS) == []
    finally:
        embedded.stop()


def test_a_kubeconfig_cluster_with_the_crd(with_crd: FakeKube, tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "kc", with_crd.url)
    pinned = tmp_path / "state" / "kubeconfig"
    pinned.parent.mkdir()
    remote = cluster.Remote(path, context="sim", pinned=pinned)
    access = remote.start()
    assert access == Access(server=with_crd.url, kubeconfig=path, context="sim")
    assert remote.child_args() == [f"--kubeconfig={pinned}"]
    assert stat.S_IMODE(pinned.stat().st_mode) == 0o600, "it holds credentials"
    doc = yaml.safe_load(pinned.read_text())
    assert doc["current-context"] == "sim" and [c["name"] for c in doc["contexts"]] == ["sim"]
    assert [c["name"] for c in doc["clusters"]] == ["c"]
    assert doc["clusters"][0]["cluster"]["certificate-authority"] == str(tmp_path / "ca.crt")
    assert doc["users"][0]["user"]["tokenFile"] == str(tmp_path / "token")
    assert kubeconfig.load(pinned) == kubeconfig.load(path, context="sim"), \
        "the binaries read the copy's current context as simnode reads the named one"
    remote.stop()
    assert not pinned.exists()


def test_the_current_context_goes_to_the_binaries_as_given(with_crd: FakeKube,
                                                          tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "kc", with_crd.url)
    doc = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**doc, "current-context": "sim"}))
    remote = cluster.Remote(path, context=None, pinned=tmp_path / "pinned")
    assert remote.start().context is None
    assert remote.child_args() == [f"--kubeconfig={path}"]
    assert not (tmp_path / "pinned").exists()


def test_a_cluster_without_the_crd_says_to_apply_it(kube: FakeKube, tmp_path: Path) -> None:
    remote = cluster.Remote(_kubeconfig(tmp_path / "kc", kube.url), context="sim",
                            pinned=tmp_path / "pinned")
    with pytest.raises(cluster.MissingCrdError,
                       match=r"Display CRD \(displays.display.liken.sh\) is not installed .*"
                             r"`kubectl apply -k deploy/base/cluster`"):
        remote.start()
    assert not (tmp_path / "pinned").exists(), "nothing is written for a cluster refused"


def test_an_unreachable_cluster_fails_before_anything(tmp_path: Path) -> None:
    remote = cluster.Remote(_kubeconfig(tmp_path / "kc", "http://127.0.0.1:1"), context=None,
                            pinned=tmp_path / "pinned")
    with pytest.raises(UnreachableError, match=r"cannot reach the API server at http://127"):
        remote.start()


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _status_patches(kube: FakeKube, name: str) -> int:
    return sum(1 for r in kube.request_log()
               if r.method == "PATCH" and r.path == f"/api/v1/nodes/{name}/status")


def test_the_node_is_created_kept_ready_and_withdrawn_with_its_slices(kube: FakeKube) -> None:
    published = cluster.NodeObject(Api(Access(server=kube.url)), "sim-1", heartbeat_s=0.1)
    published.publish()
    try:
        found = kube.get("v1", "Node", "sim-1")
        assert found is not None
        assert found["metadata"]["labels"][NODE_LABEL] == "true"
        assert found["spec"]["taints"] == [
            {"key": NODE_LABEL, "value": "true", "effect": "NoSchedule"}]
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
    kube.create(node("sim-1", labels={NODE_LABEL: "true"}))
    published = cluster.NodeObject(Api(Access(server=kube.url)), "sim-1")
    published.publish()
    assert published.withdraw() == ["Node sim-1"]


def test_someone_elses_node_is_refused_and_left_alone(kube: FakeKube) -> None:
    kube.create(node("worker-1"))
    kube.create(resource_slice("theirs", node="worker-1"))
    published = cluster.NodeObject(Api(Access(server=kube.url)), "worker-1")
    with pytest.raises(cluster.NodeTakenError, match="Node worker-1 exists .* choose another"):
        published.publish()
    assert published.withdraw() == []
    assert kube.get("v1", "Node", "worker-1") is not None
    assert kube.get("resource.k8s.io/v1", "ResourceSlice", "theirs") is not None
