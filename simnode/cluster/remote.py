"""`simnode up --kubeconfig K [--context C]`: the pod's cluster is a real one.

No kubelet serves the simulated node and no DaemonSet is applied, so the kubeconfig's identity
plays their parts in that cluster: it creates and deletes the Node
(`simnode.kubelet.node_object.NodeObject`) and the Pod (the rendered template on this Node,
without an owner: no DaemonSet controller made it), writes the Pod's status as the kubelet
does, reads the Secrets its volumes name, and requests the tokens of the manifest's
ServiceAccount with the TokenRequest API, bound to the Pod, renewed before they expire
(`simnode.kubelet.tokens`). The pod's binaries then reach the
cluster with their in-cluster configuration only, as in a pod: `KUBERNETES_SERVICE_HOST`/
`PORT` from the kubeconfig's server, `ca.crt` from its CA (the system's CA bundle when it names
none, which is what simnode itself then verifies the server with), and that token; so what
they may do is what the manifest's RBAC grants there.

The pod's own claim (liken's card) stays on this machine: liken publishes no devices for a
simulated card, so no ResourceClaim is made or allocated in the cluster (a cluster's resource
claim controller may make one from the template; it goes with the Pod).

The rights the identity needs are `USER_RULES` (a ClusterRole's rules).
"""

from __future__ import annotations

import shlex
import ssl
import time
import urllib.parse
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from simnode.cluster import control, preflight
from simnode.cluster.api import Access, Api, ClusterError, KubeconfigUnusableError, Resource
from simnode.kubelet.manifest import PodTemplate
from simnode.kubelet.tokens import IssuedToken

JsonObject = dict[str, Any]
SERVICE_ACCOUNTS: Final = Resource("v1", "serviceaccounts")
TOKEN_SECONDS: Final = 3607
"""What the kubelet asks for a projected token."""

def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> JsonObject:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs}


USER_RULES: Final = (
    # simnode.cluster.preflight's checks
    _rule([""], ["namespaces", "serviceaccounts"], ["get"]),
    _rule(["rbac.authorization.k8s.io"],
          ["roles", "rolebindings", "clusterroles", "clusterrolebindings"], ["get"]),
    _rule(["apiextensions.k8s.io"], ["customresourcedefinitions"], ["get"]),
    _rule(["apps"], ["daemonsets"], ["get"]),
    # the Node (simnode.kubelet.node_object.NodeObject) and its slices on the way out
    _rule([""], ["nodes"], ["get", "create", "patch", "delete"]),
    _rule([""], ["nodes/status"], ["patch"]),
    _rule(["resource.k8s.io"], ["resourceslices"], ["list", "delete"]),
    # the Pod, its status, its token and Secrets, as the DaemonSet controller and kubelet
    _rule([""], ["pods"], ["create", "delete"]),
    _rule([""], ["pods/status"], ["patch"]),
    _rule([""], ["serviceaccounts/token"], ["create"]),
    _rule([""], ["secrets"], ["get", "list", "watch"]),
    # what `up` and `status` print; `simnode claim`'s claims, allocated as the scheduler would
    _rule(["display.liken.sh"], ["displays"], ["list"]),
    _rule(["resource.k8s.io"], ["resourceclaims"], ["list", "create", "delete"]),
    _rule(["resource.k8s.io"], ["resourceclaims/status"], ["patch"]),
)
"""The rules of a ClusterRole that lets a kubeconfig's identity run `up --kubeconfig`."""
_SYSTEM_BUNDLES: Final = (Path("/etc/ssl/certs/ca-certificates.crt"),
                          Path("/etc/pki/tls/certs/ca-bundle.crt"))


def service_address(url: str, origin: str) -> tuple[str, int]:
    """The host and port a pod's in-cluster configuration can say for `url`."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "https":
        raise KubeconfigUnusableError(
            f"{origin}: server {url} is not https: a pod's in-cluster configuration reaches"
            " its API server over https only")
    if parts.path.strip("/"):
        raise KubeconfigUnusableError(
            f"{origin}: server {url} has a path ({parts.path}): KUBERNETES_SERVICE_HOST and"
            " _PORT cannot state one")
    if parts.hostname is None:
        raise KubeconfigUnusableError(f"{origin}: server {url} names no host")
    return parts.hostname, parts.port or 443


def system_bundle() -> bytes | None:
    """The system's CA certificates, as this machine's TLS clients trust them, or None."""
    found: str | None = ssl.get_default_verify_paths().cafile
    candidates: list[Path] = [Path(found)] if found else []
    for path in [*candidates, *_SYSTEM_BUNDLES]:
        if path.is_file():
            return path.read_bytes()
    return None


def fix_command(kubeconfig: Path, context: str | None) -> str:
    """The command that applies the rendered base but its DaemonSet to this cluster."""
    kubectl = ["kubectl", f"--kubeconfig={kubeconfig}"]
    if context is not None:
        kubectl.append(f"--context={context}")
    return f"simnode prerequisites | {shlex.join(kubectl)} apply -f -"


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


class Remote:
    """The cluster a kubeconfig (and context) reaches, as its identity."""

    def __init__(self, kubeconfig: Path, *, context: str | None, node: str,
                 token_seconds: int = TOKEN_SECONDS) -> None:
        self.kubeconfig = kubeconfig.absolute()
        self.token_seconds = token_seconds
        self.context = context
        self.node = node
        self.api = Api(Access.from_kubeconfig(self.kubeconfig, context=context))
        endpoint = self.api.endpoint
        if endpoint.insecure:
            raise KubeconfigUnusableError(
                f"{endpoint.origin}: insecure-skip-tls-verify: a pod verifies its API server"
                " with its ca.crt; give the kubeconfig the cluster's CA")
        self.url = endpoint.url
        self._address = service_address(endpoint.url, endpoint.origin)
        ca = endpoint.ca_pem or (endpoint.ca_file.read_bytes() if endpoint.ca_file else None)
        ca = ca or system_bundle()
        if ca is None:
            raise KubeconfigUnusableError(
                f"{endpoint.origin}: it names no CA for {endpoint.url} and this machine has no"
                " CA bundle: add the cluster's certificate-authority-data")
        self._ca = ca

    def start(self, docs: list[JsonObject]) -> None:
        preflight.check(self.api, docs, fix=fix_command(self.kubeconfig, self.context))

    @property
    def reader(self) -> Api:
        return self.api

    @property
    def kubelet(self) -> Api:
        return self.api

    @property
    def owner(self) -> Api:
        return self.api

    @property
    def service_address(self) -> tuple[str, int]:
        return self._address

    @property
    def ca_pem(self) -> bytes:
        return self._ca

    def issue_token(self, namespace: str, account: str, pod: JsonObject) -> IssuedToken:
        """A token of `namespace/account` bound to `pod`, as the kubelet requests it."""
        meta = pod["metadata"]
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                   "spec": {"expirationSeconds": self.token_seconds, "boundObjectRef": {
                       "apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                       "uid": meta["uid"]}}}
        now = time.time()
        answer = self.api.create(SERVICE_ACCOUNTS, request, namespace=namespace, name=account,
                                 subresource="token")
        try:
            token = str(answer["status"]["token"])
            expires = _epoch(str(answer["status"]["expirationTimestamp"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ClusterError(f"the TokenRequest for {namespace}/{account} at {self.url}"
                               f" answered no token and expiry ({exc!r})") from exc
        return IssuedToken(token, expires_at=expires, issued_at=now)

    def create_pod(self, template: PodTemplate) -> JsonObject:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "generateName": f"{template.daemonset}-", "namespace": template.namespace,
            "labels": dict(template.labels)},
            "spec": {**template.spec, "nodeName": self.node}}
        return self.api.create(control.PODS, pod, namespace=template.namespace)

    def create_claims(self, template: PodTemplate, pod: JsonObject,
                      allocation: Mapping[str, str], driver: str) -> dict[str, JsonObject]:
        return {}  # liken's claim is this machine's (module docstring)

    def write_status(self, pod: JsonObject, status: JsonObject) -> None:
        self.api.patch(control.PODS, pod["metadata"]["name"], {"status": status},
                       namespace=pod["metadata"]["namespace"], subresource="status")

    def delete_pod(self, pod: JsonObject, claims: Mapping[str, JsonObject]) -> None:
        self.api.delete(control.PODS, pod["metadata"]["name"],
                        namespace=pod["metadata"]["namespace"])

    def denials(self) -> list[str]:
        return ["unknown: a real cluster's refusals are in its audit log"]

    def stop(self) -> None:
        pass
