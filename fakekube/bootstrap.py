"""The RBAC objects a new cluster already holds (kube-apiserver's bootstrap policy), created when
the fake authorizes requests: `cluster-admin` for `system:masters`, the health, version and
discovery paths for every authenticated user, and the scheduler's role (the parts a simulated
scheduler allocating DRA claims uses). Labelled as the apiserver labels its defaults.
"""

from __future__ import annotations

import copy
from typing import Any

JsonObject = dict[str, Any]
_API_VERSION = "rbac.authorization.k8s.io/v1"
_META: JsonObject = {"labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
         "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}}
_READ = ["get", "list", "watch"]


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> JsonObject:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs}


_ROLES: dict[str, list[JsonObject]] = {
    "cluster-admin": [_rule(["*"], ["*"], ["*"]), {"nonResourceURLs": ["*"], "verbs": ["*"]}],
    "system:public-info-viewer": [{
        "nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"],
        "verbs": ["get"]}],
    "system:discovery": [{
        "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez",
                            "/openapi", "/openapi/*", "/readyz", "/version", "/version/"],
        "verbs": ["get"]}],
    "system:kube-scheduler": [
        _rule(["", "events.k8s.io"], ["events"], ["create", "patch", "update"]),
        _rule([""], ["pods"], [*_READ, "delete"]),
        _rule([""], ["bindings", "pods/binding"], ["create"]),
        _rule([""], ["pods/status"], ["patch", "update"]),
        _rule([""], ["nodes", "namespaces"], _READ),
        _rule(["resource.k8s.io"], ["resourceclaims", "deviceclasses", "resourceslices"], _READ),
        _rule(["resource.k8s.io"], ["resourceclaims/status"], ["get", "patch", "update"]),
    ],
}
_BINDINGS: dict[str, list[JsonObject]] = {
    "cluster-admin": [{"kind": "Group", "name": "system:masters"}],
    "system:public-info-viewer": [{"kind": "Group", "name": "system:authenticated"},
                                  {"kind": "Group", "name": "system:unauthenticated"}],
    "system:discovery": [{"kind": "Group", "name": "system:authenticated"}],
    "system:kube-scheduler": [{"kind": "User", "name": "system:kube-scheduler"}],
}


def _metadata(name: str) -> JsonObject:
    return {"name": name, **copy.deepcopy(_META)}


def objects() -> list[JsonObject]:
    """The ClusterRoles and their ClusterRoleBindings, roles first."""
    roles = [{"apiVersion": _API_VERSION, "kind": "ClusterRole",
              "metadata": _metadata(name), "rules": rules}
             for name, rules in _ROLES.items()]
    bindings = [{"apiVersion": _API_VERSION, "kind": "ClusterRoleBinding",
                 "metadata": _metadata(name),
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                             "name": name},
                 "subjects": [{"apiGroup": "rbac.authorization.k8s.io", **s} for s in subjects]}
                for name, subjects in _BINDINGS.items()]
    return roles + bindings
