"""The Node authorizer, for kubelets (user `system:node:NAME` in group `system:nodes`): the
static rules the apiserver grants every node (a subset of bootstrappolicy's NodeRules: what a
kubelet does to pods, nodes, events, DRA objects and reviews), with the own-node checks the
NodeRestriction admission plugin adds folded in: a kubelet writes the status of pods bound to
its node and its own Node object only. Requests of other users, and of nodes on anything else,
get no opinion here and go on to RBAC.

A kubelet lists and watches pods only with the field selector `spec.nodeName=<itself>`
(AuthorizeNodeWithSelectors, on since 1.34).

Not modelled: the graph that limits a node's reads of secrets, configmaps and claims to those
its pods reference (claims are readable by any node here).
"""

from __future__ import annotations

from typing import Any

from fakekube.requestinfo import Attributes
from fakekube.rules import Decision, rule_allows
from fakekube.selectors import SelectorError, parse_fields
from fakekube.store import Store

JsonObject = dict[str, Any]
NODE_PREFIX = "system:node:"
NODES_GROUP = "system:nodes"

_READ = ("get", "list", "watch")
_NODE_RULES: tuple[JsonObject, ...] = (
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["create", *_READ, "patch", "update"]},
    {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch", "update"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": [*_READ, "create", "delete"]},
    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch", "update"]},
    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"],
     "verbs": ["create", "patch", "update"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
     "verbs": [*_READ, "create", "update", "patch", "delete", "deletecollection"]},
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"],
     "verbs": ["create"]},
)


def node_name(user: str, groups: tuple[str, ...]) -> str | None:
    """The node a user is, or None when it is not a kubelet's identity."""
    if NODES_GROUP in groups and user.startswith(NODE_PREFIX) and len(user) > len(NODE_PREFIX):
        return user[len(NODE_PREFIX):]
    return None


def _selects_own_pods(node: str, attrs: Attributes) -> bool:
    try:
        selector = parse_fields(attrs.field_selector)
    except SelectorError:
        return False
    return any(t.field == "spec.nodeName" and t.value == node and not t.negate
               for t in selector.terms)


def _own_node_refusal(store: Store, node: str, attrs: Attributes) -> str | None:
    """Why the Node authorizer or NodeRestriction refuses this request, or None."""
    if (attrs.api_group == "" and attrs.resource == "pods" and not attrs.subresource
            and attrs.verb in ("list", "watch") and not _selects_own_pods(node, attrs)):
        return "node: can only list/watch pods with spec.nodeName field selector"
    if attrs.api_group != "" or attrs.verb not in ("update", "patch"):
        return None
    if attrs.resource == "nodes" and attrs.name != node:
        return f'node "{node}" is not allowed to modify node "{attrs.name}"'
    if attrs.resource == "pods" and attrs.subresource == "status":
        pod = store.get(("", "pods"), attrs.namespace, attrs.name)
        bound = ((pod or {}).get("spec") or {}).get("nodeName")
        if pod is not None and bound != node:
            return (f'node "{node}" can only update pod status for pods with spec.nodeName '
                    "set to itself")
    return None


def decide(store: Store, user: str, groups: tuple[str, ...], attrs: Attributes) -> Decision | None:
    """Allow or deny a kubelet's request, or None (no opinion)."""
    node = node_name(user, groups)
    if node is None or not any(rule_allows(r, attrs) for r in _NODE_RULES):
        return None
    refusal = _own_node_refusal(store, node, attrs)
    return Decision(False, refusal) if refusal else Decision(True)
