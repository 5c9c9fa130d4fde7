"""The admission policies' real CEL, evaluated with cel-python over the cases of cases.py.

This is the check admission_test.py cannot make: that the expressions, run, reject exactly
the rules each case breaks and let the writes through that the models let through, with
cel-python (a locked requirement, so CI runs it).
cel-python implements standard CEL, which is all the claim policy uses; the apiserver's own
evaluator (cel-go, with Kubernetes' typing of `object` and `request`) is not run here.
"""

from __future__ import annotations

from typing import Any

import celpy
import pytest
from celpy import celtypes
from celpy.adapter import json_to_cel

from tests.deploy import cel
from tests.deploy.cases import BAD, BASE, GOOD, SLICE_WRITES
from tests.deploy.manifests import Doc, find, render


def _policy(name: str) -> Doc:
    return find(render("base"), "ValidatingAdmissionPolicy", name)


def _evaluate(expression: str, activation: dict[str, Any]) -> Any:
    environment = celpy.Environment()
    return environment.program(environment.compile(expression)).evaluate(activation)


def _failing_rules(policy: str, request: dict[str, Any]) -> list[str] | None:
    """The variables of the validations that fail, or None when the policy does not match."""
    activation = {key: json_to_cel(value) for key, value in request.items()}
    spec = _policy(policy)["spec"]
    for condition in spec.get("matchConditions", []):
        if not _evaluate(condition["expression"], activation):
            return None
    values: dict[Any, Any] = {}
    for variable in spec["variables"]:
        activation["variables"] = celtypes.MapType(values)
        values[celtypes.StringType(variable["name"])] = _evaluate(
            variable["expression"], activation
        )
    activation["variables"] = celtypes.MapType(values)
    failing = []
    for validation in spec["validations"]:
        if not _evaluate(validation["expression"], activation):
            # Every message must evaluate too: a broken one hides the reason from the user.
            if "messageExpression" in validation:
                assert str(_evaluate(validation["messageExpression"], activation))
            failing.extend(sorted(cel.variables_used(validation["expression"])))
    return failing


def _claim_request(params: Any, *, template: bool) -> dict[str, Any]:
    devices = {
        "requests": [{"name": "screen", "exactly": {"deviceClassName": "display.liken.sh"}}],
        "config": [
            {
                "requests": ["screen"],
                "opaque": {"driver": "display.liken.sh", "parameters": params},
            },
            # Another driver's parameters are none of this policy's business.
            {"opaque": {"driver": "other.example.com", "parameters": {"anything": True}}},
        ],
    }
    spec = {"spec": {"devices": devices}} if template else {"devices": devices}
    resource = "resourceclaimtemplates" if template else "resourceclaims"
    return {
        "object": {"metadata": {"name": "c"}, "spec": spec},
        "oldObject": None,
        "request": {"operation": "CREATE", "resource": {"resource": resource}},
    }


TEMPLATE = [False, True]


@pytest.mark.parametrize("template", TEMPLATE, ids=["claim", "template"])
@pytest.mark.parametrize("params", GOOD.values(), ids=list(GOOD))
def test_cel_admits_good_parameters(params: dict[str, Any], template: bool) -> None:
    request = _claim_request({**BASE, **params}, template=template)
    assert _failing_rules("display-operator-claim-parameters", request) == []


@pytest.mark.parametrize("template", TEMPLATE, ids=["claim", "template"])
@pytest.mark.parametrize(("params", "broken"), BAD.values(), ids=list(BAD))
def test_cel_rejects_bad_parameters_by_the_rule_they_break(
    params: Any, broken: list[str], template: bool
) -> None:
    request = _claim_request(params, template=template)
    assert _failing_rules("display-operator-claim-parameters", request) == broken


def test_cel_skips_an_update_that_leaves_the_spec_alone() -> None:
    request = _claim_request({"bad": True}, template=False)
    request["request"]["operation"] = "UPDATE"
    request["oldObject"] = request["object"]
    assert _failing_rules("display-operator-claim-parameters", request) is None


@pytest.mark.parametrize(
    ("username", "extra", "operation", "new", "old", "allowed"),
    SLICE_WRITES.values(),
    ids=list(SLICE_WRITES),
)
def test_cel_lets_the_operator_write_only_its_nodes_slices(
    username: str,
    extra: dict[str, list[str]],
    operation: str,
    new: Doc | None,
    old: Doc | None,
    allowed: bool,
) -> None:
    request = {
        "object": new,
        "oldObject": old,
        "request": {"operation": operation, "userInfo": {"username": username, "extra": extra}},
    }
    failing = _failing_rules("display-operator-resourceslices", request)
    assert (failing is None or failing == []) == allowed
