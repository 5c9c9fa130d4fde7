"""The `resource.k8s.io/v1` rules of the apiserver that a schema cannot express and the
operator's publisher can trip over (`pkg/apis/resource/validation`, docs/dra.md §3):
limits on devices, attributes and taints, name formats, one-of fields, immutable fields, and
the DRADeviceTaints gate that silently drops `spec.devices[].taints` when off (the default on
1.34 and 1.35) and stamps `timeAdded` when on.

Only a subset is here: no checks of capacities' quantities, counters, node selectors' terms,
binding conditions, or of ResourceClaim status against its allocation.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from fakekube.status import Cause

JsonObject = dict[str, Any]

MAX_DEVICES = 128
MAX_DEVICES_WITH_TAINTS = 64  # 1.35+: any device with taints lowers the slice's limit
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_ATTRIBUTE_STRING = 64
MAX_REQUESTS = 32
MAX_SUBREQUESTS = 8

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-(0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(\.(0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*)?"
    r"(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$"
)
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
# Built-in kinds whose required fields are left to the Go validation re-implemented here: the
# apiserver decodes a missing field as Go's zero value, so it is named by that validation
# ("spec.pool.name: Required value"), not by the OpenAPI schema's `required`.
GO_VALIDATED: Final = frozenset({"ResourceSlice"})
# A claim's spec and allocation never change once set; the apiserver shows no value.
SPEC_IMMUTABLE: Final = Cause("spec", "FieldValueInvalid",
                              "Invalid value: null: field is immutable")
ALLOCATION_SET: Final = Cause("status.allocation", "FieldValueInvalid",
                              "Invalid value: null: field cannot be modified once set")
_ATTRIBUTE_KINDS = ("int", "bool", "string", "version", "ints", "bools", "strings", "versions")
# The apiserver's own wording (apimachinery's validation), which clients show users.
DNS_LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters "
                 "or '-', and must start and end with an alphanumeric character (e.g. "
                 "'my-name',  or '123-abc', regex used for validation is "
                 "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
DNS_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                     "characters, '-' or '.', and must start and end with an alphanumeric "
                     "character (e.g. 'example.com', regex used for validation is "
                     "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
C_IDENTIFIER_MSG = ("a valid C identifier must start with alphabetic character or '_', followed "
                    "by a string of alphanumeric characters or '_' (e.g. 'my_name',  or "
                    "'MY_NAME',  or 'MyName', regex used for validation is "
                    "'[A-Za-z_][A-Za-z0-9_]*')")


def is_dns_subdomain(value: object, *, max_len: int = 253) -> bool:
    return isinstance(value, str) and len(value) <= max_len and bool(_DNS_SUBDOMAIN.match(value))


def is_dns_label(value: object) -> bool:
    return isinstance(value, str) and len(value) <= 63 and bool(_DNS_LABEL.match(value))


def go_value(value: object) -> str:
    """A value as the apiserver's field errors print it: strings quoted, numbers bare."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def _required(path: str) -> Cause:
    return Cause(path, "FieldValueRequired", "Required value")


def _invalid(path: str, message: str) -> Cause:
    return Cause(path, "FieldValueInvalid", f"Invalid value: {message}")


def _invalid_value(path: str, value: object, detail: str) -> Cause:
    return _invalid(path, f"{go_value(value)}: {detail}")


def _qualified_name_causes(name: str, path: str) -> list[Cause]:
    """An attribute or capacity name: a C identifier of at most 32 bytes, optionally after a
    DNS subdomain and '/'; the apiserver names the map, not the key, in its answer."""
    domain, _, ident = name.rpartition("/")
    causes = []
    if domain and not is_dns_subdomain(domain, max_len=63):
        causes.append(_invalid_value(path, domain, DNS_SUBDOMAIN_MSG))
    if len(ident) > 32:
        causes.append(Cause(path, "FieldValueTooLong", "Too long: may not be more than 32 bytes"))
    elif not _C_IDENTIFIER.match(ident):
        causes.append(_invalid_value(path, ident, C_IDENTIFIER_MSG))
    return causes


def _taint_effects(minor: int) -> tuple[str, ...]:
    return ("NoSchedule", "NoExecute", "None") if minor >= 35 else ("NoSchedule", "NoExecute")


def prepare_slice(new: JsonObject, old: JsonObject | None, *, device_taints: bool,
                  now: str) -> None:
    """What the strategy does before validation: drop taints while the gate is off (unless the
    stored object already uses them), stamp `timeAdded` on new taints while it is on."""
    devices = (new.get("spec") or {}).get("devices") or []
    old_uses = any(d.get("taints") for d in ((old or {}).get("spec") or {}).get("devices") or [])
    for device in devices:
        if not isinstance(device, dict) or "taints" not in device:
            continue
        if not device_taints and not old_uses:
            del device["taints"]
            continue
        for taint in device.get("taints") or []:
            if isinstance(taint, dict) and not taint.get("timeAdded"):
                taint["timeAdded"] = now


def _device_causes(device: JsonObject, path: str, minor: int) -> list[Cause]:
    causes: list[Cause] = []
    if not is_dns_label(device.get("name", "")):
        causes.append(_invalid_value(f"{path}.name", device.get("name", ""), DNS_LABEL_MSG))
    attrs = device.get("attributes") or {}
    capacity = device.get("capacity") or {}
    total = len(attrs) + len(capacity)
    if total > MAX_ATTRIBUTES_AND_CAPACITIES:
        causes.append(_invalid_value(path, total, "the total number of attributes and "
                                     f"capacities must not exceed {MAX_ATTRIBUTES_AND_CAPACITIES}"))
    for name in attrs:
        causes.extend(_qualified_name_causes(name, f"{path}.attributes"))
    for name in capacity:
        causes.extend(_qualified_name_causes(name, f"{path}.capacity"))
    for name, value in attrs.items():
        causes.extend(_attribute_causes(value, f"{path}.attributes[{name}]"))
    taints = device.get("taints") or []
    max_taints = 4 if minor < 35 else 16
    if len(taints) > max_taints:
        causes.append(Cause(f"{path}.taints", "FieldValueTooMany",
                            f"Too many: {len(taints)}: must have at most {max_taints} items"))
    for j, taint in enumerate(taints):
        tpath = f"{path}.taints[{j}]"
        if not isinstance(taint.get("key"), str) or not _LABEL_KEY.match(taint["key"]):
            causes.append(_invalid_value(f"{tpath}.key", taint.get("key"),
                                         "must be a qualified name"))
        if taint.get("effect") not in _taint_effects(minor):
            causes.append(Cause(f"{tpath}.effect", "FieldValueNotSupported",
                                f"Unsupported value: {go_value(taint.get('effect'))}: supported "
                                "values: " + ", ".join(go_value(e) for e in
                                                       sorted(_taint_effects(minor)))))
    return causes


def _attribute_causes(value: object, path: str) -> list[Cause]:
    if not isinstance(value, dict):
        return [_invalid(path, "must be an object")]
    # The list kinds are named in the answer but, their gate (DRAListTypeAttributes) off on
    # 1.37, dropped before validation: an attribute of a list alone has no value.
    present = [k for k in _ATTRIBUTE_KINDS[:4] if value.get(k) is not None]
    if len(present) != 1:
        kinds = ", ".join(f"`{k}`" for k in _ATTRIBUTE_KINDS)
        if not present:
            return [_invalid_value(path, "", f"must specify one of: {kinds}")]
        return [_invalid_value(path, "{" + ", ".join(sorted(present)) + "}",
                               f"must specify exactly one of: {kinds}")]
    kind, item = present[0], value[present[0]]
    if kind in ("string", "version") and len(str(item)) > MAX_ATTRIBUTE_STRING:
        return [Cause(f"{path}.{kind}", "FieldValueTooLong",
                      f"Too long: may not be more than {MAX_ATTRIBUTE_STRING} bytes")]
    if kind == "version" and not _SEMVER.match(str(item)):
        return [_invalid_value(f"{path}.version", item,
                               "must be a string compatible with semver.org spec 2.0.0")]
    return []


def _node_selection_causes(spec: JsonObject) -> list[Cause]:
    chosen = [k for k in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")
              if spec.get(k)]
    one_of = ("exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` "
              "is required")
    if not chosen:
        return [Cause("spec", "FieldValueRequired", f"Required value: {one_of}")]
    if len(chosen) > 1:
        fields = "{" + ", ".join(f"`{k}`" for k in chosen) + "}"
        return [_invalid_value("spec", fields, f"{one_of}, but multiple fields are set")]
    if "nodeName" in chosen and not is_dns_subdomain(spec["nodeName"]):
        return [_invalid_value("spec.nodeName", spec["nodeName"], DNS_SUBDOMAIN_MSG)]
    return []


def _pool_causes(pool: JsonObject) -> list[Cause]:
    # A missing field is Go's zero value (the pool is a struct, not a pointer): "" and 0.
    causes: list[Cause] = []
    name = pool.get("name", "")
    if name == "":
        causes.append(_required("spec.pool.name"))
    elif not isinstance(name, str) or len(name) > 253 or not all(
            is_dns_subdomain(part) for part in name.split("/")):
        causes.append(_invalid("spec.pool.name",
                               f"{go_value(name)}: must be DNS subdomains separated by '/'"))
    count = pool.get("resourceSliceCount", 0)
    if not isinstance(count, int) or count <= 0:
        causes.append(_invalid_value("spec.pool.resourceSliceCount", count,
                                     "must be greater than zero"))
    generation = pool.get("generation", 0)
    if not isinstance(generation, int) or generation < 0:
        causes.append(_invalid_value("spec.pool.generation", generation,
                                     "must be greater than or equal to 0"))
    return causes


def slice_causes(new: JsonObject, old: JsonObject | None, *, minor: int) -> list[Cause]:
    spec = new.get("spec") or {}
    causes: list[Cause] = []
    if not spec.get("driver"):
        causes.append(_required("spec.driver"))
    elif not is_dns_subdomain(spec.get("driver"), max_len=63):
        causes.append(_invalid_value("spec.driver", spec.get("driver"), DNS_SUBDOMAIN_MSG))
    causes.extend(_pool_causes(spec.get("pool") or {}))
    causes.extend(_node_selection_causes(spec))
    devices = spec.get("devices") or []
    limit = MAX_DEVICES
    if minor >= 35 and any(d.get("taints") for d in devices):
        limit = MAX_DEVICES_WITH_TAINTS
    if len(devices) > limit:
        causes.append(Cause("spec.devices", "FieldValueTooMany",
                            f"Too many: {len(devices)}: must have at most {limit} items"))
    seen: set[str] = set()
    for i, device in enumerate(devices):
        causes.extend(_device_causes(device, f"spec.devices[{i}]", minor))
        if device.get("name") in seen:
            # The apiserver names the list entry, with the duplicated key as its value.
            causes.append(Cause(f"spec.devices[{i}]", "FieldValueDuplicate",
                                f"Duplicate value: {go_value(device.get('name'))}"))
        seen.add(str(device.get("name")))
    if old is not None:
        old_spec = old.get("spec") or {}
        for path, a, b in (("spec.driver", spec.get("driver"), old_spec.get("driver")),
                           ("spec.pool.name", (spec.get("pool") or {}).get("name"),
                            (old_spec.get("pool") or {}).get("name")),
                           ("spec.nodeName", spec.get("nodeName"), old_spec.get("nodeName"))):
            if a != b:
                causes.append(Cause(path, "FieldValueInvalid", "field is immutable"))
    return causes


def _request_causes(request: JsonObject, path: str) -> list[Cause]:
    causes: list[Cause] = []
    if not is_dns_label(request.get("name")):
        causes.append(_invalid_value(f"{path}.name", request.get("name"), DNS_LABEL_MSG))
    chosen = [k for k in ("exactly", "firstAvailable") if request.get(k)]
    if len(chosen) != 1:
        causes.append(Cause(path, "FieldValueRequired",
                            f"exactly one of `exactly` or `firstAvailable` is required, got "
                            f"{chosen}"))
        return causes
    subs = [request["exactly"]] if chosen == ["exactly"] else request["firstAvailable"]
    if len(subs) > MAX_SUBREQUESTS:
        causes.append(Cause(f"{path}.firstAvailable", "FieldValueTooMany",
                            f"Too many: {len(subs)}: must have at most {MAX_SUBREQUESTS} items"))
    for j, sub in enumerate(subs):
        spath = f"{path}.exactly" if chosen == ["exactly"] else f"{path}.firstAvailable[{j}]"
        if not is_dns_subdomain(sub.get("deviceClassName")):
            causes.append(Cause(f"{spath}.deviceClassName", "FieldValueRequired",
                                "Required value: a DNS subdomain"))
    return causes


def claim_causes(new: JsonObject, old: JsonObject | None) -> list[Cause]:
    if old is not None:
        if new.get("spec") != old.get("spec"):
            return [SPEC_IMMUTABLE]
        return []
    requests = ((new.get("spec") or {}).get("devices") or {}).get("requests") or []
    causes: list[Cause] = []
    if len(requests) > MAX_REQUESTS:
        causes.append(Cause("spec.devices.requests", "FieldValueTooMany",
                            f"Too many: {len(requests)}: must have at most {MAX_REQUESTS} items"))
    names: set[str] = set()
    for i, request in enumerate(requests):
        causes.extend(_request_causes(request, f"spec.devices.requests[{i}]"))
        if request.get("name") in names:
            # The whole request as the value (the apiserver's also shows its defaults).
            causes.append(Cause(f"spec.devices.requests[{i}]", "FieldValueDuplicate",
                                f"Duplicate value: {go_value(request)}"))
        names.add(str(request.get("name")))
    return causes
