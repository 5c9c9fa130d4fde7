"""The attributes an authorizer decides on, derived from a request's method, path and query the
way kube-apiserver's RequestInfoFactory does it: from the URL alone, before any routing, so a
request for a resource the server does not serve is still authorized (403 before 404).

Verbs: GET/HEAD on a name is `get`, on a collection `list`, or `watch` with `?watch=true` or the
`watch/` path prefix; POST `create`, PUT `update`, PATCH `patch`, DELETE on a name `delete`, on a
collection `deletecollection`. A list or watch whose field selector requires `metadata.name=X`
is a request for the name X (so a rule with `resourceNames` can allow it; not so on the
`watch/` path form, as upstream). Paths outside
`/api` and `/apis` are non-resource requests with the lower-cased method as verb.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

from fakekube.selectors import SelectorError, parse_fields

_VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch",
          "DELETE": "delete"}
# Namespace subresources: /api/v1/namespaces/NAME/status is the namespace's, not a resource
# called "status" in namespace NAME.
_NAMESPACE_SUBRESOURCES = ("status", "finalize")


@dataclass(frozen=True, slots=True)
class Attributes:
    """authorizer.Attributes without the user: what is asked, on what."""

    verb: str
    resource_request: bool
    path: str = ""
    api_group: str = ""
    api_version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    field_selector: str = ""
    """A list's or watch's `fieldSelector` as sent (the Node authorizer reads it)."""

    @property
    def combined_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def _name_from_selector(query: dict[str, list[str]]) -> str:
    try:
        selector = parse_fields((query.get("fieldSelector") or [""])[-1])
    except SelectorError:
        return ""
    for term in selector.terms:
        if term.field == "metadata.name" and not term.negate and _valid_segment(term.value):
            return term.value
    return ""


def _valid_segment(name: str) -> bool:
    return name not in ("", ".", "..") and "/" not in name and "%" not in name


def attributes(method: str, raw_path: str) -> Attributes:
    """The attributes of `method` on `raw_path` (path and query, as sent)."""
    url = urllib.parse.urlsplit(raw_path)
    query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
    parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/") if p]
    method_verb = _VERBS.get(method.upper(), method.lower())
    if not parts or parts[0] not in ("api", "apis") or len(parts) < (3 if parts[0] == "apis"
                                                                      else 2):
        return Attributes(verb=method.lower(), resource_request=False, path=url.path or "/")
    group, version, rest = ("", parts[1], parts[2:]) if parts[0] == "api" else (
        parts[1], parts[2], parts[3:])
    if not rest:  # discovery of a group version is a non-resource request
        return Attributes(verb=method.lower(), resource_request=False, path=url.path)
    verb = method_verb
    if rest[0] == "watch":
        verb, rest = "watch", rest[1:]
    namespace = ""
    if rest and rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0] if rest else ""
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if not name and verb == "get":
        verb = "watch" if (query.get("watch") or [""])[-1] in ("true", "1") else "list"
        name = _name_from_selector(query)
    if not name and verb == "delete":
        verb = "deletecollection"
    selector = (query.get("fieldSelector") or [""])[-1] if verb in ("list", "watch") else ""
    return Attributes(verb=verb, resource_request=True, path=url.path, api_group=group,
                      api_version=version, namespace=namespace, resource=resource,
                      subresource=subresource, name=name, field_selector=selector)
