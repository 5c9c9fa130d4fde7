"""One RBAC PolicyRule against a request's attributes, as `rbac.RuleAllows` decides it, and the
decision an authorizer answers with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fakekube.requestinfo import Attributes

JsonObject = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str = ""


def _strings(rule: JsonObject, key: str) -> list[str]:
    return [str(v) for v in rule.get(key) or ()]


def _resource_matches(rule: JsonObject, attrs: Attributes) -> bool:
    combined, sub = attrs.combined_resource, attrs.subresource
    for wanted in _strings(rule, "resources"):
        if wanted in ("*", combined):
            return True
        if sub and wanted == f"*/{sub}":
            return True
    return False


def _url_matches(rule: JsonObject, path: str) -> bool:
    for wanted in _strings(rule, "nonResourceURLs"):
        if wanted in ("*", path) or (wanted.endswith("*") and path.startswith(wanted[:-1])):
            return True
    return False


def rule_allows(rule: JsonObject, attrs: Attributes) -> bool:
    verbs = _strings(rule, "verbs")
    if "*" not in verbs and attrs.verb not in verbs:
        return False
    if not attrs.resource_request:
        return _url_matches(rule, attrs.path)
    groups = _strings(rule, "apiGroups")
    if "*" not in groups and attrs.api_group not in groups:
        return False
    if not _resource_matches(rule, attrs):
        return False
    names = _strings(rule, "resourceNames")
    return not names or attrs.name in names
