"""The user guide's reference pages held to what they describe, both ways, so neither can drift:
metrics.md to the metrics the two registries declare and to the monitoring overlay's alerts,
display.md to the Display CRD's schema and the conditions the operator writes, capture.md to
the capture server's routes, audience and RBAC check (its viewer example's grant tried on the
fake API server's SubjectAccessReview)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

import capture.server
import draplugin.node.displays
from capture import auth
from capture.metrics import Metrics as CaptureMetrics
from draplugin.node import metrics as operator_metrics
from fakekube import testing
from tests.deploy import monitoring
from tests.deploy.appliedbase import applied_base
from tests.deploy.manifests import DEPLOY, Doc, find, render

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide"


def _rows(page: str, heading: str | None = None) -> dict[str, list[str]]:
    """The table rows of `page` (under `## heading` only, when given) whose first cell is one
    `code` word: word -> the other cells."""
    text = (GUIDE / page).read_text()
    if heading is not None:
        start = text.index(f"\n## {heading}\n")
        end = text.find("\n## ", start + 1)
        text = text[start:end if end != -1 else None]
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        found = re.match(r"^\| `([^`]+)` \|(.*)\|$", line)
        if found:
            rows[found[1]] = [cell.strip() for cell in found[2].split("|")]
    return rows


# metrics.md


def _families(registry: Any) -> dict[str, str]:
    """Series name as PromQL reads it (a counter's with `_total`) -> type."""
    return {f.name + ("_total" if f.type == "counter" else ""): f.type
            for f in registry.collect()}


def _labels(metrics: object) -> dict[str, set[str]]:
    found = {}
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase):
            suffix = "_total" if value._type == "counter" else ""
            found[value._name + suffix] = set(value._labelnames)
    return found


@pytest.mark.parametrize(
    ("heading", "metrics"),
    [("The operator (`:9200`)", operator_metrics.Metrics()),
     ("Capture (`:9201`)", CaptureMetrics())],
    ids=["operator", "capture"],
)
def test_the_metrics_page_lists_every_metric_the_registry_declares_and_no_other(
        heading: str, metrics: Any) -> None:
    rows = _rows("metrics.md", heading)
    declared = _families(metrics.registry)
    assert set(rows) == set(declared), "metrics.md and the registry differ"
    for name, kind in declared.items():
        assert rows[name][0] == kind, name
    labels = _labels(metrics)
    # Collectors of their own (draplugin.node.metrics), whose labels only their samples show.
    labels.setdefault("display_compositor_restarts_total", {"reason"})
    labels.setdefault("display_compositor_renderer_fallbacks_total", set())
    labels.setdefault("display_compositor_renderer_info", {"requested", "running"})
    for name, cells in rows.items():
        assert set(re.findall(r"`(\w+)`", cells[1])) == labels[name], name


def test_the_metrics_page_lists_every_alert_with_its_severity() -> None:
    rows = _rows("metrics.md", "Alerts")
    alerts = {rule["alert"]: rule["labels"]["severity"] for rule in monitoring.alerts()}
    assert {name: cells[0] for name, cells in rows.items()} == alerts


# display.md


def _crd_schema() -> Doc:
    crd = find(render("base"), "CustomResourceDefinition", "displays.display.liken.sh")
    schema: Doc = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _leaves(schema: Doc, path: str) -> dict[str, Doc]:
    """Every field below `path`: an object's properties recursed, a list of objects (the
    conditions) one field."""
    if "properties" in schema:
        found = {}
        for name, sub in schema["properties"].items():
            found.update(_leaves(sub, f"{path}.{name}"))
        return found
    return {path: schema}


@pytest.mark.parametrize("part", ["spec", "status"])
def test_the_display_page_lists_every_field_of_the_crd_and_no_other(part: str) -> None:
    rows = {k: v for k, v in _rows("display.md", part).items() if k.startswith(part + ".")}
    fields = _leaves(_crd_schema()["properties"][part], part)
    assert set(rows) == set(fields), "display.md and the CRD differ"
    for name, schema in fields.items():
        kind = rows[name][0]
        expected = schema["type"]
        if expected == "array":
            expected = "list" if schema["items"]["type"] == "object" else (
                f"{schema['items']['type']} list")
        assert kind == expected, name
        for value in schema.get("enum", schema.get("items", {}).get("enum", [])):
            assert f"`{value}`" in " ".join(rows[name]), f"{name} does not name {value}"


def test_the_display_page_gives_the_spec_bounds_and_pattern_of_the_crd() -> None:
    spec = _crd_schema()["properties"]["spec"]["properties"]
    rows = _rows("display.md", "spec")
    assert rows["spec.scale"][1] == f"{spec['scale']['minimum']}-{spec['scale']['maximum']}"
    assert "`preferred`" in rows["spec.mode"][1] and "preferred" in spec["mode"]["pattern"]


def _conditions_the_operator_writes() -> set[tuple[str, str, str]]:
    source = Path(draplugin.node.displays.__file__).read_text()
    spec = {("SpecApplied", s, r) for s, r in re.findall(r'cls\("(\w+)", "(\w+)"', source)}
    connected = {("Connected", s, r) for s, r in re.findall(
        r'condition\(CONNECTED_CONDITION, "(\w+)", "(\w+)"', source)}
    return spec | connected


def test_the_display_page_lists_every_condition_the_operator_writes() -> None:
    text = (GUIDE / "display.md").read_text()
    shown = set(re.findall(r"^\| `(\w+)` \| (\w+) \| `(\w+)` \|", text, flags=re.MULTILINE))
    written = _conditions_the_operator_writes()
    assert len(written) >= 12
    assert shown == written


# capture.md


def test_the_capture_page_lists_every_route_the_server_serves() -> None:
    source = Path(capture.server.__file__).read_text()
    routes = set(re.findall(r'add_get\("([^"]+)"', source))
    assert set(_rows("capture.md", "Paths")) == routes


def test_the_capture_page_names_the_audience_and_the_subresource() -> None:
    text = (GUIDE / "capture.md").read_text()
    assert f"--audience {auth.AUDIENCE}" in text
    assert f"`{auth.VERB}` the `{auth.SUBRESOURCE}` subresource" in text


def _viewer() -> list[Doc]:
    return [d for d in yaml.safe_load_all((DEPLOY / "examples" / "capture-viewer.yaml")
                                          .read_text()) if d]


def test_the_capture_page_shows_the_viewer_examples_rules() -> None:
    (block,) = re.findall(r"```yaml\n(.*?)```", (GUIDE / "capture.md").read_text(),
                          flags=re.DOTALL)
    role = next(d for d in _viewer() if d["kind"] == "ClusterRole")
    assert yaml.safe_load(block) == {"rules": role["rules"]}


@pytest.mark.parametrize(("display", "allowed"),
                         [("lobby.card0-hdmi-a-1", True), ("lobby.card0-hdmi-a-2", True),
                          ("office.card0-hdmi-a-1", False)])
def test_the_viewer_may_capture_the_named_screens_and_no_other(display: str,
                                                               allowed: bool) -> None:
    fake = applied_base()
    try:
        for doc in _viewer():
            scoped = {**doc, "metadata": {**doc["metadata"], "namespace": "default"}}
            reply = testing.call(fake.url, "POST", testing.collection_path(fake.registry, scoped),
                                 scoped, token=fake.admin_token, ca=fake.ca_pem)
            assert reply.code == 201, reply.body
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                  "spec": {"user": "system:serviceaccount:default:screen-viewer",
                           "groups": ["system:serviceaccounts", "system:authenticated"],
                           "resourceAttributes": {"group": "display.liken.sh",
                                                  "resource": "displays",
                                                  "subresource": auth.SUBRESOURCE,
                                                  "verb": auth.VERB, "name": display}}}
        reply = testing.call(fake.url, "POST",
                             "/apis/authorization.k8s.io/v1/subjectaccessreviews", review,
                             token=fake.admin_token, ca=fake.ca_pem)
        assert reply.code == 201, reply.body
        assert reply.body["status"]["allowed"] is allowed
    finally:
        fake.stop()
