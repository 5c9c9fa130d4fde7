"""deploy/overlays/monitoring read the way Prometheus and Grafana read it: the PrometheusRule's
rule groups, the dashboard's expressions, and the metric names those expressions name.

The names come from a small PromQL scan, not a parser: strings, label matchers, ranges and the
label lists of `by`/`on`/... are dropped, then every identifier that is not called, not a
keyword and not a number is a metric name. It over-reports rather than misses (a stray word
shows as an unknown metric), which is the safe side for a test that a name exists.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
OVERLAY = DEPLOY / "overlays" / "monitoring"
RULES_TEST = OVERLAY / "rules-test.yaml"
DASHBOARD_KEY = "display-operator.json"

# Series the alerts read that no binary of ours exports, and who does.
EXTERNAL: dict[str, str] = {
    "up": "Prometheus, per scrape target",
    "container_memory_working_set_bytes": "the kubelet's cAdvisor (/metrics/cadvisor)",
    "container_spec_memory_limit_bytes": "the kubelet's cAdvisor (/metrics/cadvisor)",
}

Doc = dict[str, Any]

_KEYWORDS = frozenset({
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
    "offset", "bool", "atan2", "inf", "nan", "Inf", "NaN",
})
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_WORD = re.compile(r"(?<![\w:.$])([A-Za-z_:][\w:]*)(\s*\()?")
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:([A-Za-z_:][\w:]*)?\s*(\{[^}]*\})?\s*,)?")
# A query inside an annotation's template: `printf "<expr>" ... | query`.
_TEMPLATE_QUERY = re.compile(r'printf\s+"((?:[^"\\]|\\.)*)"[^}]*\|\s*query')


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads."""
    text = _LABEL_LIST.sub(" ", _RANGE.sub(" ", _MATCHERS.sub(" ", _STRING.sub(" ", expr))))
    return {word for word, call in _WORD.findall(text) if not call and word not in _KEYWORDS}


def variable_metric_names(query: str) -> set[str]:
    """The metric names a Grafana Prometheus variable's query reads (`label_values(m, l)`,
    or an expression)."""
    found = _LABEL_VALUES.match(query)
    if found:
        return {found.group(1)} if found.group(1) else set()
    return metric_names(query)


@functools.cache
def render() -> tuple[Doc, ...]:
    """The objects `kubectl kustomize deploy/overlays/monitoring` prints."""
    result = subprocess.run(["kubectl", "kustomize", str(OVERLAY)], capture_output=True,
                            text=True, timeout=120, check=True)
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def one(kind: str) -> Doc:
    found = [doc for doc in render() if doc["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} objects in the monitoring overlay"
    return found[0]


def rule_groups() -> Doc:
    """The PrometheusRule's spec: a Prometheus rules file."""
    spec: Doc = one("PrometheusRule")["spec"]
    return spec


def alerts() -> list[Doc]:
    return [rule for group in rule_groups()["groups"] for rule in group["rules"]
            if "alert" in rule]


def dashboard() -> Doc:
    data: Doc = json.loads(one("ConfigMap")["data"][DASHBOARD_KEY])
    return data


def panels(board: Doc) -> Iterator[Doc]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def rule_exprs() -> dict[str, str]:
    """Every expression of the rules, by where it is (`alert Name`, `alert Name description`)."""
    exprs: dict[str, str] = {}
    for rule in alerts():
        exprs[f"alert {rule['alert']}"] = rule["expr"]
        for key, text in rule.get("annotations", {}).items():
            for n, query in enumerate(_TEMPLATE_QUERY.findall(text)):
                exprs[f"alert {rule['alert']} {key} query {n}"] = query.replace('\\"', '"')
    return exprs


def dashboard_names(board: Doc) -> dict[str, set[str]]:
    """The metric names of every panel's targets and every variable, by where they are."""
    found: dict[str, set[str]] = {}
    for panel in panels(board):
        for target in panel.get("targets", []):
            found[f"panel {panel['title']!r} {target['refId']}"] = metric_names(target["expr"])
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            text = query["query"] if isinstance(query, dict) else query
            found[f"variable {variable['name']}"] = variable_metric_names(text)
    return found


def all_names(board: Doc | None = None) -> dict[str, set[str]]:
    """Every metric name the rules and the dashboard read, by where each is read."""
    found = {where: metric_names(expr) for where, expr in rule_exprs().items()}
    found.update(dashboard_names(dashboard() if board is None else board))
    return found


def exposed_names(exposition: str) -> set[str]:
    """The sample names a Prometheus text exposition can carry: each family a `# TYPE` line
    declares (with its type's suffixes, so a labelled family with no sample yet counts), and
    every sample's own name."""
    names: set[str] = set()
    suffixes = {"counter": ("", "_created"), "gauge": ("",), "untyped": ("",),
                "histogram": ("_bucket", "_sum", "_count", "_created"),
                "summary": ("", "_sum", "_count", "_created")}
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            names.update(name + suffix for suffix in suffixes.get(kind, ("",)))
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names


def unknown_names(exposed: set[str], board: Doc | None = None) -> dict[str, set[str]]:
    """The names the rules and the dashboard read that neither `exposed` nor EXTERNAL has."""
    missing = {where: names - exposed - EXTERNAL.keys()
               for where, names in all_names(board).items()}
    return {where: names for where, names in missing.items() if names}
