"""Bodies the apiserver refuses, word for word as kube-apiserver 1.37.2 answers them: broken
JSON and wrong types (400), a ResourceSlice's missing fields as Go's zero values (422), and the
unknown-field warnings a refused write still carries. With DISPLAY_OPERATOR_REAL_API=1 the same
cases run against the real server."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fakekube import decodeerror, testing
from fakekube.testing import call
from tests.support import realapi
from tests.support.realapi import ApiServer, real_kube  # noqa: F401 - a fixture

JsonObject = dict[str, Any]
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
UNRECOGNIZED = ("the object provided is unrecognized (must be of type ConfigMap): "
                "couldn't get version/kind; json parse error: ")
FIRST_PASS = ('json: cannot unmarshal TYPE into Go value of type struct { APIVersion string '
              '"json:\\"apiVersion,omitempty\\""; Kind string "json:\\"kind,omitempty\\"" }')
HANDLED = 'ConfigMap in version "v1" cannot be handled as a ConfigMap: json: cannot unmarshal '
POOL_NAME = "spec.pool.name: Required value"
POOL_COUNT = "spec.pool.resourceSliceCount: Invalid value: 0: must be greater than zero"
SELECTION = ("spec: Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
             "`perDeviceNodeSelection` is required")


@pytest.fixture
def api(real_kube: realapi.RealKube | None) -> Iterator[ApiServer]:  # noqa: F811
    with realapi.api_server(real_kube, kube_version="1.37") as server:
        yield server


@pytest.mark.parametrize(("body", "message"), [
    (b'{"a":', UNRECOGNIZED + 'unexpected end of JSON input ({"a":)'),
    (b"", UNRECOGNIZED + "unexpected end of JSON input (<empty>)"),
    (b'{"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v",}}',
     UNRECOGNIZED + "invalid character '}' looking for beginning of object key string "
                    '({"apiVersion": "v1", "kind": " ...)'),
    (b'{"apiVersion":"v1"} x', UNRECOGNIZED + "invalid character 'x' after top-level value "
                                              '({"apiVersion":"v1"} x)'),
    (b'{"apiVersion":"v1","kind":"ConfigMap","data":{"k":[1 2]}}',
     UNRECOGNIZED + "invalid character '2' after array element "
                    '({"apiVersion":"v1","kind":"Con ...)'),
    (b'{"kind" 1}', UNRECOGNIZED + "invalid character '1' after object key ({\"kind\" 1})"),
    (b"{a}", UNRECOGNIZED + "invalid character 'a' looking for beginning of object key string "
                            "({a})"),
    (b"[1]", UNRECOGNIZED + FIRST_PASS.replace("TYPE", "array") + " (5b315d)"),
    (b'"str"', UNRECOGNIZED + FIRST_PASS.replace("TYPE", "string") + " (2273747222)"),
    (b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"z","labels":{"a":1}}}',
     HANDLED + "number into Go struct field ObjectMeta.metadata.labels of type string"),
    (b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"z"},"data":[]}',
     HANDLED + "array into Go struct field ConfigMap.data of type map[string]string"),
], ids=["truncated", "empty", "trailing-comma", "extra-data", "array-element", "object-key",
        "unquoted-key", "array", "string", "label-type", "map-type"])
def test_a_body_that_does_not_decode(api: ApiServer, body: bytes, message: str) -> None:
    for method, path in (("POST", CONFIGMAPS), ("PUT", f"{CONFIGMAPS}/z")):
        reply = call(api.url, method, path, body, **realapi.client_options(api))
        assert (reply.code, reply.body["reason"]) == (400, "BadRequest")
        assert reply.body["message"] == message


@pytest.mark.parametrize(("change", "message"), [
    (lambda s: s.pop("pool"), f"[{POOL_NAME}, {POOL_COUNT}]"),
    (lambda s: s["pool"].pop("name"), POOL_NAME),
    (lambda s: s["pool"].pop("resourceSliceCount"), POOL_COUNT),
    (lambda s: s.pop("driver"), "spec.driver: Required value"),
    (lambda s: s.clear(), f"[spec.driver: Required value, {POOL_NAME}, {POOL_COUNT}, {SELECTION}]"),
], ids=["no-pool", "no-pool-name", "no-slice-count", "no-driver", "empty-spec"])
def test_a_slice_missing_fields_is_judged_by_their_zero_values(
        api: ApiServer, change: Callable[[JsonObject], object], message: str) -> None:
    body = testing.resource_slice("a")
    change(body["spec"])
    reply = call(api.url, "POST", SLICES, body, **realapi.client_options(api))
    assert reply.code == 422, reply.body
    assert reply.body["message"] == f'ResourceSlice.resource.k8s.io "a" is invalid: {message}'


def test_a_refused_write_still_warns_of_unknown_fields(api: ApiServer) -> None:
    bad_name = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name"},
                "bogus": 1}
    reply = call(api.url, "POST", CONFIGMAPS, bad_name, **realapi.client_options(api))
    assert reply.code == 422
    assert reply.headers.get_all("Warning") == ['299 - "unknown field \\"bogus\\""']
    body = testing.resource_slice("a")
    body["spec"].pop("pool")
    body["spec"]["bogusField"] = 1
    reply = call(api.url, "POST", SLICES, body, **realapi.client_options(api))
    assert reply.code == 422
    assert reply.headers.get_all("Warning") == ['299 - "unknown field \\"spec.bogusField\\""']


def test_the_summary_of_a_long_body_is_its_start() -> None:
    assert decodeerror.summary(b"{" + b"x" * 40) == "{" + "x" * 29 + " ..."
    assert decodeerror.summary(b"[" + b"1" * 40) == (b"[" + b"1" * 29).hex() + " ..."


def test_go_quotes_the_offending_character() -> None:
    with pytest.raises(json.JSONDecodeError) as err:
        json.loads("{'a': 1}")
    assert decodeerror.syntax_error(err.value) == (
        "invalid character '\\'' looking for beginning of object key string")
