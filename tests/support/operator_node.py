"""A node for the operator under test: its paths (simnode's layout, as the pod's hostPaths
would be), a simulated card with two monitors and a disconnected port, and a fake API server
holding their Displays.

`node` and `fake` are the pytest fixtures of both; a test module takes them by importing
`node_fixture` and `fake_fixture`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fakekube.server import FakeKube
from libdisplay.display import API_VERSION, display_name
from libdisplay.hardware.modes import Mode
from libdisplay.sim.edid import EdidParams, build_edid
from libdisplay.sim.sysfs import SimCard, SimConnector, write_tree
from simnode.cli.state import Layout
from tests.support.crds import display_crd

NODE = "kiosk-1"
HDMI = "card0-hdmi-a-1"
DP = "card0-dp-1"


@dataclass(frozen=True, slots=True)
class Node(Layout):
    """simnode's layout of a node's paths, and the operator's checkpoint in it."""

    def checkpoint(self) -> dict[str, Any]:
        """The claims in the plugin's checkpoint; none before it wrote one."""
        path = self.plugin_dir / "checkpoint.json"
        if not path.exists():
            return {}
        claims: dict[str, Any] = json.loads(path.read_text())["claims"]
        return claims


def sim_monitor(type_name: str, index: int, preferred: Mode,
                others: Sequence[Mode]) -> SimConnector:
    """A connected connector whose monitor's EDID offers `preferred` and `others`."""
    edid = build_edid(
        EdidParams(name=f"{type_name} {index}", serial_number=index, preferred=preferred,
                   detailed=tuple(others))
    )
    modes = tuple(f"{m.width}x{m.height}" for m in (preferred, *others))
    return SimConnector(type=type_name, index=index, edid=edid, modes=modes)


def make_node(root: Path) -> Node:
    """HDMI-A-1 (1920x1080, also 1280x720), DP-1 (1280x1024) and a disconnected DP-2."""
    node = Node(root)
    card = SimCard(
        connectors=(
            sim_monitor("HDMI-A", 1, Mode(1920, 1080, 60000), (Mode(1280, 720, 60000),)),
            sim_monitor("DP", 1, Mode(1280, 1024, 60000), ()),
            SimConnector(type="DP", index=2, status="disconnected"),
        )
    )
    write_tree(root, card)
    return node


def make_kube() -> FakeKube:
    """A started fake API server with the Display CRD; HDMI's Display has an empty spec,
    DP's asks for 1280x1024@60."""
    fake = FakeKube().start()
    fake.register_crd(display_crd())
    for device, spec in ((HDMI, {}), (DP, {"mode": "1280x1024@60"})):
        fake.create({"apiVersion": API_VERSION, "kind": "Display",
                     "metadata": {"name": display_name(NODE, device)}, "spec": spec})
    return fake


@pytest.fixture(name="node")
def node_fixture(tmp_path: Path) -> Node:
    return make_node(tmp_path)


@pytest.fixture(name="fake")
def fake_fixture() -> Iterator[FakeKube]:
    kube = make_kube()
    try:
        yield kube
    finally:
        kube.stop()
