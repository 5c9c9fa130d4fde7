"""Schema checks a write goes through before it is stored, as the apiserver decodes and validates.

Built-in kinds use the JSON schemas that ship in `kubernetes_validate` for the configured
Kubernetes minor (loaded once per process): unknown fields are pruned (the apiserver's default
`fieldValidation=Warn` drops them and sends a `Warning` header; `Strict` refuses them with 400),
a wrong JSON type is a 400 decode error, and a missing required field is a 422 Invalid.
A body `fakekube.schemacheck` proves valid skips jsonschema's walk; any other is judged by
jsonschema, so the verdicts and errors are jsonschema's either way.
Custom resources use their CRD's `openAPIV3Schema`: structural pruning (honouring
`x-kubernetes-preserve-unknown-fields`, dropping nulls of non-nullable fields), `default` values,
then validation, every failure a 422.
Not checked: enums of built-in fields, formats, CEL rules (`x-kubernetes-validations`), and the
Go validation code of built-in kinds beyond what `fakekube.dra` re-implements.
"""

from __future__ import annotations

import copy
import functools
import importlib.resources
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import jsonschema
import jsonschema.protocols

from fakekube import decodeerror, dra, status
from fakekube.jsoncopy import copy_json
from fakekube.kinds import Kind
from fakekube.schemacheck import Check, compile_check
from fakekube.status import Cause

JsonObject = dict[str, Any]
FieldValidation = Literal["Ignore", "Warn", "Strict"]
_ROOT_KEYS = ("apiVersion", "kind", "metadata")
_TYPE_VALIDATORS = frozenset({"type", "oneOf", "anyOf"})
_STRUCTURAL = "x-fakekube-structural"


@dataclass(frozen=True, slots=True)
class Checked:
    """A body that passed: pruned (and defaulted), with the paths of the fields dropped."""

    obj: JsonObject
    unknown: tuple[str, ...]


def field_path(parts: Iterable[str | int]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


@dataclass(frozen=True, slots=True)
class _Builtin:
    validator: jsonschema.protocols.Validator
    root: JsonObject
    defs: JsonObject
    passes: Check | None  # proves a body valid without jsonschema's walk (fakekube.schemacheck)


def _schema_file(minor: str, name: str) -> JsonObject:
    base = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema"
    loaded: JsonObject = json.loads((base / f"v{minor}.0-local" / name).read_text())
    return loaded


@functools.cache
def _definitions(minor: str) -> JsonObject:
    return _schema_file(minor, "_definitions.json")


def _local_refs(node: Any) -> Any:
    """Point the kind file's references into `_definitions.json` at the `$defs` embedded in it."""
    if isinstance(node, dict):
        return {k: (v.replace("/api/_definitions.json#", "#") if k == "$ref" else _local_refs(v))
                for k, v in node.items()}
    if isinstance(node, list):
        return [_local_refs(v) for v in node]
    return node


@functools.cache
def _builtin(minor: str, kind: str, api_version: str) -> _Builtin | None:
    # kubernetes_validate's file naming: resource.k8s.io/v1 -> resource-v1, v1 -> v1.
    prefix = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        root = _local_refs(_schema_file(minor, f"{kind.lower()}-{prefix}.json"))
    except FileNotFoundError:
        return None
    defs = _definitions(minor)["$defs"]
    validator = jsonschema.Draft202012Validator({**root, "$defs": defs})
    return _Builtin(validator, root, defs, compile_check(root, defs))


def _prune(value: Any, schema: JsonObject, defs: JsonObject, path: list[str | int],
           dropped: list[str], *, root: bool = False) -> None:
    """Drop, in place, object keys the schema does not know; record their paths."""
    schema = decodeerror.resolve(schema, defs)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _prune(item, schema["items"], defs, [*path, i], dropped)
        return
    if not isinstance(value, dict):
        return
    props: JsonObject = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    keep_unknown = schema.get("x-kubernetes-preserve-unknown-fields") is True
    for key in list(value):
        if root and key in _ROOT_KEYS:  # the apiserver never prunes these by a CRD schema
            continue
        if key in props:
            if value[key] is None and props[key].get(_STRUCTURAL) and not _nullable(props[key]):
                del value[key]  # structural schemas drop nulls of non-nullable fields, silently
                continue
            _prune(value[key], props[key], defs, [*path, key], dropped)
        elif isinstance(extra, dict):
            _prune(value[key], extra, defs, [*path, key], dropped)
        elif not keep_unknown and (props or schema.get(_STRUCTURAL) is True):
            # Built-in schemas leave free-form objects (RawExtension) without properties, while
            # a structural CRD schema prunes them unless they preserve unknown fields.
            dropped.append(field_path([*path, key]))
            del value[key]


def _nullable(schema: JsonObject) -> bool:
    kind = schema.get("type")
    return isinstance(kind, list) and "null" in kind


def _apply_defaults(value: Any, schema: JsonObject) -> None:
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _apply_defaults(item, schema["items"])
    if not isinstance(value, dict):
        return
    for key, sub in (schema.get("properties") or {}).items():
        if key not in value and "default" in sub:
            value[key] = copy.deepcopy(sub["default"])
        if key in value:
            _apply_defaults(value[key], sub)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        for item in value.values():
            _apply_defaults(item, extra)


def _openapi_to_jsonschema(schema: Any) -> Any:
    """OpenAPI v3 (structural) -> JSON schema draft 4: `nullable` and int-or-string spelled out;
    marks every object schema as structural so pruning knows empty objects prune everything."""
    if not isinstance(schema, dict):
        return schema
    out = {k: v for k, v in schema.items() if k not in ("nullable", "x-kubernetes-int-or-string")}
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {k: _openapi_to_jsonschema(v) for k, v in schema["properties"].items()}
    for key in ("items", "additionalProperties", "not"):
        if isinstance(schema.get(key), dict):
            out[key] = _openapi_to_jsonschema(schema[key])
    for key in ("allOf", "anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            out[key] = [_openapi_to_jsonschema(s) for s in schema[key]]
    if schema.get("x-kubernetes-int-or-string") is True:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("nullable") is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    out[_STRUCTURAL] = True
    return out


@functools.lru_cache(maxsize=256)
def _custom(schema_json: str) -> tuple[JsonObject, jsonschema.protocols.Validator]:
    schema = _openapi_to_jsonschema(json.loads(schema_json))
    body_schema = dict(schema)
    body_schema["properties"] = {k: v for k, v in (schema.get("properties") or {}).items()
                                 if k not in _ROOT_KEYS}
    body_schema["required"] = [r for r in schema.get("required") or () if r not in _ROOT_KEYS]
    return schema, jsonschema.Draft4Validator(body_schema)


def _required_cause(err: jsonschema.ValidationError) -> Cause:
    m = re.match(r"'(.+)' is a required property", err.message)
    name = m.group(1) if m else "?"
    return Cause(field_path([*err.absolute_path, name]), "FieldValueRequired", "Required value")


# kube-openapi's wording of a CRD schema's failures (as kube-apiserver 1.37.2 answers them):
# "<field> in body should ...".
_BOUNDS = {"minimum": "greater than or equal to", "maximum": "less than or equal to"}


def _invalid_cause(err: jsonschema.ValidationError) -> Cause:
    if err.validator == "required":
        return _required_cause(err)
    path = field_path(err.absolute_path)
    shown = json.dumps(err.instance)[:80]
    if err.validator == "enum":
        values: list[Any] = list(err.validator_value)  # type: ignore[arg-type]
        allowed = ", ".join(json.dumps(v) for v in values)
        return Cause(path, "FieldValueNotSupported",
                     f"Unsupported value: {shown}: supported values: {allowed}")
    if err.validator == "pattern":
        return Cause(path, "FieldValueInvalid", f"Invalid value: {shown}: {path} in body "
                                                f"should match '{err.validator_value}'")
    if err.validator in _BOUNDS:
        return Cause(path, "FieldValueInvalid", f"Invalid value: {shown}: {path} in body "
                     f"should be {_BOUNDS[str(err.validator)]} {err.validator_value}")
    reason = "FieldValueTypeInvalid" if err.validator in _TYPE_VALIDATORS else "FieldValueInvalid"
    return Cause(path, reason, f"Invalid value: {shown}: {err.message}")


def _raise_type_errors(kind: Kind, version: str, errors: list[jsonschema.ValidationError],
                       found: _Builtin) -> None:
    for err in errors:
        if err.validator in _TYPE_VALIDATORS:
            go_error = decodeerror.type_mismatch(list(err.absolute_path), err.instance,
                                                 found.root, found.defs, kind.kind)
            raise status.bad_request(
                f'{kind.kind} in version "{version}" cannot be handled as a {kind.kind}: '
                f"{go_error}")


class Schemas:
    """Checks bodies against the schemas of one Kubernetes minor version (e.g. "1.34")."""

    def __init__(self, kube_version: str) -> None:
        if not re.fullmatch(r"1\.\d+", kube_version):
            raise ValueError(f"kube_version {kube_version!r} must look like '1.34'")
        self.minor = kube_version

    def check(self, kind: Kind, version: str, obj: JsonObject, *, name: str,
              field_validation: FieldValidation = "Warn") -> Checked:
        body = copy_json(obj)
        dropped: list[str] = []
        if kind.builtin_schema:
            self._check_builtin(kind, version, body, name, dropped)
        else:
            self._check_custom(kind, version, body, name, dropped)
        if dropped and field_validation == "Strict":
            unknown = ", ".join(f'unknown field "{p}"' for p in dropped)
            raise status.bad_request(f"strict decoding error: {unknown}")
        return Checked(body, tuple(dropped))

    def unknown_fields(self, kind: Kind, version: str, obj: JsonObject) -> tuple[str, ...]:
        """The fields the schema does not know in `obj` as sent, status included: the
        apiserver decodes (and warns) before its strategy drops what a create may not set."""
        body = copy_json(obj)
        dropped: list[str] = []
        if kind.builtin_schema:
            found = _builtin(self.minor, kind.kind, kind.api_version(version))
            if found is not None:
                _prune(body, found.root, found.defs, [], dropped, root=True)
        elif kind.schemas.get(version):
            schema, _ = _custom(json.dumps(kind.schemas[version], sort_keys=True))
            _prune(body, schema, {}, [], dropped, root=True)
        return tuple(dropped)

    def _check_builtin(self, kind: Kind, version: str, body: JsonObject, name: str,
                       dropped: list[str]) -> None:
        errors = self._builtin_errors(kind, version, body, dropped)
        if kind.kind in dra.GO_VALIDATED:
            errors = [e for e in errors if e.validator != "required"]
        if errors:
            raise status.invalid(kind.resource(name), [_invalid_cause(e) for e in errors])

    def check_types(self, kind: Kind, version: str, obj: JsonObject) -> None:
        """The 400 a built-in kind's body of a wrong JSON type gets as it is decoded, before the
        apiserver reads the stored object (an update of a missing object is still a 400)."""
        if kind.builtin_schema:
            self._builtin_errors(kind, version, copy_json(obj), [])

    def _builtin_errors(self, kind: Kind, version: str, body: JsonObject,
                        dropped: list[str]) -> list[jsonschema.ValidationError]:
        """`body` pruned in place (its unknown fields' paths into `dropped`); the 400 of a
        wrong type raised; the schema's other failures returned, in path order."""
        found = _builtin(self.minor, kind.kind, kind.api_version(version))
        if found is None:
            return []
        _prune(body, found.root, found.defs, [], dropped, root=True)
        if found.passes is not None and found.passes(body):
            return []
        errors = sorted(found.validator.iter_errors(body), key=lambda e: list(e.absolute_path))
        _raise_type_errors(kind, version, errors, found)
        return errors

    def _check_custom(self, kind: Kind, version: str, body: JsonObject, name: str,
                      dropped: list[str]) -> None:
        raw = kind.schemas.get(version) or {}
        if not raw:
            return
        schema, validator = _custom(json.dumps(raw, sort_keys=True))
        _prune(body, schema, {}, [], dropped, root=True)
        _apply_defaults(body, schema)
        content = {k: v for k, v in body.items() if k not in _ROOT_KEYS}
        errors = sorted(validator.iter_errors(content), key=lambda e: list(e.absolute_path))
        if errors:
            raise status.invalid(kind.resource(name), [_invalid_cause(e) for e in errors])
