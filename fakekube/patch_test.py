"""Merge patch (RFC 7386), JSON patch (RFC 6902) and body decoding by media type."""

from __future__ import annotations

from typing import Any

import pytest

from fakekube import patch, status

DOC = {"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"list": [1, 2, 3]}}


@pytest.mark.parametrize(("target", "change", "expected"), [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    (["a"], {"a": "c"}, {"a": "c"}),
    ({"a": "foo"}, "bar", "bar"),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
], ids=["replace", "add", "delete", "list-replaced", "nested", "non-object-target",
        "non-object-patch", "null-in-new-object"])
def test_merge_patch_follows_rfc_7386(target: Any, change: Any, expected: Any) -> None:
    assert patch.merge_patch(target, change) == expected


@pytest.mark.parametrize(("ops", "expected"), [
    ([{"op": "add", "path": "/metadata/labels/y", "value": "2"}],
     {"metadata": {"name": "a", "labels": {"x": "1", "y": "2"}}, "spec": {"list": [1, 2, 3]}}),
    ([{"op": "add", "path": "/spec/list/-", "value": 4}],
     {"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"list": [1, 2, 3, 4]}}),
    ([{"op": "add", "path": "/spec/list/0", "value": 0}],
     {"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"list": [0, 1, 2, 3]}}),
    ([{"op": "remove", "path": "/spec/list/1"}],
     {"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"list": [1, 3]}}),
    ([{"op": "replace", "path": "/metadata/labels", "value": {}}],
     {"metadata": {"name": "a", "labels": {}}, "spec": {"list": [1, 2, 3]}}),
    ([{"op": "move", "from": "/metadata/labels", "path": "/spec/labels"}],
     {"metadata": {"name": "a"}, "spec": {"list": [1, 2, 3], "labels": {"x": "1"}}}),
    ([{"op": "copy", "from": "/metadata/name", "path": "/spec/name"}],
     {"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"list": [1, 2, 3], "name": "a"}}),
    ([{"op": "test", "path": "/metadata/name", "value": "a"},
      {"op": "add", "path": "/metadata/labels/a~1b", "value": "slash"}],
     {"metadata": {"name": "a", "labels": {"x": "1", "a/b": "slash"}},
      "spec": {"list": [1, 2, 3]}}),
], ids=["add-key", "append", "insert", "remove-index", "replace", "move", "copy",
        "test-then-escaped-add"])
def test_json_patch_follows_rfc_6902(ops: list[dict[str, Any]], expected: Any) -> None:
    assert patch.json_patch(DOC, ops) == expected
    assert DOC["spec"] == {"list": [1, 2, 3]}  # the target is never changed in place


@pytest.mark.parametrize("ops", [
    [{"op": "test", "path": "/metadata/name", "value": "b"}],
    [{"op": "remove", "path": "/metadata/missing"}],
    [{"op": "replace", "path": "/spec/missing", "value": 1}],
    [{"op": "add", "path": "/spec/list/9", "value": 1}],
    [{"op": "add", "path": "metadata", "value": 1}],
    [{"op": "frobnicate", "path": "/spec"}],
    [{"op": "add", "path": "/spec/x"}],
], ids=["test-fails", "remove-missing", "replace-missing", "index-out-of-range",
        "relative-path", "unknown-op", "no-value"])
def test_json_patch_errors(ops: list[dict[str, Any]]) -> None:
    with pytest.raises(patch.JsonPatchError):
        patch.json_patch(DOC, ops)


def test_json_patch_must_be_a_list() -> None:
    with pytest.raises(status.ApiFailure) as err:
        patch.json_patch(DOC, {"op": "add"})
    assert err.value.code == 400


@pytest.mark.parametrize(("content_type", "kind"), [
    (patch.MERGE, "merge"), (patch.STRATEGIC, "merge"), (patch.JSON_PATCH, "json"),
    (patch.APPLY, "apply"),
], ids=["merge", "strategic", "json", "apply"])
def test_patch_kinds(content_type: str, kind: str) -> None:
    assert patch.patch_kind(content_type) == kind


def test_unknown_patch_media_type_is_415() -> None:
    with pytest.raises(status.ApiFailure) as err:
        patch.patch_kind("application/json")
    assert (err.value.code, err.value.reason) == (415, "UnsupportedMediaType")


@pytest.mark.parametrize(("header", "bare"), [
    ("application/json; charset=utf-8", "application/json"),
    ("Application/Merge-Patch+JSON", "application/merge-patch+json"),
    (None, ""),
], ids=["parameters", "case", "missing"])
def test_media_type(header: str | None, bare: str) -> None:
    assert patch.media_type(header) == bare


def test_apply_bodies_may_be_yaml() -> None:
    assert patch.decode_body(b"kind: Node\nmetadata:\n  name: n1\n", patch.APPLY) == {
        "kind": "Node", "metadata": {"name": "n1"}}


def test_undecodable_body_is_400() -> None:
    with pytest.raises(status.ApiFailure) as err:
        patch.decode_object(b"[1, 2]", patch.JSON, "ConfigMap")
    assert err.value.code == 400
