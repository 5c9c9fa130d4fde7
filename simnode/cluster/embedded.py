"""The cluster a pod-runner node lives in: what the node asks of it, whoever plays each part.

`Embedded` is the fake API inside `up` (HTTPS, tokens, RBAC) with the control plane's actors
of `simnode.cluster.control`, every object of the manifests applied by its admin. The real cluster
of `up --kubeconfig` is `simnode.cluster.remote.Remote`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from fakekube import tokenrequest
from fakekube.server import FakeKube
from simnode.cluster import control
from simnode.cluster.api import Api
from simnode.kubelet.manifest import PodTemplate
from simnode.kubelet.tokens import IssuedToken

JsonObject = dict[str, Any]


class PodCluster(Protocol):
    @property
    def url(self) -> str: ...

    def start(self, docs: list[JsonObject]) -> None:
        """Ready the cluster for the pod (before anything of the node starts)."""
        ...

    @property
    def reader(self) -> Api:
        """Reads what `up` prints: slices, Displays, claims."""
        ...

    @property
    def kubelet(self) -> Api:
        """The node's identity: creates the Node and keeps it Ready."""
        ...

    @property
    def owner(self) -> Api:
        """Deletes the Node and its slices when the node stops."""
        ...

    @property
    def service_address(self) -> tuple[str, int]:
        """What the pod's `KUBERNETES_SERVICE_HOST`/`PORT` say."""
        ...

    @property
    def ca_pem(self) -> bytes:
        """What the pod's projected `ca.crt` holds."""
        ...

    def issue_token(self, namespace: str, account: str, pod: JsonObject) -> IssuedToken: ...

    def create_pod(self, template: PodTemplate) -> JsonObject: ...

    def create_claims(self, template: PodTemplate, pod: JsonObject,
                      allocation: Mapping[str, str], driver: str) -> dict[str, JsonObject]: ...

    def write_status(self, pod: JsonObject, status: JsonObject) -> None: ...

    def delete_pod(self, pod: JsonObject, claims: Mapping[str, JsonObject]) -> None: ...

    def denials(self) -> list[str]:
        """The API's refusals seen so far, one line each."""
        ...

    def stop(self) -> None: ...


class Embedded:
    """The fake API inside `up`; `control` holds its actors once started."""

    def __init__(self, identities: Path, *, node: str) -> None:
        self.kube = FakeKube(tls=True, authorize=True)
        self.identities = identities
        self.node = node
        self._control: control.ControlPlane | None = None

    @property
    def url(self) -> str:
        return self.kube.url

    @property
    def control(self) -> control.ControlPlane:
        if self._control is None:
            raise RuntimeError("the embedded cluster is not started")
        return self._control

    def start(self, docs: list[JsonObject]) -> None:
        self.kube.start()
        self._control = control.ControlPlane(self.kube, self.identities, node=self.node)
        self.control.apply(docs)

    @property
    def reader(self) -> Api:
        return self.control.admin

    @property
    def kubelet(self) -> Api:
        return self.control.kubelet

    @property
    def owner(self) -> Api:
        # The kubelet may not delete its Node: the cluster owner removes it.
        return self.control.admin

    @property
    def service_address(self) -> tuple[str, int]:
        return self.kube.host, self.kube.port

    @property
    def ca_pem(self) -> bytes:
        return self.kube.ca_pem

    def issue_token(self, namespace: str, account: str, pod: JsonObject) -> IssuedToken:
        # Bound to the pod, as the kubelet's projected token is: the API server then knows
        # the pod's node, which a driver's write of a claim's status.devices needs.
        meta = pod["metadata"]
        bound = tokenrequest.check_bound(self.kube, namespace, {
            "apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta.get("uid")})
        return IssuedToken(self.kube.service_account_token(namespace, account, bound=bound))

    def create_pod(self, template: PodTemplate) -> JsonObject:
        return self.control.create_pod(template)

    def create_claims(self, template: PodTemplate, pod: JsonObject,
                      allocation: Mapping[str, str], driver: str) -> dict[str, JsonObject]:
        return self.control.create_claims(template, pod, allocation, driver)

    def write_status(self, pod: JsonObject, status: JsonObject) -> None:
        self.control.write_status(pod, status)

    def delete_pod(self, pod: JsonObject, claims: Mapping[str, JsonObject]) -> None:
        self.control.delete_pod(pod, claims)

    def denials(self) -> list[str]:
        return [f"{d.user} {d.verb} {d.api_group}/{d.resource}"
                f"{'/' + d.subresource if d.subresource else ''} {d.namespace}/{d.name}"
                f" ({d.code})" for d in self.kube.denials()]

    def stop(self) -> None:
        self.kube.stop()
