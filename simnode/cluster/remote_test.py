"""`up --kubeconfig`'s cluster without the node's processes: a FakeKube with TLS and RBAC stands
in for the real cluster. What the preflight names (a missing binding, a role with a verb less,
the base's DaemonSet running there) with the command that fixes it; a kubeconfig the pod's
in-cluster configuration cannot state; the Pod created and its token requested as the
kubeconfig's user, the token authenticating as the manifest's ServiceAccount; and the projected
token renewed before it expires."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakekube.server import FakeKube
from fakekube.testing import call
from simnode.cli import up
from simnode.cluster import preflight, remote
from simnode.cluster.api import KubeconfigUnusableError
from simnode.kubelet.manifest import daemonset, pod_template
from simnode.kubelet.testing import REPO, render_base, stand_in_cluster, user_kubeconfig, wait_for
from simnode.kubelet.tokens import AccountProjection
from simnode.kubelet.volumes import current

JsonObject = dict[str, Any]
USER = "simnode-user"
SA = "system:serviceaccount:display-operator:display-operator"


@pytest.fixture(scope="module")
def base() -> list[JsonObject]:
    return render_base()


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube(tls=True, authorize=True, token_min_expiration_s=1) as fake:
        yield fake


def _remote(kube: FakeKube, tmp_path: Path, base: list[JsonObject],
            omit: tuple[str, ...] = (), **kwargs: Any) -> remote.Remote:
    token = stand_in_cluster(kube, base, user=USER, omit=omit)
    path = user_kubeconfig(tmp_path / "kubeconfig", server=kube.url, ca_pem=kube.ca_pem,
                           token=token)
    return remote.Remote(path, context="sim", node="sim-kube-1", **kwargs)


def test_a_cluster_with_the_base_passes(kube: FakeKube, tmp_path: Path,
                                        base: list[JsonObject]) -> None:
    cluster = _remote(kube, tmp_path, base)
    assert preflight.problems(cluster.api, base) == []
    cluster.start(base)
    assert cluster.service_address == (kube.host, kube.port)
    assert cluster.ca_pem == kube.ca_pem
    assert kube.denials() == [], "the user's rights cover the checks"


def test_applying_what_prerequisites_prints_satisfies_the_preflight(
        kube: FakeKube, tmp_path: Path, base: list[JsonObject]) -> None:
    printed = [d for d in yaml.safe_load_all(up.prerequisites(REPO)) if d]
    assert "DaemonSet" not in {d["kind"] for d in printed}
    cluster = _remote(kube, tmp_path, printed)
    assert preflight.problems(cluster.api, base) == []


def test_a_missing_binding_is_named_with_the_command_that_fixes_it(
        kube: FakeKube, tmp_path: Path, base: list[JsonObject]) -> None:
    cluster = _remote(kube, tmp_path, base, omit=("ClusterRoleBinding display-operator",))
    with pytest.raises(preflight.PrerequisiteError) as caught:
        cluster.start(base)
    message = str(caught.value)
    assert "  ClusterRoleBinding display-operator: missing\n" in message
    assert message.count(": missing") == 1, message
    assert (f"`simnode prerequisites | kubectl --kubeconfig={tmp_path / 'kubeconfig'}"
            " --context=sim apply -f -`") in message


def test_a_role_with_a_verb_less_differs(kube: FakeKube, tmp_path: Path,
                                         base: list[JsonObject]) -> None:
    cluster = _remote(kube, tmp_path, base)
    role = copy.deepcopy(kube.get("rbac.authorization.k8s.io/v1", "ClusterRole",
                                  "display-operator"))
    assert role is not None
    role["rules"][0]["verbs"].remove("watch")
    kube.api.store.put(("rbac.authorization.k8s.io", "clusterroles"), role)
    assert preflight.problems(cluster.api, base) == [
        "ClusterRole display-operator: its rules differ from the rendered base's"]


def test_the_bases_daemonset_in_the_cluster_is_refused(kube: FakeKube, tmp_path: Path,
                                                       base: list[JsonObject]) -> None:
    cluster = _remote(kube, tmp_path, base)
    kube.create(next(d for d in base if d["kind"] == "DaemonSet"))
    (problem,) = preflight.problems(cluster.api, base)
    assert problem.startswith("DaemonSet display-operator/display-operator: runs in the cluster")


@pytest.mark.parametrize(
    ("server", "ca", "expected"),
    [("http://127.0.0.1:6443", True, "is not https"),
     ("https://127.0.0.1:6443/k8s/clusters/c-1", True, "has a path"),
     ("https://127.0.0.1:6443", False, "names no CA")],
    ids=["plain-http", "path", "no-ca-no-bundle"])
def test_a_server_a_pod_cannot_reach_in_cluster(kube: FakeKube, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                server: str, ca: bool, expected: str) -> None:
    monkeypatch.setattr(remote, "system_bundle", lambda: None)
    path = user_kubeconfig(tmp_path / "kc", server=server, ca_pem=kube.ca_pem if ca else None,
                           token="t")
    with pytest.raises(KubeconfigUnusableError, match=expected):
        remote.Remote(path, context="sim", node="n")


def test_the_pod_and_its_token_are_the_users_and_the_token_is_the_service_accounts(
        kube: FakeKube, tmp_path: Path, base: list[JsonObject]) -> None:
    cluster = _remote(kube, tmp_path, base)
    template = pod_template(daemonset(base))
    pod = cluster.create_pod(template)
    assert pod["spec"]["nodeName"] == "sim-kube-1"
    assert "ownerReferences" not in pod["metadata"], "no DaemonSet controller made it"
    issued = cluster.issue_token(template.namespace, template.service_account, pod)
    assert issued.expires_at is not None and issued.expires_at > issued.issued_at + 3600
    writers = {r.user for r in kube.request_log() if r.method == "POST"}
    assert writers == {USER}
    review = call(kube.url, "POST", "/apis/authentication.k8s.io/v1/tokenreviews", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {"token": issued.token}}, token=kube.admin_token, ca=kube.ca_pem)
    assert review.body["status"]["user"]["username"] == SA
    cluster.delete_pod(pod, {})
    assert kube.objects("v1", "Pod") == []


def test_the_projected_token_is_renewed_before_it_expires(
        kube: FakeKube, tmp_path: Path, base: list[JsonObject]) -> None:
    cluster = _remote(kube, tmp_path, base, token_seconds=3)
    template = pod_template(daemonset(base))
    pod = cluster.create_pod(template)
    projection = AccountProjection(
        tmp_path / "sa", ca_pem=cluster.ca_pem, namespace=template.namespace,
        issue=lambda: cluster.issue_token(template.namespace, template.service_account, pod))
    projection.start()
    try:
        first, issued = current(tmp_path / "sa"), projection.current
        assert first is not None and first["ca.crt"] == kube.ca_pem
        assert first["namespace"] == b"display-operator"
        assert issued is not None and issued.expires_at is not None
        wait_for(lambda: projection.current is not issued, timeout=20.0,
                 what="a new token requested")
        renewed = projection.current
        assert renewed is not None and renewed.token != issued.token
        assert renewed.issued_at < issued.expires_at, "renewed before the old one expired"
        assert current(tmp_path / "sa") != first, "the file was rewritten (before `current`)"
        wait_for(lambda: call(kube.url, "GET", "/api/v1/nodes/x", token=first["token"].decode(),
                              ca=kube.ca_pem).code == 401, timeout=20.0,
                 what="the first token expired")
        assert call(kube.url, "GET", "/api/v1/namespaces/display-operator/pods/" +
                    pod["metadata"]["name"], token=(tmp_path / "sa" / "token").read_text(),
                    ca=kube.ca_pem).code == 200, "the file holds a live token of the SA"
    finally:
        projection.stop()
