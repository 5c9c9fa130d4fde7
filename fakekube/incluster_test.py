"""A client configured as in a pod (lightkube's in-cluster config: KUBERNETES_SERVICE_HOST/PORT,
the mounted token, ca.crt and namespace) works against FakeKube(tls=True, authorize=True) with a
ServiceAccount token the fake issued, reads and watches what RBAC grants, and is refused the
rest."""

from __future__ import annotations

from pathlib import Path

import pytest
from lightkube import ApiError, Client, KubeConfig
from lightkube.resources.core_v1 import Node, Pod

from fakekube import testing
from fakekube.server import FakeKube

WATCH_SECONDS = 20


def test_in_cluster_config_with_a_service_account_token(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeKube(tls=True, authorize=True) as fake:
        fake.create(testing.node("n1"))
        fake.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                     "metadata": {"name": "node-reader"},
                     "rules": [{"apiGroups": [""], "resources": ["nodes"],
                                "verbs": ["list", "watch"]}]})
        fake.create({"apiVersion": "rbac.authorization.k8s.io/v1",
                     "kind": "ClusterRoleBinding", "metadata": {"name": "node-reader"},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                 "kind": "ClusterRole", "name": "node-reader"},
                     "subjects": [{"kind": "ServiceAccount", "name": "robot",
                                   "namespace": "default"}]})
        (tmp_path / "token").write_text(fake.service_account_token("default", "robot"))
        (tmp_path / "ca.crt").write_bytes(fake.ca_pem)
        (tmp_path / "namespace").write_text("default")
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", fake.host)
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(fake.port))
        client = Client(KubeConfig.from_service_account(tmp_path), trust_env=False)
        try:
            assert testing.names(client.list(Node)) == ["n1"]
            kind, node = next(iter(client.watch(Node, server_timeout=WATCH_SECONDS)))
            assert (kind, node.metadata.name if node.metadata else None) == ("ADDED", "n1")
            with pytest.raises(ApiError) as refused:
                list(client.list(Pod))
            assert refused.value.status.code == 403
        finally:
            client.close()
        assert [(d.user, d.verb, d.resource) for d in fake.denials()] == [
            ("system:serviceaccount:default:robot", "list", "pods")]
