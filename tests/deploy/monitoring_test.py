"""deploy/overlays/monitoring: it renders on the base; the PodMonitor scrapes the DaemonSet's
ports as they are served; the alerts pass `promtool check rules` and `promtool test rules`,
each with a case that fires it and one where it stays silent, and each has a runbook section;
the dashboard has its sidecar label, a row per node and a panel per screen, and reads only
metrics the binaries' registries declare (the scrape of a running node is
tests/monitoring_scrape_test.py).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from capture.metrics import Metrics as CaptureMetrics
from draplugin.node.metrics import Metrics as OperatorMetrics
from tests.deploy import monitoring
from tests.deploy.manifests import render as render_base

README = monitoring.DEPLOY / "README.md"


def _promtool() -> str:
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool (Debian's prometheus package) is not installed"
    return promtool


def _container_ports() -> dict[str, dict[str, Any]]:
    daemonset = next(d for d in monitoring.render() if d["kind"] == "DaemonSet")
    return {port["name"]: container for container in
            daemonset["spec"]["template"]["spec"]["containers"]
            for port in container.get("ports", [])}


def test_the_overlay_is_the_base_and_the_monitoring_objects() -> None:
    def key(doc: dict[str, Any]) -> tuple[str, str, str]:
        return doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"]

    base = {key(d): d for d in render_base("base")}
    overlay = {key(d): d for d in monitoring.render()}
    assert {k: overlay.get(k) for k in base} == base
    assert sorted(k[0] for k in overlay.keys() - base.keys()) == [
        "ConfigMap", "PodMonitor", "PrometheusRule"]
    namespace = next(d for d in base.values() if d["kind"] == "DaemonSet")["metadata"][
        "namespace"]
    for k in overlay.keys() - base.keys():
        assert k[1] == namespace, k


def test_podmonitor_scrapes_both_ports_as_they_are_served() -> None:
    monitor = monitoring.one("PodMonitor")["spec"]
    daemonset = next(d for d in monitoring.render() if d["kind"] == "DaemonSet")
    assert monitor["selector"]["matchLabels"] == daemonset["spec"]["selector"]["matchLabels"]
    ports = _container_ports()
    endpoints = {e["port"]: e for e in monitor["podMetricsEndpoints"]}
    assert set(endpoints) == {"metrics", "capture"}
    for name, endpoint in endpoints.items():
        assert name in ports, f"the DaemonSet has no port named {name}"
        probe = ports[name]["livenessProbe"]["httpGet"]
        # The liveness probe reaches the same listener: its scheme is the listener's.
        assert endpoint.get("scheme", "http").upper() == probe.get("scheme", "HTTP"), name
        assert endpoint["path"] == "/metrics"
        relabeled = {r["targetLabel"]: r for r in endpoint["relabelings"]}
        assert relabeled["node"]["sourceLabels"] == ["__meta_kubernetes_pod_node_name"]
    assert endpoints["metrics"]["relabelings"][-1]["replacement"] == "display-operator"
    assert endpoints["capture"]["relabelings"][-1]["replacement"] == "display-capture"


@pytest.fixture(scope="module")
def rules_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The PrometheusRule's spec as a rules file, beside a copy of the unit tests."""
    directory = tmp_path_factory.mktemp("rules")
    (directory / "rules.yaml").write_text(yaml.safe_dump(monitoring.rule_groups()))
    shutil.copy(monitoring.RULES_TEST, directory / "rules-test.yaml")
    return directory


def _run(argv: list[str], cwd: Path) -> None:
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_check_rules(rules_dir: Path) -> None:
    _run([_promtool(), "check", "rules", "rules.yaml"], rules_dir)


def test_promtool_test_rules(rules_dir: Path) -> None:
    _run([_promtool(), "test", "rules", "rules-test.yaml"], rules_dir)


def test_every_alert_has_a_case_that_fires_and_one_that_stays_silent() -> None:
    cases = yaml.safe_load(monitoring.RULES_TEST.read_text())["tests"]
    fires: set[str] = set()
    silent: set[str] = set()
    for case in cases:
        for check in case.get("alert_rule_test", []):
            (fires if check.get("exp_alerts") else silent).add(check["alertname"])
    names = {rule["alert"] for rule in monitoring.alerts()}
    assert names - fires == set(), "alerts no test fires"
    assert names - silent == set(), "alerts no test keeps silent"
    assert (fires | silent) - names == set(), "tests of alerts that do not exist"


def _readme_anchors() -> set[str]:
    """GitHub's anchors of deploy/README.md's headings."""
    anchors = set()
    for line in README.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def test_every_alert_says_what_where_and_what_to_do() -> None:
    anchors = _readme_anchors()
    for rule in monitoring.alerts():
        name = rule["alert"]
        notes = rule["annotations"]
        assert notes.keys() >= {"summary", "description", "runbook_url"}, name
        assert "$labels.node" in notes["summary"] and "$labels.node" in notes["description"], (
            f"{name} does not name the node")
        # The screen: the output when the series has one, else the node's screens listed.
        if "output" in rule["expr"]:
            assert "$labels.output" in notes["description"], name
        page, _, anchor = notes["runbook_url"].partition("#")
        assert page == "deploy/README.md" and anchor == name.lower(), name
        assert anchor in anchors, f"deploy/README.md has no section {name}"
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name


def test_dashboard_has_a_row_per_node_and_a_panel_per_screen() -> None:
    config_map = monitoring.one("ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    board = monitoring.dashboard()
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert {"node", "output"} <= variables.keys()
    rows = [p for p in board["panels"] if p["type"] == "row"]
    assert [r.get("repeat") for r in rows] == ["node"]
    screens = [p for p in monitoring.panels(board) if p.get("repeat") == "output"]
    assert len(screens) == 1
    exprs = " ".join(t["expr"] for p in monitoring.panels(board) for t in p.get("targets", []))
    for shown in ("display_compositor_up", "display_output_connected", "display_output_info",
                  "display_compositor_restarts_total", "display_prepare_duration_seconds_bucket",
                  "display_capture_requests_total"):
        assert shown in exprs, f"the dashboard does not show {shown}"
    for panel in monitoring.panels(board):
        for target in panel.get("targets", []):
            assert '$node' in target["expr"], f"{panel['title']} ignores the node variable"
    for target in screens[0]["targets"]:
        assert '$output' in target["expr"], f"{target['refId']} ignores the output variable"


def _registries_names() -> set[str]:
    text = (OperatorMetrics().exposition() + CaptureMetrics().render()).decode()
    return monitoring.exposed_names(text)


def test_rules_and_dashboard_read_only_metrics_the_registries_declare() -> None:
    assert monitoring.unknown_names(_registries_names()) == {}


def test_a_panel_naming_a_missing_metric_is_caught() -> None:
    board = monitoring.dashboard()
    board["panels"][1]["targets"][0]["expr"] = 'display_compositor_upp{node=~"$node"}'
    missing = monitoring.unknown_names(_registries_names(), board)
    assert list(missing.values()) == [{"display_compositor_upp"}]


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (node, reason) (increase(display_prepare_errors_total{node=~"$n"}[5m])) > 0',
         {"display_prepare_errors_total"}),
        ("histogram_quantile(0.95, sum by (le) (rate(a_bucket[$__rate_interval])))",
         {"a_bucket"}),
        ("a / on (namespace, pod) group_left (node) max by (pod) (b * 0 + 1) > 1e3",
         {"a", "b"}),
        ('x offset 10m and on(output) y{label="and"} unless bool z', {"x", "y", "z"}),
    ],
    ids=["matchers-and-by", "functions-and-numbers", "joins", "keywords"],
)
def test_metric_names_of_an_expression(expr: str, names: set[str]) -> None:
    assert monitoring.metric_names(expr) == names


def test_variable_queries() -> None:
    assert monitoring.variable_metric_names("label_values(m{a=\"b\"}, node)") == {"m"}
    assert monitoring.variable_metric_names("label_values(node)") == set()
    assert monitoring.variable_metric_names("query_result(up == 1)") == {"up"}
