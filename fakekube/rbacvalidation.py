"""The apiserver's validation of RoleBindings and ClusterRoleBindings
(`pkg/apis/rbac/validation`): a roleRef naming a Role or ClusterRole of the RBAC group (a
ClusterRoleBinding only a ClusterRole) that never changes once created, and subjects of a known
kind with the API group that kind needs (a ServiceAccount in a ClusterRoleBinding must name its
namespace). Each failure is a 422 cause naming the field.
"""

from __future__ import annotations

import json
from typing import Any

from fakekube.status import Cause

JsonObject = dict[str, Any]
GROUP = "rbac.authorization.k8s.io"
_SUBJECT_GROUPS = {"ServiceAccount": "", "User": GROUP, "Group": GROUP}


def _unsupported(field: str, value: object, supported: list[str]) -> Cause:
    shown = ", ".join(f'"{s}"' for s in supported)
    return Cause(field, "FieldValueNotSupported",
                 f"Unsupported value: {json.dumps(value)}: supported values: {shown}")


def _required(field: str) -> Cause:
    return Cause(field, "FieldValueRequired", "Required value")


def _role_ref_causes(ref: JsonObject, namespaced: bool) -> list[Cause]:
    kinds = ["Role", "ClusterRole"] if namespaced else ["ClusterRole"]
    causes = []
    if ref.get("kind") not in kinds:
        causes.append(_unsupported("roleRef.kind", ref.get("kind", ""), kinds))
    if ref.get("apiGroup") != GROUP:
        causes.append(_unsupported("roleRef.apiGroup", ref.get("apiGroup", ""), [GROUP]))
    if not ref.get("name"):
        causes.append(_required("roleRef.name"))
    return causes


def _subject_causes(i: int, subject: JsonObject, namespaced: bool) -> list[Cause]:
    path = f"subjects[{i}]"
    kind = subject.get("kind")
    if kind not in _SUBJECT_GROUPS:
        return [_unsupported(f"{path}.kind", kind or "", list(_SUBJECT_GROUPS))]
    causes = []
    if not subject.get("name"):
        causes.append(_required(f"{path}.name"))
    group = subject.get("apiGroup") or ""
    if group != _SUBJECT_GROUPS[kind]:
        causes.append(_unsupported(f"{path}.apiGroup", group, [_SUBJECT_GROUPS[kind]]))
    if kind == "ServiceAccount" and not namespaced and not subject.get("namespace"):
        causes.append(_required(f"{path}.namespace"))
    return causes


def binding_causes(new: JsonObject, old: JsonObject | None, *, namespaced: bool) -> list[Cause]:
    ref = new.get("roleRef") or {}
    causes = _role_ref_causes(ref, namespaced)
    for i, subject in enumerate(new.get("subjects") or ()):
        causes += _subject_causes(i, subject, namespaced)
    if old is not None and (old.get("roleRef") or {}) != ref:
        # The apiserver prints the Go struct, field names capitalized.
        shown = {"APIGroup": ref.get("apiGroup", ""), "Kind": ref.get("kind", ""),
                 "Name": ref.get("name", "")}
        causes.append(Cause("roleRef", "FieldValueInvalid",
                            f"Invalid value: {json.dumps(shown, separators=(',', ':'))}: "
                            "field is immutable"))
    return causes
