"""The compiled check is one-sided: whatever it proves valid, jsonschema finds valid too (on
real bodies and thousands of seeded mutations of them), and it proves the bodies clients send."""

from __future__ import annotations

import collections
import copy
import random
from collections.abc import Iterator
from typing import Any

import pytest

from fakekube import schema, testing
from fakekube.schemacheck import compile_check

JsonObject = dict[str, Any]
MINOR = "1.34"
MUTANTS = 400
# Values a mutation puts anywhere: each JSON type, the integer-valued float jsonschema takes as
# an integer, and a dict subclass the check must not vouch for.
SAMPLES: tuple[Any, ...] = (None, 0, 1, 1.0, 1.5, True, False, "", "x", "NoSchedule", [],
                            [1], ["x"], {}, {"name": "x"}, collections.OrderedDict(a=1))


def _slice() -> JsonObject:
    devices = [testing.device(f"card0-dp-{n}", connector=f"DP-{n}", vendor="ACME", width=1920,
                              primary=n == 1) for n in range(1, 4)]
    devices[0]["taints"] = [{"key": "display.liken.sh/compositor-unavailable",
                             "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:00Z"}]
    body = testing.resource_slice("n1-display.liken.sh", devices=devices)
    body["metadata"].update(uid="u", resourceVersion="7", generation=1,
                            creationTimestamp="2026-01-01T00:00:00Z",
                            ownerReferences=[{"apiVersion": "v1", "kind": "Node", "name": "n1",
                                              "uid": "u1", "controller": True}])
    return body


def _pod() -> JsonObject:
    body = testing.pod("p", node_name="n1")
    body["spec"]["containers"][0].update(
        ports=[{"containerPort": 9200, "protocol": "TCP"}],
        resources={"limits": {"memory": "64Mi", "cpu": 0.5}},
        livenessProbe={"httpGet": {"path": "/healthz", "port": "metrics"}})
    return body


BODIES: dict[str, tuple[str, str, Any]] = {
    "slice": ("ResourceSlice", "resource.k8s.io/v1", _slice),
    "claim": ("ResourceClaim", "resource.k8s.io/v1", lambda: testing.resource_claim("c")),
    "pod": ("Pod", "v1", _pod),
    "node": ("Node", "v1", lambda: testing.node("n1", labels={"a": "b"})),
    "configmap": ("ConfigMap", "v1", lambda: {"apiVersion": "v1", "kind": "ConfigMap",
                                              "metadata": {"name": "c", "namespace": "d"},
                                              "data": {"k": "v"}}),
    "crd": ("CustomResourceDefinition", "apiextensions.k8s.io/v1", testing.display_crd),
}


def _validator(kind: str, api_version: str) -> Any:
    found = schema._builtin(MINOR, kind, api_version)
    assert found is not None and found.passes is not None
    return found


def _paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*path, index))


def _mutant(body: JsonObject, rng: random.Random) -> JsonObject:
    """`body` with one to three of: a value replaced, a key removed, a key added."""
    out = copy.deepcopy(body)
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(list(_paths(out))[1:])
        parent: Any = out
        for part in path[:-1]:
            parent = parent[part]
        action = rng.random()
        if action < 0.6:
            parent[path[-1]] = copy.deepcopy(rng.choice(SAMPLES))
        elif action < 0.8 and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent[path[-1]], dict):
            parent[path[-1]][rng.choice(("zz", "name", "spec"))] = copy.deepcopy(
                rng.choice(SAMPLES))
    return out


@pytest.mark.parametrize("name", sorted(BODIES))
def test_what_it_proves_jsonschema_accepts(name: str) -> None:
    kind, api_version, make = BODIES[name]
    found = _validator(kind, api_version)
    body = make()
    assert not list(found.validator.iter_errors(body))
    assert found.passes(body), "a valid body the client sends is proven without jsonschema"
    rng = random.Random(f"{name}-26")
    proven = refused = 0
    for _ in range(MUTANTS):
        mutant = _mutant(body, rng)
        if found.passes(mutant):
            proven += 1
            errors = [e.message for e in found.validator.iter_errors(mutant)]
            assert not errors, f"proven valid, but jsonschema refuses {mutant}: {errors}"
        elif refused < 10 and list(found.validator.iter_errors(mutant)):
            refused += 1
    # Both sides were exercised: mutants it proved, mutants jsonschema refused.
    assert proven > 0 and refused > 0, (proven, refused)


@pytest.mark.parametrize(("path", "value", "jsonschema_refuses"), [
    (("spec", "pool", "generation"), True, True),  # a bool is no integer
    (("spec", "pool", "generation"), 1.0, False),  # but an integer-valued float is
    (("kind",), "ResourceClaim", True),  # not in the enum
    (("spec", "devices", 0, "name"), None, True),
    (("spec", "devices", 0), collections.OrderedDict(name="card0-dp-1"), False),
    (("spec", "devices", 0, "taints", 0, "timeAdded"), "yesterday", False),  # no format check
], ids=["bool-for-int", "float-for-int", "enum", "null-name", "dict-subclass", "format"])
def test_what_it_does_not_prove_is_left_to_jsonschema(path: tuple[Any, ...], value: Any,
                                                      jsonschema_refuses: bool) -> None:
    found = _validator("ResourceSlice", "resource.k8s.io/v1")
    body = _slice()
    parent: Any = body
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = value
    assert bool(list(found.validator.iter_errors(body))) == jsonschema_refuses
    if jsonschema_refuses:
        assert not found.passes(body)
    if path[-1] == "timeAdded":
        assert found.passes(body)


def test_a_quantity_of_null_matches_both_branches_so_is_not_proven() -> None:
    found = _validator("Pod", "v1")
    body = _pod()
    body["spec"]["containers"][0]["resources"]["limits"]["memory"] = None
    assert list(found.validator.iter_errors(body))  # oneOf: both branches take null
    assert not found.passes(body)


@pytest.mark.parametrize("schema_doc", [
    {"type": "string", "pattern": "^a$"},
    {"properties": {"a": {"$ref": "#/$defs/missing"}}},
    {"items": False},
    {"enum": [1, 2]},
    {"oneOf": [{"type": "string"}, {"required": ["a"]}]},
    {"properties": {"a": {"$id": "elsewhere", "type": "string"}}},
], ids=["pattern", "unknown-ref", "items-false", "int-enum", "oneOf-non-type", "nested-id"])
def test_a_schema_it_cannot_prove_exactly_is_left_to_jsonschema(schema_doc: JsonObject) -> None:
    assert compile_check(schema_doc, {}) is None


def test_a_recursive_definition_compiles() -> None:
    defs = {"Node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/Node"}},
                     "required": ["v"]}}
    check = compile_check({"$ref": "#/$defs/Node"}, defs)
    assert check is not None
    assert check({"v": 1, "child": {"v": 2, "child": {"v": 3}}})
    assert not check({"v": 1, "child": {"child": {"v": 3}}})
