"""A claim's opaque parameters kept as the bytes sent and compared as bytes, as kube-apiserver
1.37.2 does: a claim whose spec or allocation was sent with spaced JSON refuses the updates the
real server refuses. With DISPLAY_OPERATOR_REAL_API=1 the same cases run against it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from fakekube import rawparams, testing
from fakekube.testing import RawReply, call
from tests.support import realapi
from tests.support.realapi import ApiServer, real_kube  # noqa: F401 - a fixture

JsonObject = dict[str, Any]
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
MERGE = "application/merge-patch+json"
PARAMETERS = {"apiVersion": "display.liken.sh/v1alpha1", "kind": "DisplayConfig",
              "mode": "1024x768@60"}
SPACED = json.dumps(PARAMETERS)
COMPACT = json.dumps(PARAMETERS, separators=(",", ":"))
SPEC_IMMUTABLE = "spec: Invalid value: null: field is immutable"
ALLOCATION_SET = "status.allocation: Invalid value: null: field cannot be modified once set"


@pytest.fixture
def api(real_kube: realapi.RealKube | None) -> Iterator[ApiServer]:  # noqa: F811
    with realapi.api_server(real_kube, kube_version="1.37") as server:
        yield server


def _config(parameters: str, **extra: Any) -> str:
    head = "".join(f"{json.dumps(k)}:{json.dumps(v)}," for k, v in extra.items())
    opaque = f'{{"driver":"display.liken.sh","parameters":{parameters}}}'
    return f'[{{{head}"requests":["screen"],"opaque":{opaque}}}]'


def _claim_bytes(name: str, parameters: str) -> bytes:
    claim = json.dumps(testing.resource_claim(name), separators=(",", ":"))
    return claim.replace('"requests":[{', f'"config":{_config(parameters)},"requests":[{{',
                         1).encode()


def _with_allocation(claim: JsonObject, parameters: str) -> bytes:
    """The claim (as read) with an allocation whose parameters are `parameters`' bytes."""
    results = '[{"request":"screen","driver":"display.liken.sh","pool":"n1","device":"d0"}]'
    selector = ('{"nodeSelectorTerms":[{"matchFields":[{"key":"metadata.name",'
                '"operator":"In","values":["n1"]}]}]}')
    config = _config(parameters, source="FromClaim")
    allocation = (f'{{"devices":{{"results":{results},"config":{config}}},'
                  f'"nodeSelector":{selector}}}')
    claim.pop("status", None)
    head = json.dumps(claim, separators=(",", ":"))[:-1]
    return f'{head},"status":{{"allocation":{allocation}}}}}'.encode()


def _send(api: ApiServer, method: str, path: str, body: object,
          content_type: str = "application/json") -> RawReply:
    return call(api.url, method, path, body, content_type=content_type,
                **realapi.client_options(api))


def _message(reply: RawReply) -> str:
    return "" if reply.code < 300 else reply.body["message"].split(" is invalid: ", 1)[1]


def _label(api: ApiServer, name: str, value: str) -> RawReply:
    return _send(api, "PATCH", f"{CLAIMS}/{name}", {"metadata": {"labels": {"a": value}}}, MERGE)


def _devices(api: ApiServer, name: str) -> RawReply:
    devices = [{"driver": "display.liken.sh", "pool": "n1", "device": "d0", "data": {"x": 1}}]
    return _send(api, "PATCH", f"{CLAIMS}/{name}/status", {"status": {"devices": devices}}, MERGE)


@pytest.mark.parametrize(("spec", "allocation", "answers"), [
    (SPACED, COMPACT, (SPEC_IMMUTABLE, "", "")),
    (COMPACT, SPACED, ("", "", ALLOCATION_SET)),
    (COMPACT, COMPACT, ("", "", "")),
], ids=["spec-spaced", "allocation-spaced", "compact"])
def test_parameters_are_compared_as_the_bytes_sent(api: ApiServer, spec: str, allocation: str,
                                                   answers: tuple[str, str, str]) -> None:
    assert _send(api, "POST", CLAIMS, _claim_bytes("c", spec)).code == 201
    label, put, devices = answers
    assert _message(_label(api, "c", "1")) == label
    read = _send(api, "GET", f"{CLAIMS}/c", None).body
    reply = _send(api, "PUT", f"{CLAIMS}/c/status", _with_allocation(read, allocation))
    assert _message(reply) == put
    assert _message(_devices(api, "c")) == devices
    # What a JSON client reads back is compact, whatever was sent.
    read = _send(api, "GET", f"{CLAIMS}/c", None).body
    assert _message(_send(api, "PUT", f"{CLAIMS}/c/status",
                          json.dumps(read, separators=(",", ":")).encode())) == devices


def test_an_allocation_changed_in_value_cannot_be_written(api: ApiServer) -> None:
    assert _send(api, "POST", CLAIMS, _claim_bytes("c", COMPACT)).code == 201
    read = _send(api, "GET", f"{CLAIMS}/c", None).body
    assert _send(api, "PUT", f"{CLAIMS}/c/status", _with_allocation(read, COMPACT)).code == 200
    read = _send(api, "GET", f"{CLAIMS}/c", None).body
    other = json.dumps({**PARAMETERS, "mode": "800x600@60"}, separators=(",", ":"))
    assert _message(_send(api, "PUT", f"{CLAIMS}/c/status",
                          _with_allocation(read, other))) == ALLOCATION_SET


def test_the_bytes_of_each_parameters_value_are_found_in_the_body() -> None:
    raw = _claim_bytes("c", SPACED)
    sent = rawparams.sent(raw, json.loads(raw))
    assert sent == rawparams.Parameters(spec=(SPACED,), allocation=None)
    assert rawparams.compact(json.loads(raw)).spec == (COMPACT,)
