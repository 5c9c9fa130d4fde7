"""Each consumer example, applied as `kubectl apply -f FILE` applies it (strict field
validation, the namespace `default` where the file names none), to an API server holding the
rendered base: the fake simnode embeds (HTTPS, RBAC, the Display CRD's schema, the built-in
kinds' schemas), or with DISPLAY_OPERATOR_REAL_API=1 a real kube-apiserver. A field the API
does not know, a Display the CRD refuses, a claim parameter admission refuses or a kind the
cluster lacks fails here. The fake evaluates no CEL, so there a claim's DisplayConfig goes
through the admission policy's model (tests/deploy/displayconfig.py, held to the policy by
admission_test.py) and the driver's decoding, as the real server's policy and a prepare would.
The hello-screen's pixels on a real node are tests/cluster's."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from draplugin.driver import claimconfig
from fakekube import testing
from fakekube.kinds import Kind
from tests.deploy import displayconfig
from tests.deploy.appliedbase import applied_base
from tests.deploy.manifests import DEPLOY, Doc
from tests.support import realapi
from tests.support.realapi import real_kube  # noqa: F401 - a fixture

EXAMPLES = sorted(
    p.name for p in (DEPLOY / "examples").glob("*.yaml") if p.name != "kustomization.yaml"
)
NAMESPACE = "default"
DRIVER = "display.liken.sh"
# The workload kinds the examples use beyond those the fake serves for the operator; their
# objects are checked against kubernetes_validate's schemas as the other built-in kinds are.
WORKLOADS = (
    Kind("apps", ("v1",), "Deployment", "deployments", namespaced=True, status_subresource=True),
    Kind("batch", ("v1",), "Job", "jobs", namespaced=True, status_subresource=True),
    Kind("batch", ("v1",), "CronJob", "cronjobs", namespaced=True, status_subresource=True),
)


@dataclass(frozen=True)
class Reply:
    code: int
    body: Any


@pytest.fixture(scope="module")
def api(request: pytest.FixtureRequest) -> Iterator[Any]:
    real = request.getfixturevalue("real_kube") if realapi.enabled() else None
    server = applied_base(real)
    if real is None:
        for kind in WORKLOADS:
            server.registry.add(kind)
    try:
        yield server
    finally:
        server.stop()


def _docs(example: str) -> list[Doc]:
    return [d for d in yaml.safe_load_all((DEPLOY / "examples" / example).read_text()) if d]


def _display_configs(doc: Doc) -> list[Any]:
    spec = doc.get("spec", {})
    claim = spec.get("spec") if doc["kind"] == "ResourceClaimTemplate" else spec
    if doc["kind"] not in ("ResourceClaim", "ResourceClaimTemplate") or not claim:
        return []
    return [c["opaque"]["parameters"] for c in claim["devices"].get("config", [])
            if c.get("opaque", {}).get("driver") == DRIVER]


def _refused_by_admission(doc: Doc) -> str | None:
    """What the claim-parameters policy and the driver's decoding say of `doc`, on the fake."""
    for params in _display_configs(doc):
        broken = displayconfig.violations(params)
        if broken:
            return f"admission: {broken}"
        try:
            claimconfig.decode(params, source=doc["metadata"]["name"])
        except claimconfig.ClaimConfigError as err:
            return f"driver: {err}"
    return None


def _apply(api: Any, doc: Doc) -> Reply:
    namespace = doc["metadata"].get("namespace", NAMESPACE)
    strict = "?fieldValidation=Strict"  # kubectl apply's default: an unknown field is an error
    if realapi.enabled():
        path = api.path(doc["apiVersion"], doc["kind"], namespace=namespace)
        reply = api.call("POST", path + strict, doc, token=api.admin_token)
        return Reply(reply.code, reply.body)
    refused = _refused_by_admission(doc)
    if refused is not None:
        return Reply(422, refused)
    scoped = {**doc, "metadata": {**doc["metadata"], "namespace": namespace}}
    path = testing.collection_path(api.registry, scoped)
    reply = testing.call(api.url, "POST", path + strict, scoped, token=api.admin_token,
                         ca=api.ca_pem)
    return Reply(reply.code, reply.body)


def test_there_are_examples() -> None:
    assert "hello-screen.yaml" in EXAMPLES and len(EXAMPLES) >= 6


@pytest.mark.parametrize("example", EXAMPLES)
def test_each_example_applies(api: Any, example: str) -> None:
    for doc in _docs(example):
        reply = _apply(api, doc)
        assert reply.code == 201, (example, doc["kind"], doc["metadata"]["name"], reply.body)
        assert reply.body["metadata"]["name"] == doc["metadata"]["name"]


def _broken(example: str, kind: str) -> Doc:
    """A copy of `example`'s first `kind`, renamed so it does not collide with the applied one."""
    doc = copy.deepcopy(next(d for d in _docs(example) if d["kind"] == kind))
    doc["metadata"]["name"] = f"broken-{doc['metadata']['name']}"
    return doc


def test_a_misspelled_field_in_an_example_is_refused(api: Any) -> None:
    """The check above can fail: the hello-screen's Pod with a field the API does not know."""
    pod = _broken("hello-screen.yaml", "Pod")
    pod["spec"]["containerz"] = pod["spec"]["containers"]
    reply = _apply(api, pod)
    assert reply.code == 400 and "containerz" in str(reply.body), reply.body


def test_a_display_the_crd_refuses_is_refused(api: Any) -> None:
    display = _broken("display-start-mode.yaml", "Display")
    display["spec"]["power"] = "Sleep"
    reply = _apply(api, display)
    assert reply.code == 422 and "Sleep" in str(reply.body), reply.body


def test_a_claim_parameter_admission_refuses_is_refused(api: Any) -> None:
    claim = _broken("kiosk-browser.yaml", "ResourceClaim")
    claim["spec"]["devices"]["config"][0]["opaque"]["parameters"]["brightness"] = 170
    reply = _apply(api, claim)
    assert reply.code == 422 and "rightness" in str(reply.body), reply.body
