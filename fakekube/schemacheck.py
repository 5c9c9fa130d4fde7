"""A one-sided check, compiled once per built-in kind, that a body passes its JSON schema.

`jsonschema` walks the schema anew for every write, building a validator object per node and
looking every `$ref` up in its registry: about 6 ms for an 8-device ResourceSlice. Nearly every
write is valid, so `compile_check` turns the schema into nested closures once, each `$ref`
resolved at compile time, and the common write is answered by them in a fraction of that.

The check is one-sided. True means jsonschema (Draft 2020-12, as `fakekube.schema` runs it:
no format assertion) finds no error in the body; False means only "not proven", and the caller
then asks jsonschema, whose verdict and errors decide. So what is refused, and how, stays
jsonschema's alone. To stay one-sided the check proves only what it can prove exactly: a value
must be of an exact JSON type (`type(v) is dict`, never a subclass, and `bool` is no integer),
an enum must be of strings, and a `oneOf` must have type-only branches (counted with
jsonschema's own type checker). A schema with any other keyword, or any other shape of these,
compiles to None: that kind is checked by jsonschema alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jsonschema

JsonObject = dict[str, Any]
Check = Callable[[Any], bool]

# Keywords jsonschema does not assert here (annotations; `format` without a format checker).
_IGNORED = frozenset({"description", "format", "default", "example", "examples", "title"})
_ROOT_ONLY = frozenset({"$schema", "$id", "$defs"})
_DEFS_REF = "#/$defs/"
# JSON types as `json.loads` makes them; the exact Python types that certainly are each.
_EXACT: Mapping[str, tuple[type, ...]] = {
    "string": (str,), "null": (type(None),), "boolean": (bool,), "object": (dict,),
    "array": (list,), "integer": (int,), "number": (int, float),
}
_JSON_TYPES = frozenset(t for types in _EXACT.values() for t in types)
_TYPE_CHECKER = jsonschema.Draft202012Validator.TYPE_CHECKER


class UnsupportedError(Exception):
    """The schema uses something the compiled check does not prove exactly."""


def compile_check(root: JsonObject, defs: Mapping[str, Any]) -> Check | None:
    """The check for `root`, whose `$ref`s point at `#/$defs/NAME` in `defs`; None when the
    schema needs jsonschema."""
    try:
        return _Compiler(defs).node(root, root=True)
    except UnsupportedError:
        return None


class _Compiler:
    def __init__(self, defs: Mapping[str, Any]) -> None:
        self._defs = defs
        self._done: dict[str, Check] = {}

    def node(self, schema: Any, *, root: bool = False) -> Check:
        if not isinstance(schema, dict):
            raise UnsupportedError(f"schema {schema!r}")
        allowed: frozenset[type] | None = None
        checks: list[Check] = []
        for key, value in schema.items():
            if key in _IGNORED or key.startswith("x-kubernetes-") or (root and key in _ROOT_ONLY):
                continue
            if key == "type":
                allowed = _types(value)
            elif key == "properties":
                checks.append(self._object(value, schema.get("additionalProperties", True)))
            elif key == "additionalProperties":
                if "properties" not in schema:
                    checks.append(self._object({}, value))
            elif key == "items":
                checks.append(self._items(value))
            elif key == "required":
                checks.append(_required(value))
            elif key == "enum":
                checks.append(_enum(value))
            elif key == "oneOf":
                checks.append(_one_of(value))
            elif key == "$ref":
                checks.append(self._ref(value))
            else:
                raise UnsupportedError(f"keyword {key!r}")
        return _node(allowed, tuple(checks))

    def _ref(self, ref: Any) -> Check:
        name = ref[len(_DEFS_REF):] if isinstance(ref, str) and ref.startswith(_DEFS_REF) else ""
        if not name or "/" in name or "~" in name or "%" in name or name not in self._defs:
            raise UnsupportedError(f"$ref {ref!r}")
        if name not in self._done:
            # A definition may reach itself (JSONSchemaProps): refer through a cell until built.
            cell: list[Check] = []
            self._done[name] = lambda value: cell[0](value)
            cell.append(self.node(self._defs[name]))
            self._done[name] = cell[0]
        return self._done[name]

    def _object(self, properties: Any, additional: Any) -> Check:
        if not isinstance(properties, dict):
            raise UnsupportedError("properties")
        known = {key: self.node(sub) for key, sub in properties.items()}
        if additional is True:
            return _properties(known)
        if additional is False:
            return _closed_properties(known)
        return _open_properties(known, self.node(additional))

    def _items(self, items: Any) -> Check:
        each = self.node(items)

        def check(value: Any) -> bool:
            return not isinstance(value, list) or all(each(item) for item in value)

        return check


def _node(allowed: frozenset[type] | None, checks: tuple[Check, ...]) -> Check:
    # Only exact JSON types get past the first test, so the keyword checks below it may use
    # isinstance: for these values it means the exact type.
    def check(value: Any) -> bool:
        kind = type(value)
        if kind not in _JSON_TYPES or (allowed is not None and kind not in allowed):
            return False
        return all(c(value) for c in checks)

    return check


def _types(value: Any) -> frozenset[type]:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) and n in _EXACT for n in names):
        raise UnsupportedError(f"type {value!r}")
    return frozenset(t for n in names for t in _EXACT[n])


def _properties(known: dict[str, Check]) -> Check:
    def check(value: Any) -> bool:
        if not isinstance(value, dict):
            return True
        for key, item in value.items():
            sub = known.get(key)
            if sub is not None and not sub(item):
                return False
        return True

    return check


def _closed_properties(known: dict[str, Check]) -> Check:
    def check(value: Any) -> bool:
        if not isinstance(value, dict):
            return True
        for key, item in value.items():
            sub = known.get(key)
            if sub is None or not sub(item):
                return False
        return True

    return check


def _open_properties(known: dict[str, Check], additional: Check) -> Check:
    def check(value: Any) -> bool:
        if not isinstance(value, dict):
            return True
        return all(known.get(key, additional)(item) for key, item in value.items())

    return check


def _strings(values: Any, keyword: str) -> list[str]:
    """`values` when it is a list of strings (what `required` and a provable `enum` hold)."""
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise UnsupportedError(keyword)
    return values


def _required(names: Any) -> Check:
    wanted = tuple(_strings(names, "required"))

    def check(value: Any) -> bool:
        return not isinstance(value, dict) or all(name in value for name in wanted)

    return check


def _enum(values: Any) -> Check:
    allowed = frozenset(_strings(values, "enum"))

    def check(value: Any) -> bool:
        return isinstance(value, str) and value in allowed

    return check


def _one_of(branches: Any) -> Check:
    """Exactly one branch holds; only type-only branches, each judged exactly as jsonschema
    judges `type`, so a count of one proves what jsonschema would find."""
    if not isinstance(branches, list) or not branches:
        raise UnsupportedError("oneOf")
    names: list[tuple[str, ...]] = []
    for branch in branches:
        if not isinstance(branch, dict) or set(branch) - _IGNORED != {"type"}:
            raise UnsupportedError("oneOf branch")
        _types(branch["type"])
        names.append(tuple([branch["type"]] if isinstance(branch["type"], str)
                           else branch["type"]))

    def check(value: Any) -> bool:
        held = sum(any(_TYPE_CHECKER.is_type(value, n) for n in types) for types in names)
        return held == 1

    return check
