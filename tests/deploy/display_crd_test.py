"""The Display CRD: what its schema admits and refuses, checked with jsonschema.

jsonschema stands in for the apiserver's structural-schema validation: both apply the
pattern, enum and bounds below. The apiserver also prunes unknown fields, which jsonschema
does not model.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.deploy.manifests import Doc, find, render

OBSERVED: Doc = {
    "apiVersion": "display.liken.sh/v1alpha1",
    "kind": "Display",
    "metadata": {"name": "lobby.card0-hdmi-a-1"},
    "spec": {"mode": "1920x1080@60", "transform": "normal", "scale": 1, "power": "Off"},
    "status": {
        "observedGeneration": 3,
        "nodeName": "lobby",
        "card": "card0",
        "connector": "HDMI-A-1",
        "connected": True,
        "edid": {
            "manufacturer": "DEL",
            "model": "DELL U2720Q",
            "productCode": 41377,
            "serialNumber": 808599372,
            "serialString": "7ZYF8V2",
        },
        "modes": ["3840x2160@60", "1920x1080@60", "1920x1080i@60", "1280x720@59.94"],
        "preferredMode": "3840x2160@60",
        "currentMode": "1920x1080@60",
        "currentTransform": "normal",
        "currentScale": 1,
        "ddc": {
            "supported": True,
            "capabilities": "(prot(monitor)type(LCD)model(U2720Q)vcp(10 12 60(0F 11 12) D6))",
            "vcpCodes": [16, 18, 96, 214],
            "inputs": ["dp1", "hdmi1", "hdmi2"],
            "brightness": 70,
            "contrast": 75,
            "input": "hdmi1",
            "power": "on",
        },
        "claim": {"namespace": "signage", "name": "lobby-screen", "uid": "0b6c0f0e-1"},
        "power": {"state": "Off", "appliedBy": ["KMS", "DDC/CI"], "source": "Display",
                  "kms": "Applied", "ddc": "Applied"},
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "observedGeneration": 3,
                "lastTransitionTime": "2026-11-30T06:00:00Z",
                "reason": "CompositorAnswers",
                "message": "weston drives this output",
            },
            {
                "type": "SpecApplied",
                "status": "False",
                "observedGeneration": 3,
                "lastTransitionTime": "2026-11-30T06:00:00Z",
                "reason": "ModeNotOffered",
                "message": "the monitor does not offer mode 800x600@60; offered: 3840x2160@60",
            },
        ],
    },
}


def _crd() -> Doc:
    return find(render("base"), "CustomResourceDefinition", "displays.display.liken.sh")


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = _crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _with(path: str, value: object) -> Doc:
    doc = copy.deepcopy(OBSERVED)
    *parents, last = path.split(".")
    target = doc
    for key in parents:
        target = target[key]
    target[last] = value
    return doc


def test_display_is_cluster_scoped_v1alpha1_with_a_status_subresource() -> None:
    spec = _crd()["spec"]
    (version,) = spec["versions"]
    assert (spec["scope"], version["name"], version["subresources"]) == (
        "Cluster",
        "v1alpha1",
        {"status": {}},
    )


def test_a_fully_observed_display_is_valid() -> None:
    jsonschema.validate(OBSERVED, _schema())


REFUSED = {
    "mode without height": ("spec.mode", "1920x"),
    "mode with Hz": ("spec.mode", "1920x1080@60Hz"),
    "transform in degrees": ("spec.transform", "90"),
    "scale zero": ("spec.scale", 0),
    "scale five": ("spec.scale", 5),
    "scale as string": ("spec.scale", "2"),
    "lower-case manufacturer": ("status.edid.manufacturer", "del"),
    "product code over 16 bits": ("status.edid.productCode", 70000),
    "brightness over 100": ("status.ddc.brightness", 101),
    "power unknown": ("status.ddc.power", "sleep"),
    "spec power in the claim's words": ("spec.power", "off"),
    "spec power suspend": ("spec.power", "Suspend"),
    "status power by an unknown step": ("status.power.appliedBy", ["CEC"]),
    "offered mode preferred": ("status.modes", ["preferred"]),
    "condition status yes": ("status.conditions", [{**OBSERVED["status"]["conditions"][0],
                                                    "status": "Yes"}]),
}  # fmt: skip


@pytest.mark.parametrize(("path", "value"), REFUSED.values(), ids=list(REFUSED))
def test_schema_refuses(path: str, value: object) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(_with(path, value), _schema())


def test_current_mode_may_be_empty_while_the_output_is_off() -> None:
    jsonschema.validate(_with("status.currentMode", ""), _schema())


def _schema_has(json_path: str) -> bool:
    node: dict[str, Any] | None = _schema()
    # `conditions[?(@.type=="X")]` steps into the list's items.
    steps = re.sub(r"\[\?\(@[^\]]*\)\]", ".[]", json_path).lstrip(".").split(".")
    for key in steps:
        if key == "metadata":
            return True
        if node is None:
            return False
        node = node.get("items") if key == "[]" else node.get("properties", {}).get(key)
    return node is not None


_COLUMNS = _crd()["spec"]["versions"][0]["additionalPrinterColumns"]


@pytest.mark.parametrize("column", _COLUMNS, ids=[c["name"] for c in _COLUMNS])
def test_printer_column_reads_a_field_the_schema_has(column: Doc) -> None:
    assert _schema_has(column["jsonPath"])


def test_kubectl_shows_whether_spec_took_effect_and_why(tmp_path: Path) -> None:
    """The columns as kubectl's JSONPath (the library the apiserver's table printer uses)
    reads them off a Display: `kubectl label --local` evaluates them without a server."""
    path = tmp_path / "display.json"
    path.write_text(json.dumps(OBSERVED))
    columns = [c for c in _COLUMNS if c["type"] != "date"]
    template = '{"|"}'.join("{" + c["jsonPath"] + "}" for c in columns)
    shown = subprocess.run(
        ["kubectl", "label", "--local", "-f", str(path), "probe=1", "-o", f"jsonpath={template}"],
        check=True, capture_output=True, text=True, env={**os.environ, "KUBECONFIG": "/dev/null"},
    ).stdout
    table = dict(zip((c["name"] for c in columns), shown.split("|"), strict=True))
    assert (table["Spec-Applied"], table["Reason"]) == ("False", "ModeNotOffered")
    assert (table["Mode"], table["Monitor"], table["Claim"]) == (
        "1920x1080@60", "DELL U2720Q", "lobby-screen")
    assert table["Power"] == "Off"


def test_spec_power_is_the_values_libdisplay_reads() -> None:
    """The CRD's enum and the operator's strict reading of `spec.power` are one list."""
    from libdisplay.display import POWER_STATES

    assert tuple(_schema()["properties"]["spec"]["properties"]["power"]["enum"]) == POWER_STATES
