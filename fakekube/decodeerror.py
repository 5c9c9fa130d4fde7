"""A body the apiserver cannot decode, in the apiserver's words (kube-apiserver 1.37.2).

Two kinds of failure, both 400 BadRequest:
- a body that is not a JSON object: the apiserver's first pass (which reads only apiVersion
  and kind) fails, and it answers with Go's `encoding/json` error and a summary of the body:
  `the object provided is unrecognized (must be of type ConfigMap): couldn't get
  version/kind; json parse error: unexpected end of JSON input ({"a":)`;
- a field of the wrong JSON type: `ConfigMap in version "v1" cannot be handled as a
  ConfigMap: json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of
  type string`, naming the innermost Go struct, the field's path (no map keys, no indices) and
  its Go type, which the built-in schema's definitions give.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from fakekube import status

JsonObject = dict[str, Any]

# apiserver's summarizeData: the body's start (30 bytes), as text when it opens an object.
_SUMMARY_BYTES = 30
# Go's go-value type of the first pass, printed by its UnmarshalTypeError.
_FIRST_PASS_TYPE = ('struct { APIVersion string "json:\\"apiVersion,omitempty\\""; '
                    'Kind string "json:\\"kind,omitempty\\"" }')
# Python's scanner message -> what Go's scanner says after "invalid character 'x' ".
_CONTEXT = {
    "Expecting value": "looking for beginning of value",
    "Expecting property name enclosed in double quotes": "looking for beginning of object key "
                                                         "string",
    "Expecting ':' delimiter": "after object key",
    "Extra data": "after top-level value",
}


def summary(raw: bytes) -> str:
    if not raw:
        return "<empty>"
    head = raw[:_SUMMARY_BYTES]
    more = " ..." if len(raw) > _SUMMARY_BYTES else ""
    if raw[:1] == b"{":
        return head.decode(errors="replace") + more
    return head.hex() + more


def unrecognized(kind: str, raw: bytes, go_error: str) -> status.ApiFailure:
    return status.bad_request(f"the object provided is unrecognized (must be of type {kind}): "
                              f"couldn't get version/kind; json parse error: {go_error} "
                              f"({summary(raw)})")


def syntax_error(e: json.JSONDecodeError) -> str:
    """Go's `encoding/json` message for the syntax error Python's scanner found."""
    doc, pos = e.doc, e.pos
    if e.msg.startswith("Unterminated string") or not doc[pos:].strip():
        return "unexpected end of JSON input"
    if e.msg.startswith("Invalid control character"):
        return f"invalid character {_quote_char(doc[pos])} in string literal"
    context = _CONTEXT.get(e.msg)
    if context is None and e.msg == "Expecting ',' delimiter":
        context = ("after array element" if _innermost(doc, pos) == "["
                   else "after object key:value pair")
    context = context or "looking for beginning of value"
    return f"invalid character {_quote_char(doc[pos])} {context}"


def not_an_object(value: object) -> str:
    return f"json: cannot unmarshal {_json_type(value)} into Go value of type {_FIRST_PASS_TYPE}"


def type_mismatch(path: Sequence[str | int], value: object, root: JsonObject,
                  defs: JsonObject, kind: str) -> str:
    """Go's UnmarshalTypeError for `value` at `path` of a body whose schema is `root`: the
    struct that declares the last field, the fields from the root, the Go type expected."""
    struct = owner = kind
    fields: list[str] = []
    schema = root
    for part in path:
        schema = resolve(schema, defs)
        props = schema.get("properties") or {}
        if isinstance(part, int):
            schema = schema.get("items") or {}
        elif part in props:
            owner = struct
            fields.append(part)
            schema = props[part]
        else:
            schema = schema.get("additionalProperties") or {}  # a map's key is not in the path
        if "$ref" in schema:
            struct = _ref_name(schema["$ref"])
    return (f"json: cannot unmarshal {_json_type(value)} into Go struct field "
            f"{owner}.{'.'.join(fields)} of type {_go_type(schema, defs)}")


def _ref_name(ref: str) -> str:
    # "#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" -> "ObjectMeta"
    return ref.rsplit("/", 1)[-1].rsplit(".", 1)[-1]


def resolve(schema: JsonObject, defs: JsonObject) -> JsonObject:
    """The definition a `$ref` (or a chain of them) names; the schema itself without one."""
    while "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _types(schema: JsonObject) -> list[str]:
    t = schema.get("type")
    return [x for x in (t if isinstance(t, list) else [t]) if x not in (None, "null")]


def _go_type(schema: JsonObject, defs: JsonObject) -> str:
    if "$ref" in schema:
        return _ref_name(schema["$ref"])
    types = _types(schema)
    if "object" in types:
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            return f"map[string]{_go_type(extra, defs)}"
        return "struct"
    if "array" in types:
        return f"[]{_go_type(schema.get('items') or {}, defs)}"
    if "string" in types:
        return "[]uint8" if schema.get("format") == "byte" else "string"
    if "integer" in types:
        return str(schema.get("format") or "int64")
    if "number" in types:
        return "float64"
    if "boolean" in types:
        return "bool"
    return "interface {}"


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _quote_char(c: str) -> str:
    # Go's quoteChar: 'x', with ' and " special-cased and others as strconv.Quote escapes them.
    if c == "'":
        return "'\\''"
    if c == '"':
        return "'\"'"
    return "'" + json.dumps(c)[1:-1] + "'"


def _innermost(doc: str, pos: int) -> str | None:
    """The bracket ('{' or '[') open at `pos`, outside strings."""
    stack: list[str] = []
    in_string = escaped = False
    for c in doc[:pos]:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "{[":
            stack.append(c)
        elif c in "}]" and stack:
            stack.pop()
    return stack[-1] if stack else None
