"""report: only this node's devices, Displays and claims are shown, as a real cluster lists
every node's."""

from __future__ import annotations

from fakekube.testing import device, resource_slice
from libdisplay import display
from simnode import report
from simnode.report import JsonObject

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
    assert len(report.display_lines(_objects, NODE)) == 2, "one Display, two lines"
    assert report.claim_lines(_objects, NODE) == ["  default/mine (uid uid-mine): card0-dp-1"]


def test_another_node_has_none() -> None:
    assert report.slice_devices(_objects, "sim-2") == {}
    assert report.display_lines(_objects, "sim-2") == ["  (none)"]
    assert report.claim_lines(_objects, "sim-2") == ["  (none)"]
