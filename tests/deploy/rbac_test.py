"""The operator's ServiceAccount is granted exactly the verbs its code uses, and nothing more.

EXPECTED is the documented list (deploy/base/cluster/clusterroles.yaml says which caller uses
each verb). It must change together with the code: a new API call in declare, draplugin or
capture needs a line here and in the ClusterRole, and a call that goes away takes its line
with it.
"""

from __future__ import annotations

import pytest

from fakekube import testing
from tests.deploy.appliedbase import applied_base
from tests.deploy.manifests import DEPLOY, OPERATOR_RENDERINGS, Doc, find, render
from tests.support import realapi
from tests.support.realapi import real_kube  # noqa: F401 - a fixture

# (API group, resource, verb, scope) -> the caller that needs it.
EXPECTED: dict[tuple[str, str, str, str], str] = {
    **{
        ("resource.k8s.io", "resourceslices", verb, "cluster"): "operator"
        for verb in ("create", "get", "list", "watch", "update")
    },
    ("resource.k8s.io", "resourceclaims", "get", "cluster"): "operator",
    ("resource.k8s.io", "resourceclaims/status", "patch", "cluster"): "operator",
    # A synthetic verb (no HTTP request makes it): the apiserver asks it of a status.devices
    # write, naming the driver; the only rule allowed to name a resource.
    ("resource.k8s.io", "resourceclaims/driver", "associated-node:patch", "cluster"): "operator",
    ("display.liken.sh", "displays", "get", "cluster"): "declare, operator",
    **{
        ("display.liken.sh", "displays", verb, "cluster"): "operator"
        for verb in ("create", "list", "patch", "watch")
    },
    ("display.liken.sh", "displays/status", "patch", "cluster"): "operator",
    ("", "nodes", "get", "cluster"): "operator",
    **{("", "pods", verb, "namespace"): "operator" for verb in ("get", "list", "watch")},
    ("authentication.k8s.io", "tokenreviews", "create", "cluster"): "capture",
    ("authorization.k8s.io", "subjectaccessreviews", "create", "cluster"): "capture",
}
CAPTURE_ONLY = {key for key, caller in EXPECTED.items() if caller == "capture"}
SYNTHETIC = {key for key in EXPECTED if ":" in key[2]}
DRIVER_RULE = {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/driver"],
               "resourceNames": ["display.liken.sh"], "verbs": ["associated-node:patch"]}


def _granted(rendering: str) -> set[tuple[str, str, str, str]]:
    """Every (group, resource, verb, scope) a role bound to the ServiceAccount grants."""
    docs = render(rendering)
    granted = set()
    for binding in docs:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if not any(s["name"] == "display-operator" for s in binding["subjects"]):
            continue
        role: Doc = find(docs, binding["roleRef"]["kind"], binding["roleRef"]["name"])
        scope = "cluster" if binding["kind"] == "ClusterRoleBinding" else "namespace"
        for rule in role["rules"]:
            granted |= {
                (group, resource, verb, scope)
                for group in rule["apiGroups"]
                for resource in rule["resources"]
                for verb in rule["verbs"]
            }
    return granted


def _expected(rendering: str) -> set[tuple[str, str, str, str]]:
    return set(EXPECTED) - CAPTURE_ONLY if rendering == "no-capture" else set(EXPECTED)


@pytest.mark.parametrize("rendering", OPERATOR_RENDERINGS)
def test_service_account_gets_exactly_the_documented_verbs(rendering: str) -> None:
    assert _granted(rendering) == _expected(rendering)


@pytest.mark.parametrize("rendering", OPERATOR_RENDERINGS)
def test_no_rule_names_resources_or_uses_wildcards(rendering: str) -> None:
    """A wildcard would pass the set comparison above by listing '*' as one verb. Only the
    driver rule names a resource: its own driver, whose status.devices entries it writes."""
    rules = [
        rule
        for doc in render(rendering)
        if doc["kind"] in ("ClusterRole", "Role")
        for rule in doc["rules"]
    ]
    assert DRIVER_RULE in rules
    assert not [
        rule
        for rule in rules
        if ("resourceNames" in rule and rule != DRIVER_RULE)
        or "nonResourceURLs" in rule
        or "*" in rule["verbs"] + rule["resources"] + rule["apiGroups"]
    ]


def test_every_role_is_bound_to_the_service_account() -> None:
    """A role nothing binds would be dead text that still reads as a grant."""
    docs = render("base")
    roles = {
        (d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] in ("ClusterRole", "Role")
    }
    bound = {
        (d["roleRef"]["kind"], d["roleRef"]["name"])
        for d in docs
        if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
    }
    assert roles == bound


def test_clusterroles_comment_lists_every_resource_it_grants() -> None:
    """The verbs-per-caller comment in clusterroles.yaml names every resource granted."""
    text = (DEPLOY / "base" / "cluster" / "clusterroles.yaml").read_text()
    comment = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    assert not [resource for _, resource, _, _ in EXPECTED if f"{resource}:" not in comment]


def _request(group: str, resource: str, verb: str, namespace: str) -> tuple[str, str, object]:
    """A request making `verb` on `resource` (maybe `plural/subresource`): method, path, body.
    Objects need not exist: authorization answers before the object is looked up."""
    plural, _, sub = resource.partition("/")
    version = "v1alpha1" if group == "display.liken.sh" else "v1"
    path = (f"/apis/{group}/{version}" if group else "/api/v1") + (
        f"/namespaces/{namespace}" if namespace else "")
    named = f"{path}/{plural}/probe" + (f"/{sub}" if sub else "")
    return {
        "get": ("GET", named, None),
        "list": ("GET", f"{path}/{plural}", None),
        "watch": ("GET", f"{path}/{plural}?watch=true&timeoutSeconds=1", None),
        "create": ("POST", f"{path}/{plural}", {"metadata": {"name": "probe"}}),
        "update": ("PUT", named, {"metadata": {"name": "probe"}}),
        "patch": ("PATCH", named, {}),
        "delete": ("DELETE", named, None),
    }[verb]


def test_applied_base_lets_the_operator_do_each_documented_verb_and_no_more(
    real_kube: realapi.RealKube | None,  # noqa: F811
) -> None:
    """Through the API server's RBAC, with the ServiceAccount's token: every verb in the
    ClusterRole's comment (EXPECTED) is allowed, neighbouring ones are refused."""
    fake = applied_base(real_kube)
    try:
        token = fake.service_account_token("display-operator", "display-operator")

        def answer(group: str, resource: str, verb: str, namespace: str = "") -> int:
            method, path, body = _request(group, resource, verb, namespace)
            content = "application/merge-patch+json" if method == "PATCH" else (
                "application/json")
            return testing.call(fake.url, method, path, body, token=token, ca=fake.ca_pem,
                                content_type=content).code

        for group, resource, verb, scope in set(EXPECTED) - SYNTHETIC:
            ns = "display-operator" if scope == "namespace" else ""
            assert answer(group, resource, verb, ns) not in (401, 403), (resource, verb)
        denied = [
            ("display.liken.sh", "displays", "delete", ""),
            ("display.liken.sh", "displays", "update", ""),
            ("display.liken.sh", "displays/status", "update", ""),
            ("resource.k8s.io", "resourceclaims/status", "update", "default"),
            ("resource.k8s.io", "resourceclaims", "patch", "default"),
            ("resource.k8s.io", "resourceslices", "delete", ""),
            ("", "pods", "get", "default"),
            ("", "nodes", "patch", ""),
            ("", "secrets", "get", "display-operator"),
        ]
        for group, resource, verb, ns in denied:
            assert answer(group, resource, verb, ns) == 403, (resource, verb)
        if real_kube is None:  # the fake's own record of denials
            assert [(d.verb, d.resource) for d in fake.denials()] == [
                (verb, resource.partition("/")[0]) for _, resource, verb, _ in denied]
    finally:
        fake.stop()


def test_applied_base_grants_the_driver_verb_for_this_driver_only(
    real_kube: realapi.RealKube | None,  # noqa: F811
) -> None:
    """What a 1.36+ apiserver asks of a status.devices write, as a SubjectAccessReview the
    API server answers with its RBAC: this driver's entries from the associated node, no other
    driver's, never from an arbitrary node."""
    fake = applied_base(real_kube)
    try:
        user = "system:serviceaccount:display-operator:display-operator"

        def allowed(verb: str, name: str) -> bool:
            review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                      "spec": {"user": user, "groups": ["system:serviceaccounts"],
                               "resourceAttributes": {
                                   "group": "resource.k8s.io", "resource": "resourceclaims",
                                   "subresource": "driver", "verb": verb, "name": name}}}
            reply = testing.call(fake.url, "POST",
                                 "/apis/authorization.k8s.io/v1/subjectaccessreviews", review,
                                 token=fake.admin_token, ca=fake.ca_pem)
            assert reply.code == 201, reply.body
            return bool(reply.body["status"]["allowed"])

        assert allowed("associated-node:patch", "display.liken.sh")
        assert not allowed("associated-node:patch", "gpu.example.com")
        assert not allowed("arbitrary-node:patch", "display.liken.sh")
        assert not allowed("associated-node:update", "display.liken.sh")
    finally:
        fake.stop()
