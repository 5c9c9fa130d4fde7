"""The kinds the fake serves: built-in ones the project uses and custom resources registered from
CustomResourceDefinition objects, with the per-kind behaviour the apiserver's strategies decide
(scope, status subresource, what a create does to `status`, what a delete answers, which fields a
field selector may name).

Objects of a kind are stored once per (group, plural); every served version reads and writes the
same object with only `apiVersion` rewritten, which is what a CRD's `conversion: None` does.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from fakekube import status
from fakekube.status import Cause

JsonObject = dict[str, Any]
StatusOnCreate = Literal["keep", "drop", "pending", "active", "established"]

# What DefaultMetaV1FieldSelectorConversion accepts for kinds without their own conversion.
NAMESPACED_FIELDS = ("metadata.name", "metadata.namespace")
# Selectable fields the apiserver renders with fmt.Sprint of a bool: "false" when unset.
BOOL_FIELDS = frozenset({"spec.unschedulable", "spec.hostNetwork"})


@dataclass(frozen=True, slots=True)
class Kind:
    """One resource as the apiserver serves it. Defaults are those of most built-in registries."""

    group: str
    versions: tuple[str, ...]
    kind: str
    plural: str
    namespaced: bool
    status_subresource: bool = False
    status_on_create: StatusOnCreate = "keep"
    create_only: bool = False
    returns_deleted: bool = True
    unconditional_update: bool = True
    field_labels: tuple[str, ...] = NAMESPACED_FIELDS
    builtin_schema: bool = True
    schemas: Mapping[str, JsonObject] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version

    def resource(self, name: str = "") -> status.Resource:
        return status.Resource(group=self.group, plural=self.plural, kind=self.kind, name=name)


def field_value(obj: JsonObject, label: str) -> str:
    """The string a field selector compares for `label` (a dotted path into the object)."""
    node: Any = obj
    for part in label.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if node is None:
        return "false" if label in BOOL_FIELDS else ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


_CORE_POD_FIELDS = (
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)

BUILTIN_KINDS = (
    Kind("", ("v1",), "Namespace", "namespaces", namespaced=False, status_subresource=True,
         status_on_create="active", field_labels=("metadata.name", "status.phase")),
    Kind("", ("v1",), "Node", "nodes", namespaced=False, status_subresource=True,
         returns_deleted=False, field_labels=("metadata.name", "spec.unschedulable")),
    Kind("", ("v1",), "Pod", "pods", namespaced=True, status_subresource=True,
         status_on_create="pending", field_labels=_CORE_POD_FIELDS),
    Kind("resource.k8s.io", ("v1",), "ResourceSlice", "resourceslices", namespaced=False,
         field_labels=("metadata.name", "spec.nodeName", "spec.driver")),
    Kind("resource.k8s.io", ("v1",), "ResourceClaim", "resourceclaims", namespaced=True,
         status_subresource=True, status_on_create="drop"),
    Kind("resource.k8s.io", ("v1",), "ResourceClaimTemplate", "resourceclaimtemplates",
         namespaced=True),
    Kind("resource.k8s.io", ("v1",), "DeviceClass", "deviceclasses", namespaced=False),
    Kind("authentication.k8s.io", ("v1",), "TokenReview", "tokenreviews", namespaced=False,
         create_only=True),
    Kind("authorization.k8s.io", ("v1",), "SubjectAccessReview", "subjectaccessreviews",
         namespaced=False, create_only=True),
    Kind("apiextensions.k8s.io", ("v1",), "CustomResourceDefinition",
         "customresourcedefinitions", namespaced=False, status_subresource=True,
         status_on_create="established"),
    # Stored only, no controllers: what a rendered deploy/base holds, so it can be applied.
    Kind("", ("v1",), "ServiceAccount", "serviceaccounts", namespaced=True),
    Kind("", ("v1",), "Secret", "secrets", namespaced=True,
         field_labels=(*NAMESPACED_FIELDS, "type")),
    Kind("", ("v1",), "ConfigMap", "configmaps", namespaced=True),
    Kind("", ("v1",), "ResourceQuota", "resourcequotas", namespaced=True,
         status_subresource=True, status_on_create="drop"),
    Kind("apps", ("v1",), "DaemonSet", "daemonsets", namespaced=True, status_subresource=True,
         status_on_create="drop"),
    Kind("networking.k8s.io", ("v1",), "NetworkPolicy", "networkpolicies", namespaced=True),
    Kind("rbac.authorization.k8s.io", ("v1",), "Role", "roles", namespaced=True),
    Kind("rbac.authorization.k8s.io", ("v1",), "ClusterRole", "clusterroles", namespaced=False),
    Kind("rbac.authorization.k8s.io", ("v1",), "RoleBinding", "rolebindings", namespaced=True),
    Kind("rbac.authorization.k8s.io", ("v1",), "ClusterRoleBinding", "clusterrolebindings",
         namespaced=False),
    Kind("admissionregistration.k8s.io", ("v1",), "ValidatingAdmissionPolicy",
         "validatingadmissionpolicies", namespaced=False, status_subresource=True,
         status_on_create="drop"),
    Kind("admissionregistration.k8s.io", ("v1",), "ValidatingAdmissionPolicyBinding",
         "validatingadmissionpolicybindings", namespaced=False),
)

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _crd_causes(crd: JsonObject) -> list[Cause]:
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    causes = []
    for path, value in (("spec.group", spec.get("group")), ("spec.names.kind", names.get("kind")),
                        ("spec.names.plural", names.get("plural"))):
        if not isinstance(value, str) or not value:
            causes.append(Cause(path, "FieldValueRequired", "Required value"))
    if spec.get("scope") not in ("Cluster", "Namespaced"):
        causes.append(Cause("spec.scope", "FieldValueNotSupported",
                            'Unsupported value: supported values: "Cluster", "Namespaced"'))
    if not [v for v in spec.get("versions") or () if v.get("served")]:
        causes.append(Cause("spec.versions", "FieldValueRequired", "must have a served version"))
    if causes:
        return causes
    plural = names["plural"]
    if not _DNS_LABEL.match(plural):
        causes.append(Cause("spec.names.plural", "FieldValueInvalid", "must be a DNS label"))
    expected = f"{plural}.{spec['group']}"
    if crd.get("metadata", {}).get("name") != expected:
        causes.append(Cause("metadata.name", "FieldValueInvalid",
                            f'must be spec.names.plural+"."+spec.group: "{expected}"'))
    return causes


def kind_from_crd(crd: JsonObject) -> Kind:
    """The Kind a CRD defines; 422 naming the bad field when the CRD is not one the fake serves.

    Per-version subresources and selectable fields are taken from the storage version.
    """
    causes = _crd_causes(crd)
    name = str(crd.get("metadata", {}).get("name", ""))
    if causes:
        res = status.Resource("apiextensions.k8s.io", "customresourcedefinitions",
                              "CustomResourceDefinition", name)
        raise status.invalid(res, causes)
    spec = crd["spec"]
    served = [v for v in spec["versions"] if v.get("served")]
    storage = next((v for v in served if v.get("storage")), served[0])
    selectable = tuple(
        str(f["jsonPath"]).lstrip(".") for f in storage.get("selectableFields") or ()
    )
    namespaced = spec["scope"] == "Namespaced"
    has_status = "status" in (storage.get("subresources") or {})
    return Kind(
        group=spec["group"],
        versions=tuple(v["name"] for v in served),
        kind=spec["names"]["kind"],
        plural=spec["names"]["plural"],
        namespaced=namespaced,
        status_subresource=has_status,
        status_on_create="drop" if has_status else "keep",
        unconditional_update=False,
        field_labels=NAMESPACED_FIELDS + selectable,
        builtin_schema=False,
        schemas={v["name"]: (v.get("schema") or {}).get("openAPIV3Schema") or {} for v in served},
    )


class Registry:
    """The kinds being served, found by URL parts or by Kind name. Not thread-safe on its own:
    the store's lock guards it."""

    def __init__(self) -> None:
        self._kinds: dict[tuple[str, str], Kind] = {k.key: k for k in BUILTIN_KINDS}

    def __iter__(self) -> Iterator[Kind]:
        return iter(list(self._kinds.values()))

    def lookup(self, group: str, version: str, plural: str) -> Kind | None:
        kind = self._kinds.get((group, plural))
        return kind if kind is not None and version in kind.versions else None

    def by_kind(self, kind: str, *, group: str | None = None) -> Kind:
        found = [k for k in self._kinds.values()
                 if k.kind == kind and (group is None or k.group == group)]
        if len(found) != 1:
            raise LookupError(f"kind {kind!r} (group {group!r}) matches {len(found)} served kinds")
        return found[0]

    def add(self, kind: Kind) -> None:
        self._kinds[kind.key] = kind

    def remove(self, key: tuple[str, str]) -> None:
        self._kinds.pop(key, None)
