"""The two ValidatingAdmissionPolicies: their CEL is well-formed and says what the model says.

What is verified here: every expression tokenizes as CEL, its brackets balance, its names are
known, and each `variables.*` it uses is declared before it (tests/deploy/cel.py); the claim
policy calls only standard CEL functions; the literals the CEL compares against (field names,
enums, the mode pattern, numeric bounds, the driver, the ServiceAccount and the node claim)
are the ones of a Python model of the rules (tests/deploy/displayconfig.py and the slice model
below), of the Display CRD and of libdisplay.hardware.modes; and the models accept and reject the
parameter sets and writes below.

What is not verified: no CEL is evaluated. That the CEL, run by an apiserver, computes what
the models compute is argued from the matching literals and from reading the expressions,
not measured; nor is the type-checking an apiserver does when the policy is created, the
cost budget, or the userInfo.extra node claim (ServiceAccountTokenPodNodeInfo) of a real
token.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from draplugin.driver import claimconfig
from libdisplay.hardware.modes import ModeError, parse_mode
from tests.deploy import cel, displayconfig
from tests.deploy.cases import BAD, BASE, DRIVER, GOOD, NODE_CLAIM, SLICE_WRITES
from tests.deploy.manifests import Doc, find, render

CLAIM_POLICY = "display-operator-claim-parameters"
SLICE_POLICY = "display-operator-resourceslices"
# CEL's standard functions and macros: nothing from Kubernetes' extension libraries, so the
# rules read the same in any CEL implementation.
STANDARD_CEL = {"size", "matches", "type", "has", "dyn", "string", "int", "all", "exists",
                "filter", "map"}  # fmt: skip


def _policy(name: str) -> Doc:
    return find(render("base"), "ValidatingAdmissionPolicy", name)


def _variables(name: str) -> dict[str, str]:
    return {v["name"]: v["expression"] for v in _policy(name)["spec"]["variables"]}


def _expressions(name: str) -> list[tuple[str, str, set[str]]]:
    """(where, expression, the variables declared before it) for every expression."""
    spec = _policy(name)["spec"]
    found: list[tuple[str, str, set[str]]] = []
    for condition in spec.get("matchConditions", []):
        found.append((f"matchConditions/{condition['name']}", condition["expression"], set()))
    declared: set[str] = set()
    for variable in spec["variables"]:
        found.append((f"variables/{variable['name']}", variable["expression"], set(declared)))
        declared.add(variable["name"])
    for index, validation in enumerate(spec["validations"]):
        found.append((f"validations/{index}", validation["expression"], set(declared)))
        if "messageExpression" in validation:
            found.append(
                (f"validations/{index}/message", validation["messageExpression"], set(declared))
            )
    return found


ALL_EXPRESSIONS = [
    (f"{policy}/{where}", expr, declared)
    for policy in (CLAIM_POLICY, SLICE_POLICY)
    for where, expr, declared in _expressions(policy)
]


@pytest.mark.parametrize(
    ("where", "expr", "declared"), ALL_EXPRESSIONS, ids=[w for w, _, _ in ALL_EXPRESSIONS]
)
def test_expression_is_structurally_sound_cel(where: str, expr: str, declared: set[str]) -> None:
    cel.check(expr, declared=declared)


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ("size(variables.params == 0", "unclosed"),
        ("object.spec.x ? 1", "'?'"),
        ("varaibles.params", "unknown name"),
        ("variables.later == 1", "not declared"),
        ("'unterminated", "unterminated"),
        (r"'bad \q escape'", "bad escape"),
    ],
    ids=["unclosed", "ternary", "typo", "undeclared", "string", "escape"],
)
def test_structural_check_rejects_broken_cel(expr: str, problem: str) -> None:
    """The check above can fail."""
    with pytest.raises(cel.CelSyntaxError, match=problem):
        cel.check(expr, declared=set())


@pytest.mark.parametrize("policy", [CLAIM_POLICY, SLICE_POLICY])
def test_policy_is_bound_to_deny(policy: str) -> None:
    binding = find(render("base"), "ValidatingAdmissionPolicyBinding", policy)
    assert (binding["spec"], _policy(policy)["spec"]["failurePolicy"]) == (
        {"policyName": policy, "validationActions": ["Deny"]},
        "Fail",
    )


@pytest.mark.parametrize(
    ("where", "expr"),
    [(w, e) for w, e, _ in _expressions(CLAIM_POLICY)],
    ids=[w for w, _, _ in _expressions(CLAIM_POLICY)],
)
def test_claim_policy_uses_standard_cel_only(where: str, expr: str) -> None:
    assert cel.functions_called(expr) <= STANDARD_CEL


def test_claim_policy_checks_claims_and_templates_on_create_and_update() -> None:
    (rule,) = _policy(CLAIM_POLICY)["spec"]["matchConstraints"]["resourceRules"]
    assert rule == {
        "apiGroups": ["resource.k8s.io"],
        "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["resourceclaims", "resourceclaimtemplates"],
    }


def test_claim_policy_reads_the_template_spec_of_a_template() -> None:
    tokens = [t.value for t in cel.tokenize(_variables(CLAIM_POLICY)["claimSpec"]) if t.value]
    assert tokens == ["resourceclaimtemplates"]


def test_claim_policy_selects_the_drivers_own_parameters() -> None:
    strings = [t.value for t in cel.tokenize(_variables(CLAIM_POLICY)["params"]) if t.value]
    assert strings == ["display.liken.sh"]


def test_claim_policy_identity_is_the_models() -> None:
    strings = [t.value for t in cel.tokenize(_variables(CLAIM_POLICY)["badIdentity"]) if t.value]
    assert strings == ["apiVersion", displayconfig.API_VERSION, "kind", displayconfig.KIND]


def test_claim_policy_known_fields_are_the_models() -> None:
    lists = cel.string_lists(_variables(CLAIM_POLICY)["unknownFields"])
    assert lists == [list(displayconfig.FIELDS)] * 2


def test_claim_policy_mode_pattern_is_the_models() -> None:
    assert cel.string_arguments(_variables(CLAIM_POLICY)["badMode"], "matches") == [
        displayconfig.MODE_PATTERN
    ]


def test_claim_policy_transforms_are_the_models() -> None:
    assert cel.string_lists(_variables(CLAIM_POLICY)["badTransform"]) == [
        list(displayconfig.TRANSFORMS)
    ]


def test_claim_policy_power_states_are_the_models() -> None:
    assert cel.string_lists(_variables(CLAIM_POLICY)["badPower"]) == [list(displayconfig.POWER)]


@pytest.mark.parametrize("field", list(displayconfig.RANGES))
def test_claim_policy_integer_bounds_are_the_models(field: str) -> None:
    expr = _variables(CLAIM_POLICY)[f"bad{field.capitalize()}"]
    bounds = re.search(
        rf"type\(p\.{field}\) == int && p\.{field} >= (\d+) && p\.{field} <= (\d+)", expr
    )
    assert bounds is not None and (int(bounds[1]), int(bounds[2])) == displayconfig.RANGES[field]


def test_claim_policy_input_names_are_the_models() -> None:
    assert cel.string_arguments(_variables(CLAIM_POLICY)["badInput"], "matches") == [
        displayconfig.INPUT_PATTERN
    ]


def test_every_rule_of_the_model_has_a_validation() -> None:
    validated = {
        name
        for validation in _policy(CLAIM_POLICY)["spec"]["validations"]
        for name in cel.variables_used(validation["expression"])
    }
    assert validated == {
        "notObjects", "badIdentity", "unknownFields", "badMode", "badTransform", "badScale",
        "badBrightness", "badContrast", "badInput", "badPower",
    }  # fmt: skip


def test_each_message_speaks_of_the_rule_it_fails() -> None:
    """A messageExpression reads the variable its expression tests, not another rule's."""
    mismatched = [
        validation
        for validation in _policy(CLAIM_POLICY)["spec"]["validations"]
        if "messageExpression" in validation
        and cel.variables_used(validation["messageExpression"])
        != cel.variables_used(validation["expression"])
    ]
    assert not mismatched


def _display_spec_schema() -> dict[str, Any]:
    crd = find(render("base"), "CustomResourceDefinition", "displays.display.liken.sh")
    spec: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "spec"
    ]["properties"]
    return spec


def test_display_crd_states_the_same_mode_pattern() -> None:
    assert _display_spec_schema()["mode"]["pattern"] == displayconfig.MODE_PATTERN


def test_display_crd_states_the_same_transforms() -> None:
    assert tuple(_display_spec_schema()["transform"]["enum"]) == displayconfig.TRANSFORMS


def test_display_crd_states_the_same_scale_range() -> None:
    scale = _display_spec_schema()["scale"]
    assert (scale["minimum"], scale["maximum"]) == displayconfig.RANGES["scale"]


# --- The model of the claim parameters -------------------------------------------------------


@pytest.mark.parametrize("params", GOOD.values(), ids=list(GOOD))
def test_model_accepts_good_parameters(params: dict[str, Any]) -> None:
    assert displayconfig.violations({**BASE, **params}) == []


@pytest.mark.parametrize(("params", "broken"), BAD.values(), ids=list(BAD))
def test_model_rejects_bad_parameters(params: Any, broken: list[str]) -> None:
    assert displayconfig.violations(params) == broken


MODE_SAMPLES = [
    "1920x1080", "1920x1080@60", "3840x2160@59.94", "1920x1080i@60", "640x480@59.940",
    "99999x99999@999.999", "1x1", "1920x1080@", "1920x1080@60.", "1920x1080@1000",
    "1920x1080@60.1234", "100000x1080", "01920x1080", "x1080", "1920x1080ii", "1920 x 1080",
    "1920x1080@-60", "1920x1080@60i",
]  # fmt: skip


def _libdisplay_accepts(text: str) -> bool:
    try:
        parse_mode(text)
    except ModeError:
        return False
    return True


@pytest.mark.parametrize("text", MODE_SAMPLES)
def test_mode_pattern_accepts_what_libdisplay_parses(text: str) -> None:
    """Admission rejects no mode the driver would take, and takes none the driver rejects."""
    accepted = re.fullmatch(displayconfig.MODE_PATTERN, text) is not None
    assert accepted == _libdisplay_accepts(text)


# --- The ResourceSlice policy ----------------------------------------------------------------


def _slice_policy_regex() -> str:
    (condition,) = _policy(SLICE_POLICY)["spec"]["matchConditions"]
    (regex,) = cel.string_arguments(condition["expression"], "matches")
    return regex


def _slice_write_allowed(
    *, username: str, extra: dict[str, list[str]], operation: str, new: Doc | None, old: Doc | None
) -> bool:
    """The slice policy's decision, restated: matched users write only their node's slices."""
    if re.fullmatch(_slice_policy_regex(), username) is None:
        return True
    node = extra[NODE_CLAIM][0] if extra.get(NODE_CLAIM) else ""
    written = old if operation == "DELETE" else new
    assert written is not None
    return (
        bool(node)
        and written["spec"]["driver"] == DRIVER
        and written["spec"].get("nodeName", "") == node
    )


@pytest.mark.parametrize(
    ("username", "extra", "operation", "new", "old", "allowed"),
    SLICE_WRITES.values(),
    ids=list(SLICE_WRITES),
)
def test_slice_model_lets_the_operator_write_only_its_nodes_slices(
    username: str,
    extra: dict[str, list[str]],
    operation: str,
    new: Doc | None,
    old: Doc | None,
    allowed: bool,
) -> None:
    assert (
        _slice_write_allowed(username=username, extra=extra, operation=operation, new=new, old=old)
        == allowed
    )


@pytest.mark.parametrize("rendering", ["base", "release"])
def test_slice_policy_matches_the_operators_service_account(rendering: str) -> None:
    docs = render(rendering)
    account = find(docs, "ServiceAccount", "display-operator")["metadata"]
    username = f"system:serviceaccount:{account['namespace']}:{account['name']}"
    assert re.fullmatch(_slice_policy_regex(), username) is not None


def test_slice_policy_reads_the_tokens_node_claim() -> None:
    strings = {t.value for t in cel.tokenize(_variables(SLICE_POLICY)["userNodeName"]) if t.value}
    assert NODE_CLAIM in strings


def test_slice_policy_checks_the_old_slice_on_delete() -> None:
    assert _variables(SLICE_POLICY)["slice"] == "request.operation == 'DELETE' ? oldObject : object"


def test_slice_policy_names_the_driver() -> None:
    validations = _policy(SLICE_POLICY)["spec"]["validations"]
    strings = {t.value for v in validations for t in cel.tokenize(v["expression"]) if t.value}
    assert DRIVER in strings


def test_slice_policy_covers_every_write() -> None:
    (rule,) = _policy(SLICE_POLICY)["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["resources"], sorted(rule["operations"])) == (
        ["resourceslices"],
        ["CREATE", "DELETE", "UPDATE"],
    )


# --- The driver's decoding against the model --------------------------------------------------

# Cases admission refuses although the driver's decoding would take them: the driver strips
# blanks around a mode. Admission may be stricter than the driver, never looser.
STRICTER_AT_ADMISSION = {"mode trailing newline"}


@pytest.mark.parametrize("params", GOOD.values(), ids=list(GOOD))
def test_driver_decodes_what_admission_lets_through(params: dict[str, Any]) -> None:
    """A claim admission lets through must not fail at prepare on its parameters' shape."""
    claimconfig.decode({**BASE, **params}, source="case")


@pytest.mark.parametrize("case", list(BAD))
def test_driver_refuses_what_admission_refuses(case: str) -> None:
    params = BAD[case][0]
    if case in STRICTER_AT_ADMISSION:
        claimconfig.decode(params, source="case")
        return
    with pytest.raises(claimconfig.ClaimConfigError):
        claimconfig.decode(params, source="case")


@pytest.mark.parametrize("power", claimconfig.POWER_STATES)
def test_every_power_state_the_driver_writes_passes_admission(power: str) -> None:
    assert displayconfig.violations({**BASE, "power": power}) == []


@pytest.mark.parametrize("name", claimconfig.INPUTS)
def test_every_input_name_the_driver_knows_passes_admission_in_any_case(name: str) -> None:
    for spelling in (name, name.lower(), name.upper()):
        assert displayconfig.violations({**BASE, "input": spelling}) == []
        assert claimconfig.decode({**BASE, "input": spelling}, source="case").input == name
