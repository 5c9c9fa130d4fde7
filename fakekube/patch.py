"""Request bodies by media type, and the PATCH flavours the apiserver accepts.

- `application/merge-patch+json`: RFC 7386 JSON merge patch.
- `application/json-patch+json`: RFC 6902 JSON patch (add, remove, replace, move, copy, test).
- `application/strategic-merge-patch+json`: APPROXIMATED as a merge patch. Lists are replaced
  whole instead of merged by their patch merge key (containers by `name`, ...), and the
  `$patch`, `$retainKeys`, `$deleteFromPrimitiveList` directives are not understood.
- `application/apply-patch+yaml` (server-side apply): the server treats the body as a merge patch
  on the live object, or as a create when the object is missing. There is no field ownership:
  fields a manager stops sending are kept, and managers never conflict.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Literal

import yaml

from fakekube import decodeerror, status

JSON = "application/json"
YAML = "application/yaml"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"
PATCH_TYPES = (JSON_PATCH, MERGE, STRATEGIC, APPLY)
BODY_TYPES = (JSON, YAML)

PatchKind = Literal["merge", "json", "apply"]


def media_type(header: str | None) -> str:
    """The bare media type of a Content-Type header (`application/json; charset=utf-8` ->
    `application/json`)."""
    return (header or "").split(";", 1)[0].strip().lower()


def decode_body(raw: bytes, content_type: str) -> Any:
    """Parse a request body; 400 BadRequest when it is not the JSON (or YAML) it claims to be."""
    try:
        if content_type in (YAML, APPLY):
            return yaml.safe_load(raw.decode())
        return json.loads(raw)
    except (ValueError, yaml.YAMLError) as e:
        raise status.bad_request(f"error decoding {content_type} body: {e}") from e


def decode_object(raw: bytes, content_type: str, kind: str) -> dict[str, Any]:
    """The object a POST or PUT of a `kind` sends; 400 in the apiserver's words when its JSON
    is broken or not an object (`fakekube.decodeerror`)."""
    if content_type in (YAML, APPLY):
        body = decode_body(raw, content_type)
    else:
        try:
            body = json.loads(raw)
        except json.JSONDecodeError as e:
            raise decodeerror.unrecognized(kind, raw, decodeerror.syntax_error(e)) from e
        except ValueError as e:  # not UTF-8
            raise decodeerror.unrecognized(kind, raw, f"invalid character: {e}") from e
    if not isinstance(body, dict):
        raise decodeerror.unrecognized(kind, raw, decodeerror.not_an_object(body))
    return body


def patch_kind(content_type: str) -> PatchKind:
    if content_type == JSON_PATCH:
        return "json"
    if content_type == APPLY:
        return "apply"
    if content_type in (MERGE, STRATEGIC):
        return "merge"
    raise status.unsupported_media_type(content_type, PATCH_TYPES)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, `null` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class JsonPatchError(ValueError):
    """An RFC 6902 operation that cannot apply to the document (answered as 422)."""


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise JsonPatchError(f"path {path!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list[Any], token: str, *, for_add: bool) -> int:
    if for_add and token == "-":
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise JsonPatchError(f"array index {token!r} is not a number")
    idx = int(token)
    if idx > len(container) or (idx == len(container) and not for_add):
        raise JsonPatchError(f"array index {idx} out of range")
    return idx


def _parent(doc: Any, tokens: list[str]) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, for_add=False)]
        else:
            raise JsonPatchError(f"path component {token!r} not found")
    return node


def _get(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent = _parent(doc, tokens)
    if isinstance(parent, dict):
        if tokens[-1] not in parent:
            raise JsonPatchError(f"path {path!r} not found")
        return parent[tokens[-1]]
    if isinstance(parent, list):
        return parent[_index(parent, tokens[-1], for_add=False)]
    raise JsonPatchError(f"path {path!r} not found")


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    if isinstance(parent, dict):
        parent[tokens[-1]] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, tokens[-1], for_add=True), value)
    else:
        raise JsonPatchError(f"cannot add at {path!r}")
    return doc


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise JsonPatchError("cannot remove the whole document")
    parent = _parent(doc, tokens)
    if isinstance(parent, dict) and tokens[-1] in parent:
        del parent[tokens[-1]]
    elif isinstance(parent, list):
        del parent[_index(parent, tokens[-1], for_add=False)]
    else:
        raise JsonPatchError(f"path {path!r} not found")
    return doc


def _replace(doc: Any, path: str, value: Any) -> Any:
    _get(doc, path)  # replace needs an existing target, unlike add
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    if isinstance(parent, dict):
        parent[tokens[-1]] = value
    else:
        parent[_index(parent, tokens[-1], for_add=False)] = value
    return doc


def _operation(doc: Any, op: dict[str, Any]) -> Any:
    name, path = op.get("op"), op.get("path")
    if not isinstance(path, str):
        raise JsonPatchError(f"operation {op!r} has no path")
    if name in ("add", "replace", "test") and "value" not in op:
        raise JsonPatchError(f"operation {name} at {path!r} has no value")
    match name:
        case "add":
            return _add(doc, path, copy.deepcopy(op["value"]))
        case "remove":
            return _remove(doc, path)
        case "replace":
            return _replace(doc, path, copy.deepcopy(op["value"]))
        case "move" | "copy":
            source = op.get("from")
            if not isinstance(source, str):
                raise JsonPatchError(f"{name} at {path!r} has no 'from'")
            value = copy.deepcopy(_get(doc, source))
            if name == "move":
                doc = _remove(doc, source)
            return _add(doc, path, value)
        case "test":
            if _get(doc, path) != op["value"]:
                raise JsonPatchError(f"test failed at {path!r}")
            return doc
    raise JsonPatchError(f"unknown operation {name!r}")


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 on a deep copy of `target`; `JsonPatchError` names the failing operation."""
    if not isinstance(operations, list) or not all(isinstance(o, dict) for o in operations):
        raise status.bad_request("a json patch must be a list of operation objects")
    doc = copy.deepcopy(target)
    for op in operations:
        doc = _operation(doc, op)
    return doc
