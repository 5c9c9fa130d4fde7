"""report: only this node's devices, Displays and claims are shown, as a real cluster lists
every node's."""

from __future__ import annotations

from fakekube.testing import device, resource_slice
from libdisplay import display
from simnode.cli import report
from simnode.cli.report import JsonObject

NODE = "sim-1"


def _claim(name: str, *, pool: str, driver: str = "display.liken.sh") -> JsonObject:
    results = [{"request": "screen", "driver": driver, "pool": pool, "device": "card0-dp-1"}]
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "status": {"allocation": {"devices": {"results": results}}}}


def _display(node: str, device: str) -> JsonObject:
    """As the operator writes one: named and labelled for its node and device."""
    return {"metadata": {"name": display.display_name(node, device),
                         "labels": display.labels(node, device)},
            "status": {"connected": True, "currentMode": "1280x1024@60"}}


OBJECTS: dict[str, list[JsonObject]] = {
    "ResourceSlice": [
        resource_slice("a", node=NODE, devices=[device("card0-dp-1", connector="DP-1")]),
        resource_slice("b", node="worker-1", devices=[device("card0-hdmi-a-1")]),
        resource_slice("c", node=NODE, driver="gpu.example.com", devices=[device("gpu0")]),
    ],
    "Display": [_display(NODE, "card0-dp-1"), _display("worker-1", "card0-hdmi-a-1")],
    "ResourceClaim": [_claim("mine", pool=NODE), _claim("theirs", pool="worker-1"),
                      _claim("other-driver", pool=NODE, driver="gpu.example.com"),
                      {"metadata": {"name": "pending", "namespace": "default", "uid": "u"}}],
}


def _objects(_api_version: str, kind: str) -> list[JsonObject]:
    return OBJECTS[kind]


def test_only_this_nodes_objects_are_shown() -> None:
    assert list(report.slice_devices(_objects, NODE)) == ["card0-dp-1"]
    assert report.display_lines(_objects, NODE)[0].startswith(f"  {NODE}.card0-dp-1:")
    assert len(report.display_lines(_objects, NODE)) == 3, "one Display, three lines"
    assert report.claim_lines(_objects, NODE) == ["  default/mine (uid uid-mine): card0-dp-1"]


def test_another_node_has_none() -> None:
    assert report.slice_devices(_objects, "sim-2") == {}
    assert report.display_lines(_objects, "sim-2") == ["  (none)"]
    assert report.claim_lines(_objects, "sim-2") == ["  (none)"]


def test_a_display_shows_transform_scale_and_whether_its_spec_took_effect() -> None:
    shown = _display(NODE, "card0-dp-1")
    shown["metadata"]["generation"] = 3
    shown["status"].update(currentTransform="rotate-90", currentScale=2, observedGeneration=2,
                           conditions=[{"type": "SpecApplied", "status": "False",
                                        "reason": "ModeNotOffered",
                                        "message": "offered: 1280x1024@60"}])
    lines = report.display_lines(lambda _v, _k: [shown], NODE)
    assert "currentMode=1280x1024@60 transform=rotate-90 scale=2" in lines[0]
    assert lines[1] == ("    spec: not applied, ModeNotOffered: offered: 1280x1024@60"
                        " (of generation 2; the Display is at 3)")
    assert report.display_lines(_objects, NODE)[1] == "    spec: not acted on yet"
