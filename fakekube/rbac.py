"""Authorization as kube-apiserver's `--authorization-mode=Node,RBAC` decides it, from the
rbac.authorization.k8s.io/v1 objects in the store (read on every decision, so a role applied or
edited through the API takes effect on the next request, as the informers make it in a moment).

The chain: members of `system:masters` are allowed everything (the privileged-group
authorizer that comes before any mode); then `fakekube.nodeauth` for kubelets; then RBAC.
RBAC, as `k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac`: every ClusterRoleBinding, then
the RoleBindings of the request's namespace (a RoleBinding may name a ClusterRole: its rules
granted in that namespace only); a binding applies when a subject matches (User by name, Group
by membership, ServiceAccount by `system:serviceaccount:NS:NAME`, NS defaulting to the
binding's); a rule allows when verb, API group, resource (`resource/subresource`, `*`,
`*/subresource`) and resourceNames all match, or verb and nonResourceURLs (`*` suffix) do.
`resourceNames` match only a request that names an object, so a create (which names none on
the URL), a deletecollection, or a list/watch without a `metadata.name` field selector is never
allowed by a rule that lists names. A binding whose role is missing is skipped, and the denial's
reason says so, as the apiserver's does.

Not modelled: aggregated ClusterRoles (`aggregationRule`: the controller's filled-in rules are
not computed) and the escalation checks on writes of roles and bindings.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fakekube import nodeauth
from fakekube.requestinfo import Attributes
from fakekube.rules import Decision, rule_allows
from fakekube.store import Store

JsonObject = dict[str, Any]
GROUP = "rbac.authorization.k8s.io"
ROLES = (GROUP, "roles")
CLUSTER_ROLES = (GROUP, "clusterroles")
ROLE_BINDINGS = (GROUP, "rolebindings")
CLUSTER_ROLE_BINDINGS = (GROUP, "clusterrolebindings")
MASTERS = "system:masters"


def service_account_user(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def _applies(subject: JsonObject, user: str, groups: tuple[str, ...], namespace: str) -> bool:
    kind, name = subject.get("kind"), str(subject.get("name") or "")
    if kind == "User":
        return user == name
    if kind == "Group":
        return name in groups
    if kind == "ServiceAccount":
        sa_namespace = str(subject.get("namespace") or namespace)
        return bool(sa_namespace) and user == service_account_user(sa_namespace, name)
    return False


def _describe(binding: JsonObject, subject: JsonObject) -> str:
    meta, ref = binding["metadata"], binding.get("roleRef") or {}
    name = meta["name"] + (f"/{meta['namespace']}" if meta.get("namespace") else "")
    who = str(subject.get("name") or "")
    if subject.get("kind") == "ServiceAccount":
        who += "/" + str(subject.get("namespace") or meta.get("namespace") or "")
    return (f'{binding["kind"]} "{name}" of {ref.get("kind")} "{ref.get("name")}" to '
            f'{subject.get("kind")} "{who}"')


class Authorizer:
    """Decides requests from the RBAC objects in `store`."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def authorize(self, user: str, groups: tuple[str, ...], attrs: Attributes) -> Decision:
        if MASTERS in groups:
            return Decision(True)
        node = nodeauth.decide(self.store, user, groups, attrs)
        if node is not None:
            return node
        errors: list[str] = []
        for binding, subject, rules in self._grants(user, groups, attrs.namespace, errors):
            if any(rule_allows(rule, attrs) for rule in rules):
                return Decision(True, f"RBAC: allowed by {_describe(binding, subject)}")
        if not errors:
            return Decision(False)
        shown = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
        return Decision(False, f"RBAC: {shown}")

    def _grants(self, user: str, groups: tuple[str, ...], namespace: str,
                errors: list[str]) -> Iterator[tuple[JsonObject, JsonObject, list[JsonObject]]]:
        """(binding, the subject that matched, the role's rules) for each binding that applies."""
        bindings = [(b, "") for b in self.store.items(CLUSTER_ROLE_BINDINGS)]
        if namespace:
            bindings += [(b, namespace) for b in self.store.items(ROLE_BINDINGS, namespace)]
        for binding, ns in bindings:
            subject = next((s for s in binding.get("subjects") or ()
                            if _applies(s, user, groups, ns)), None)
            if subject is None:
                continue
            rules = self._rules(binding.get("roleRef") or {}, ns, errors)
            if rules is not None:
                yield binding, subject, rules

    def _rules(self, ref: JsonObject, namespace: str,
               errors: list[str]) -> list[JsonObject] | None:
        name = str(ref.get("name") or "")
        if ref.get("kind") == "ClusterRole":
            role = self.store.get(CLUSTER_ROLES, "", name)
            missing = f'clusterrole.rbac.authorization.k8s.io "{name}" not found'
        elif ref.get("kind") == "Role" and namespace:
            role = self.store.get(ROLES, namespace, name)
            missing = f'role.rbac.authorization.k8s.io "{name}" not found'
        else:
            role, missing = None, f"unknown roleRef kind {ref.get('kind')!r}"
        if role is None:
            errors.append(missing)
            return None
        return list(role.get("rules") or ())
