"""What a real cluster must hold before `simnode up --kubeconfig` starts the pod there, checked
as the kubeconfig's identity before anything starts.

The rendered base's CustomResourceDefinitions, Namespace, ServiceAccount and RBAC (Roles,
ClusterRoles and their bindings) must be in the cluster as the base renders them: a role whose
rules differ, or a binding whose role or subjects differ, counts as missing, since the pod's
rights are to be the manifest's. The cluster must serve `resource.k8s.io/v1` (Kubernetes 1.34
or later). And the base's DaemonSet must not be there: its controller adopts every orphaned Pod
its selector matches and runs its own pod on every node it tolerates (the base tolerates every
taint, the simulated node's too), so simnode's Pod would be taken over and replaced.

`PrerequisiteError` names every object missing or different and the command that applies them
(`simnode prerequisites`, the base without its DaemonSet, piped to `kubectl apply`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from simnode.cluster import control
from simnode.cluster.api import RESOURCE_SLICES, Api, ClusterError, StatusError

JsonObject = dict[str, Any]
CHECKED_KINDS: Final = ("CustomResourceDefinition", "Namespace", "ServiceAccount",
                        "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding")
_ROLE_KINDS: Final = ("ClusterRole", "Role")
_BINDING_KINDS: Final = ("ClusterRoleBinding", "RoleBinding")
_RULE_FIELDS: Final = ("apiGroups", "resources", "resourceNames", "verbs", "nonResourceURLs")


class PrerequisiteError(ClusterError):
    """The cluster lacks what the pod needs; the message names each object and the fix."""


def _rules(role: Mapping[str, Any]) -> list[tuple[tuple[str, tuple[str, ...]], ...]]:
    return sorted(tuple((f, tuple(sorted(rule.get(f) or ()))) for f in _RULE_FIELDS)
                  for rule in role.get("rules") or ())


def _binding(binding: Mapping[str, Any]) -> tuple[Any, ...]:
    ref = binding.get("roleRef") or {}
    own = (binding.get("metadata") or {}).get("namespace") or ""
    subjects = sorted(
        (str(s.get("kind")), str(s.get("name")),
         str(s.get("namespace") or own) if s.get("kind") == "ServiceAccount" else "")
        for s in binding.get("subjects") or ())
    return (ref.get("kind"), ref.get("name"), tuple(subjects))


def difference(wanted: Mapping[str, Any], found: Mapping[str, Any]) -> str | None:
    """Why the cluster's copy of a rendered object is not what the pod needs, or None."""
    kind = wanted["kind"]
    if kind in _ROLE_KINDS and _rules(wanted) != _rules(found):
        return "its rules differ from the rendered base's"
    if kind in _BINDING_KINDS and _binding(wanted) != _binding(found):
        return "its role or subjects differ from the rendered base's"
    return None


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj['kind']} {where}{meta.get('name')}"


def problems(api: Api, docs: Iterable[JsonObject]) -> list[str]:
    """Each rendered object the pod needs that the cluster lacks or holds otherwise, as
    `Kind ns/name: why`; the base's DaemonSet when the cluster runs it."""
    found_problems = []
    for obj in docs:
        kind, meta = obj.get("kind"), obj.get("metadata") or {}
        namespace = meta.get("namespace")
        if kind == "DaemonSet":
            if api.get(control.resource_of(obj), str(meta["name"]),
                       namespace=namespace) is not None:
                found_problems.append(
                    f"{_name(obj)}: runs in the cluster, and its controller would adopt"
                    " simnode's Pod (same labels) and replace it with its own (delete the"
                    " DaemonSet, or use a cluster without it)")
            continue
        if kind not in CHECKED_KINDS:
            continue
        found = api.get(control.resource_of(obj), str(meta["name"]), namespace=namespace)
        why = "missing" if found is None else difference(obj, found)
        if why is not None:
            found_problems.append(f"{_name(obj)}: {why}")
    return found_problems


def serves_resource_v1(api: Api) -> None:
    try:
        api.items(RESOURCE_SLICES, limit=1)
    except StatusError as exc:
        if exc.code != 404:
            raise
        raise PrerequisiteError(
            f"the cluster at {api.access} does not serve resource.k8s.io/v1 ResourceSlices:"
            " the display operator needs Kubernetes 1.34 or later") from exc


def check(api: Api, docs: Iterable[JsonObject], *, fix: str) -> None:
    """Raise PrerequisiteError naming what is missing, and `fix`, the command that applies it."""
    serves_resource_v1(api)
    found = problems(api, docs)
    if found:
        raise PrerequisiteError(
            f"the cluster at {api.access} lacks what the pod needs:\n"
            + "".join(f"  {p}\n" for p in found)
            + f"apply the rendered base without its DaemonSet with `{fix}`, then run"
              " `simnode up` again")


def without_daemonsets(docs: Iterable[JsonObject]) -> list[JsonObject]:
    """What `simnode prerequisites` prints: every rendered object but the DaemonSets."""
    return [d for d in docs if d and d.get("kind") != "DaemonSet"]

