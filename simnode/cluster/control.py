"""The cluster around the simulated node's pod, each actor with its own identity.

The fake API serves HTTPS with its own CA and authorizes every request with RBAC. `apply`
creates every object of the rendered manifests as `system:admin` (a cluster owner's
`kubectl apply`), plus simnode's own RBAC (`simnode/cluster/rbac.yaml`: a person who edits
Displays, a viewer of every screen, the kubelet's reads of the Secrets its pods mount); the
DaemonSet controller's part (the Pod from the template, its ResourceClaim from the claim
template) is played as admin too; the scheduler's allocation of the claim as
`system:kube-scheduler`; the kubelet's writes (pod status) and reads (Secrets) as
`system:node:NODE`; a person's edit of a Display as `alice`.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from libdisplay import fsutil
from simnode.cluster.api import Access, Api, ClusterError, Resource, StatusError
from simnode.kubelet.manifest import PodTemplate

JsonObject = dict[str, Any]
RBAC: Final = Path(__file__).with_name("rbac.yaml")
PERSON: Final = "alice"
VIEWER: Final = ("default", "screen-viewer")
"""The ServiceAccount whose tokens may see every screen."""
CAPTURE_AUDIENCE: Final = "display-capture"
SCHEDULER: Final = "system:kube-scheduler"
PODS: Final = Resource("v1", "pods")
SECRETS: Final = Resource("v1", "secrets")
CLAIMS: Final = Resource("resource.k8s.io/v1", "resourceclaims")

# A claim's opaque parameters for this driver (deploy/base/cluster/admission-claim-parameters).
CONFIG_KIND: Final = {"apiVersion": "display.liken.sh/v1alpha1", "kind": "DisplayConfig"}


def allocation(node: str, device: str, parameters: Mapping[str, object], *, driver: str,
               request: str = "screen") -> JsonObject:
    """A claim's `status.allocation` of one device of `node`'s pool, as the scheduler writes
    it: with the node selector a node-local device always gets, which the API server's check
    of the driver's status.devices write (associated-node) reads."""
    config = {**CONFIG_KIND, **parameters}
    return {"devices": {
        "results": [{"request": request, "driver": driver, "pool": node, "device": device}],
        "config": [{"source": "FromClaim", "requests": [request],
                    "opaque": {"driver": driver, "parameters": config}}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}
TEMPLATES: Final = Resource("resource.k8s.io/v1", "resourceclaimtemplates")
_IRREGULAR: Final = {"Endpoints": "endpoints"}


class ApplyError(ClusterError):
    """An object of the manifests the API refused; names it."""


def plural(kind: str) -> str:
    if kind in _IRREGULAR:
        return _IRREGULAR[kind]
    lower = kind.lower()
    if lower.endswith("y"):
        return lower[:-1] + "ies"
    if lower.endswith("s"):
        return lower + "es"
    return lower + "s"


def resource_of(obj: Mapping[str, Any]) -> Resource:
    return Resource(str(obj["apiVersion"]), plural(str(obj["kind"])))


def kubeconfig(path: Path, *, server: str, ca_pem: bytes, token: str, user: str) -> Path:
    """A kubeconfig of one identity (owner-only: it holds the token)."""
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": user,
        "clusters": [{"name": "simnode", "cluster": {
            "server": server,
            "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "simnode", "user": user}}],
    }
    fsutil.atomic_write(path, yaml.safe_dump(config), mode=0o600)
    return path


class ControlPlane:
    """The identities' clients of one fake API (`kube`, a FakeKube with tls and authorize)."""

    def __init__(self, kube: Any, work: Path, *, node: str) -> None:
        self.kube = kube
        self.node = node
        self.work = work
        work.mkdir(parents=True, exist_ok=True)
        self.admin = self._api("admin", kube.admin_token)
        self.kubelet = self._api("node", kube.user_token(f"system:node:{node}",
                                                          ("system:nodes",)))
        self.scheduler = self._api("scheduler", kube.user_token(SCHEDULER))
        self.person = self._api(PERSON, kube.user_token(PERSON))
        self.viewer_token = self.capture_token(*VIEWER)
        """A token RBAC lets see every screen (README: `kubectl create token SA --audience
        display-capture`)."""

    def capture_token(self, namespace: str, account: str) -> str:
        """A ServiceAccount's token issued for the capture server's audience."""
        return str(self.kube.service_account_token(namespace, account,
                                                   audiences=(CAPTURE_AUDIENCE,)))

    def _api(self, name: str, token: str) -> Api:
        path = kubeconfig(self.work / f"{name}.kubeconfig", server=self.kube.url,
                          ca_pem=self.kube.ca_pem, token=token, user=name)
        return Api(Access.from_kubeconfig(path))

    def kubeconfig_of(self, name: str) -> Path:
        return self.work / f"{name}.kubeconfig"

    # --- the cluster owner -----------------------------------------------------------------

    def apply(self, docs: Iterable[JsonObject]) -> list[str]:
        """Create (or merge over) every object, in order; `Kind name` of each."""
        done = []
        for obj in [*docs, *yaml.safe_load_all(RBAC.read_text())]:
            if not obj:
                continue
            meta = obj.get("metadata") or {}
            what = f"{obj['kind']} {meta.get('name')}"
            ns = meta.get("namespace")
            try:
                try:
                    self.admin.create(resource_of(obj), obj, namespace=ns)
                except StatusError as exc:
                    if exc.code != 409:
                        raise
                    self.admin.patch(resource_of(obj), str(meta["name"]), obj, namespace=ns)
            except ClusterError as exc:
                raise ApplyError(f"applying {what}: {exc}") from exc
            done.append(what)
        return done

    # --- the DaemonSet controller and the resource claim controller ------------------------

    def create_pod(self, template: PodTemplate) -> JsonObject:
        ds = self.admin.get(Resource("apps/v1", "daemonsets"), template.daemonset,
                            namespace=template.namespace)
        owner = [] if ds is None else [{
            "apiVersion": "apps/v1", "kind": "DaemonSet", "name": template.daemonset,
            "uid": ds["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "generateName": f"{template.daemonset}-", "namespace": template.namespace,
            "labels": dict(template.labels), "ownerReferences": owner},
            "spec": {**template.spec, "nodeName": self.node}}
        return self.admin.create(PODS, pod, namespace=template.namespace)

    def create_claims(self, template: PodTemplate, pod: JsonObject,
                      allocation: Mapping[str, str], driver: str) -> dict[str, JsonObject]:
        """Each pod claim from its template, allocated as the scheduler allocates it
        (`allocation`: request -> device of `driver` in this node's pool); name -> claim."""
        ns, name = template.namespace, pod["metadata"]["name"]
        claims = {}
        for claim_name, template_name in template.claim_templates.items():
            found = self.admin.get(TEMPLATES, template_name, namespace=ns)
            if found is None:
                raise ApplyError(f"ResourceClaimTemplate {ns}/{template_name} is missing")
            claim = self.admin.create(CLAIMS, {
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {
                    "name": f"{name}-{claim_name}-{uuid.uuid4().hex[:5]}", "namespace": ns,
                    "annotations": {"resource.kubernetes.io/pod-claim-name": claim_name},
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name,
                                         "uid": pod["metadata"]["uid"], "controller": True}]},
                "spec": found["spec"]["spec"]}, namespace=ns)
            results = [{"request": r, "driver": driver, "pool": self.node, "device": d}
                       for r, d in allocation.items()]
            status = {"allocation": {"devices": {"results": results}, "nodeSelector": {
                "nodeSelectorTerms": [{"matchFields": [{
                    "key": "metadata.name", "operator": "In", "values": [self.node]}]}]}},
                "reservedFor": [{"resource": "pods", "name": name,
                                 "uid": pod["metadata"]["uid"]}]}
            claims[claim_name] = self.scheduler.patch(
                CLAIMS, claim["metadata"]["name"], {"status": status}, namespace=ns,
                subresource="status")
        self.admin.patch(PODS, name, {"status": {"resourceClaimStatuses": [
            {"name": n, "resourceClaimName": c["metadata"]["name"]}
            for n, c in claims.items()]}}, namespace=ns, subresource="status")
        return claims

    def delete_pod(self, pod: JsonObject, claims: Mapping[str, JsonObject]) -> None:
        ns = pod["metadata"]["namespace"]
        for claim in claims.values():
            self.admin.delete(CLAIMS, claim["metadata"]["name"], namespace=ns)
        self.admin.delete(PODS, pod["metadata"]["name"], namespace=ns)

    # --- the kubelet -----------------------------------------------------------------------

    def write_status(self, pod: JsonObject, status: JsonObject) -> None:
        self.kubelet.patch(PODS, pod["metadata"]["name"], {"status": status},
                           namespace=pod["metadata"]["namespace"], subresource="status")
