"""Label and field selector parsing and matching, in the apiserver's syntax."""

from __future__ import annotations

import pytest

from fakekube.selectors import FieldTerm, SelectorError, parse_fields, parse_labels

LABELS = {"app": "display", "tier": "node", "gen": "3"}


@pytest.mark.parametrize(("selector", "matches"), [
    ("", True),
    ("app=display", True),
    ("app==display", True),
    ("app=other", False),
    ("app!=other", True),
    ("missing!=x", True),
    ("app in (display, other)", True),
    ("app in (other)", False),
    ("app notin (other)", True),
    ("missing notin (x)", True),
    ("app notin (display)", False),
    ("tier", True),
    ("missing", False),
    ("!missing", True),
    ("!tier", False),
    ("gen>2", True),
    ("gen<3", False),
    ("app>1", False),
    ("app=display,tier=node", True),
    ("app=display, !tier", False),
    ("example.com/role", False),
], ids=lambda v: v if isinstance(v, str) and v else None)
def test_label_selector_matching(selector: str, matches: bool) -> None:
    assert parse_labels(selector).matches(LABELS) is matches


@pytest.mark.parametrize("selector", [
    "app in ()", "app in (a", "app in a", "=x", "app=(x)", "bad key=x", "-bad=x",
    "app=" + "v" * 64, "gen>x", "app,,tier",
], ids=["empty-set", "unclosed-set", "no-parenthesis", "no-key", "parenthesis-value",
        "space-in-key", "leading-dash", "value-too-long", "non-integer-bound", "empty-term"])
def test_label_selector_errors(selector: str) -> None:
    with pytest.raises(SelectorError, match="unable to parse requirement"):
        parse_labels(selector)


@pytest.mark.parametrize(("selector", "terms"), [
    ("spec.nodeName=n1", (FieldTerm("spec.nodeName", False, "n1"),)),
    ("spec.nodeName==n1", (FieldTerm("spec.nodeName", False, "n1"),)),
    ("spec.driver!=a.b,metadata.name=x", (FieldTerm("spec.driver", True, "a.b"),
                                          FieldTerm("metadata.name", False, "x"))),
    (r"metadata.name=a\,b", (FieldTerm("metadata.name", False, "a,b"),)),
    ("metadata.name=", (FieldTerm("metadata.name", False, ""),)),
], ids=["equal", "double-equal", "not-equal-and", "escaped-comma", "empty-value"])
def test_field_selector_parsing(selector: str, terms: tuple[FieldTerm, ...]) -> None:
    assert parse_fields(selector).terms == terms


def test_field_selector_matching() -> None:
    values = {"spec.nodeName": "n1", "spec.driver": "display.liken.sh"}
    selector = parse_fields("spec.nodeName=n1,spec.driver!=gpu.example.com")
    assert selector.matches(lambda f: values.get(f, ""))
    assert not parse_fields("spec.nodeName!=n1").matches(lambda f: values.get(f, ""))


def test_field_selector_without_operator_is_an_error() -> None:
    with pytest.raises(SelectorError, match="can't understand 'spec.nodeName'"):
        parse_fields("spec.nodeName")
