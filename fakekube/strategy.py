"""Per-kind behaviour of a write, after the apiserver's registry strategies: what a create does
to `status`, the server-owned metadata, name formats, when `metadata.generation` moves, and the
kind-specific checks (DRA rules, CRD shape).
"""

from __future__ import annotations

import datetime
import secrets
import uuid
from typing import Any

from fakekube import dra, kinds, rbacvalidation, status
from fakekube.jsoncopy import copy_json
from fakekube.kinds import Kind
from fakekube.status import Cause

JsonObject = dict[str, Any]
# The alphabet and length of apiserver generated name suffixes (apiserver/pkg/storage/names).
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SUFFIX_LEN = 5
_MAX_GENERATE_PREFIX = 63 - _SUFFIX_LEN
# Server-owned metadata a main update may not change; taken from the stored object.
_KEPT_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
              "generation", "name", "namespace")


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def generated_name(prefix: str) -> str:
    suffix = "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(_SUFFIX_LEN))
    return prefix[:_MAX_GENERATE_PREFIX] + suffix


# RBAC objects are named by path segment (ValidateRBACName), so `system:node` is a valid name.
_PATH_SEGMENT_NAMED = frozenset({"roles", "clusterroles", "rolebindings", "clusterrolebindings"})


def name_causes(kind: Kind, name: str) -> list[Cause]:
    if kind.group == "rbac.authorization.k8s.io" and kind.plural in _PATH_SEGMENT_NAMED:
        if name in (".", "..") or "/" in name or "%" in name:
            return [Cause("metadata.name", "FieldValueInvalid",
                          f'Invalid value: "{name}": may not be \'.\' or \'..\' and may not '
                          "contain '/' or '%'")]
        return []
    ok = dra.is_dns_label(name) if kind.plural == "namespaces" else dra.is_dns_subdomain(name)
    if ok:
        return []
    what = dra.DNS_LABEL_MSG if kind.plural == "namespaces" else dra.DNS_SUBDOMAIN_MSG
    return [Cause("metadata.name", "FieldValueInvalid", f'Invalid value: "{name}": {what}')]


def _crd_status(crd: JsonObject, stamp: str) -> JsonObject:
    spec = crd.get("spec") or {}
    conditions = [
        {"type": t, "status": "True", "reason": r, "message": m, "lastTransitionTime": stamp}
        for t, r, m in (("NamesAccepted", "NoConflicts", "no conflicts found"),
                        ("Established", "InitialNamesAccepted", "the initial names have been "
                                                                "accepted"))
    ]
    stored = [v["name"] for v in spec.get("versions") or () if v.get("storage")]
    return {"conditions": conditions, "acceptedNames": spec.get("names") or {},
            "storedVersions": stored}


def prepare_create(kind: Kind, obj: JsonObject, *, stamp: str) -> None:
    """Server-owned fields and `status` of a new object, in place."""
    meta = obj["metadata"]
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = stamp
    meta["generation"] = 1
    for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"):
        meta.pop(key, None)
    match kind.status_on_create:
        case "drop":
            obj.pop("status", None)
        case "pending":
            obj["status"] = {"phase": "Pending"}
        case "active":
            obj["status"] = {"phase": "Active"}
            obj.setdefault("spec", {})["finalizers"] = ["kubernetes"]
        case "established":
            obj["status"] = _crd_status(obj, stamp)
        case "keep":
            pass


def merge_update(kind: Kind, old: JsonObject, new: JsonObject, *, status_only: bool) -> JsonObject:
    """The object an update stores before checks: a main update keeps the stored status (when the
    kind has a status subresource), a status update changes nothing but status."""
    if status_only:
        merged = copy_json(old)
        if "status" in new:
            merged["status"] = copy_json(new["status"])
        else:
            merged.pop("status", None)
        return merged
    merged = copy_json(new)
    meta = merged.setdefault("metadata", {})
    for key in _KEPT_META:
        if key in old["metadata"]:
            meta[key] = old["metadata"][key]
        else:
            meta.pop(key, None)
    if kind.status_subresource:
        if "status" in old:
            merged["status"] = copy_json(old["status"])
        else:
            merged.pop("status", None)
    return merged


def _content(kind: Kind, obj: JsonObject) -> JsonObject:
    skip = {"metadata", "apiVersion", "kind"} | ({"status"} if kind.status_subresource else set())
    return {k: v for k, v in obj.items() if k not in skip}


def bump_generation(kind: Kind, old: JsonObject, new: JsonObject) -> None:
    """`metadata.generation` moves when anything but metadata (and status, for kinds with a status
    subresource) changes."""
    gen = int(old["metadata"].get("generation", 1))
    new["metadata"]["generation"] = gen + 1 if _content(kind, old) != _content(kind, new) else gen


def _without_rv(obj: JsonObject) -> JsonObject:
    meta = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
    return {**obj, "metadata": meta}


def same_object(old: JsonObject, new: JsonObject) -> bool:
    """An update that changes nothing is answered without a write, as etcd3's GuaranteedUpdate
    does: no new resourceVersion, no watch event."""
    return _without_rv(old) == _without_rv(new)


def prepare(kind: Kind, new: JsonObject, old: JsonObject | None, *, device_taints: bool,
            stamp: str) -> None:
    if kind.key == ("resource.k8s.io", "resourceslices"):
        dra.prepare_slice(new, old, device_taints=device_taints, now=stamp)


def causes(kind: Kind, new: JsonObject, old: JsonObject | None, *, minor: int) -> list[Cause]:
    """Kind-specific validation after the schema: 422 causes, empty when valid."""
    if kind.key == ("resource.k8s.io", "resourceslices"):
        return dra.slice_causes(new, old, minor=minor)
    if kind.key == ("resource.k8s.io", "resourceclaims"):
        return dra.claim_causes(new, old)
    if kind.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
        kinds.kind_from_crd(new)  # raises the 422 itself, naming the CRD's bad field
    if kind.key in (("rbac.authorization.k8s.io", "rolebindings"),
                    ("rbac.authorization.k8s.io", "clusterrolebindings")):
        return rbacvalidation.binding_causes(new, old, namespaced=kind.namespaced)
    return []


def check(kind: Kind, new: JsonObject, old: JsonObject | None, *, minor: int) -> None:
    found = causes(kind, new, old, minor=minor)
    if found:
        raise status.invalid(kind.resource(new["metadata"].get("name", "")), found)
