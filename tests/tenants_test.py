"""One tenant's change never cuts another: the simulated node's pod (as its manifest states
it) with two tenants of its own, real Wayland clients on two claims' sockets (X1 red, X2
green), while the third output (X3) is re-moded, released, turned, scaled, edited by a person
and re-plugged.

After each change both tenants keep their original connection (a `wl_display.sync` on it is
answered: a restarted compositor would have closed it) and their pixels (a still of each
tenant's output through the capture socket), the compositor keeps its pid, and the changed
output reports the new mode, transform or scale. The tests run in module order on one node.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from libdisplay.compositor.layout import LayoutControl, LayoutError, OutputState
from libdisplay.hardware.modes import Mode
from simnode.cluster import control
from simnode.cluster.api import DISPLAYS
from simnode.node import card, pod_node
from tests.pod_scenario_test import NODE, _node, denials, rendered, slice_devices, wait_for
from tests.support.tenant import Tenant, wait_still

RED, GREEN = (255, 0, 0), (0, 255, 0)
APPLY_S = 30.0
SPEC_APPLY_S = 2.0


@dataclass
class Tenants:
    node: pod_node.PodNode
    left: Tenant
    right: Tenant
    pid: str

    @property
    def config_dir(self) -> Path:
        assert self.node.pod is not None
        return self.node.pod.volumes.source("weston-config")

    def kept(self) -> None:
        """Both tenants on their first connection, their outputs their colour, same weston."""
        assert (self.config_dir / "weston.pid").read_text() == self.pid, \
            "the compositor restarted"
        for tenant in (self.left, self.right):
            assert tenant.roundtrip(), f"the tenant on {tenant.output} lost its connection"
            wait_still(self.config_dir / "capture.sock", tenant.output, tenant.colour)

    def output(self, name: str) -> OutputState | None:
        try:
            with LayoutControl(self.config_dir / "layout.sock") as control:
                return next((o for o in control.outputs() if o.name == name), None)
        except LayoutError:
            return None  # the compositor restarting (a failure the pid check names)


def _claim_socket(node: pod_node.PodNode, uid: str) -> Path:
    found = list((node.config.host / "var/run/display.liken.sh/claims" / uid).glob("wayland-*"))
    assert len(found) == 1, found
    return found[0]


@pytest.fixture(scope="module")
def tenants() -> Iterator[Tenants]:
    for node in _node(rendered()):
        assert node.pod is not None
        devices = {m.device for m in node.monitors}
        wait_for(lambda: set(slice_devices(node)) == devices,  # noqa: B023 (used at once)
                 what="the slice of every monitor")
        first, second = node.monitors[0], node.monitors[1]
        left_claim = pod_node.claim(node, first.device, {})
        right_claim = pod_node.claim(node, second.device, {})
        left = Tenant(_claim_socket(node, left_claim[1]), colour=RED, output=first.output)
        right = Tenant(_claim_socket(node, right_claim[1]), colour=GREEN, output=second.output)
        try:
            pid = (node.pod.volumes.source("weston-config") / "weston.pid").read_text()
            found = Tenants(node, left, right, pid)
            found.kept()
            yield found
        finally:
            left.stop()
            right.stop()


def _third(tenants: Tenants) -> card.Monitor:
    return tenants.node.monitors[2]


def _until_output(tenants: Tenants, what: str, check: object, timeout: float = APPLY_S) -> None:
    name = _third(tenants).output
    wait_for(lambda: (state := tenants.output(name)) is not None and check(state),  # type: ignore[operator]
             what=f"{name} {what}", timeout=timeout)


def _until_spec(tenants: Tenants, display: str, reason: str, words: str) -> None:
    """The Display's SpecApplied condition, for its current generation, is `reason` and its
    message holds `words`."""

    def says() -> bool:
        found = tenants.node.control.person.get(DISPLAYS, display) or {}
        status = found.get("status") or {}
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        applied = conditions.get("SpecApplied") or {}
        return (status.get("observedGeneration") == found["metadata"]["generation"]
                and applied.get("reason") == reason and words in applied.get("message", ""))

    wait_for(says, what=f"Display {display} SpecApplied {reason} ({words})", timeout=APPLY_S)


def test_a_claims_mode_and_its_release_cut_no_other_tenant(tenants: Tenants) -> None:
    third = _third(tenants)
    preferred = third.modes[0]
    name, uid = pod_node.claim(tenants.node, third.device, {"mode": "1280x720@60"})
    _until_output(tenants, "at 1280x720", lambda s: (s.width, s.height) == (1280, 720))
    tenants.kept()
    _until_spec(tenants, f"{NODE}.{third.device}", "HeldByClaim", f"/{name} holds the output")
    # The claim says what it got.
    found = tenants.node.control.admin.get(control.CLAIMS, name,
                                           namespace=pod_node.CONSUMER_NAMESPACE) or {}
    (entry,) = found["status"]["devices"]
    assert (entry["device"], entry["data"]["output"], entry["data"]["mode"]) == (
        third.device, third.output, "1280x720@60")
    assert [c["type"] for c in entry["conditions"] if c["status"] == "True"] == ["Ready"]
    pod_node.release(tenants.node, name, uid)
    _until_output(tenants, f"back at {preferred}",
                  lambda s: (s.width, s.height) == (preferred.width, preferred.height))
    tenants.kept()


def test_a_claim_turned_90_cuts_no_other_tenant(tenants: Tenants) -> None:
    third = _third(tenants)
    name, uid = pod_node.claim(tenants.node, third.device, {"transform": "rotate-90"})
    _until_output(tenants, "turned 90", lambda s: s.transform == "rotate-90"
                  and (s.logical_width, s.logical_height) == (s.height, s.width))
    tenants.kept()
    pod_node.release(tenants.node, name, uid)
    _until_output(tenants, "turned back", lambda s: s.transform == "normal")
    tenants.kept()


def test_a_claim_at_scale_2_cuts_no_other_tenant(tenants: Tenants) -> None:
    third = _third(tenants)
    name, uid = pod_node.claim(tenants.node, third.device, {"scale": 2})
    _until_output(tenants, "at scale 2", lambda s: s.scale == 2)
    tenants.kept()
    pod_node.release(tenants.node, name, uid)
    _until_output(tenants, "at scale 1", lambda s: s.scale == 1)
    tenants.kept()


def test_a_persons_spec_edit_on_the_unclaimed_output_applies_at_once(tenants: Tenants) -> None:
    third = _third(tenants)
    assert Mode(1280, 720, 60000) in third.modes and third.modes[0] != Mode(1280, 720, 60000)
    display = f"{NODE}.{third.device}"
    began = time.monotonic()
    tenants.node.control.person.patch(DISPLAYS, display, {"spec": {"mode": "1280x720@60"}})
    _until_output(tenants, "at the spec's 1280x720",
                  lambda s: (s.width, s.height) == (1280, 720), timeout=SPEC_APPLY_S * 5)
    took = time.monotonic() - began
    print(f"spec.mode edit applied {took:.2f} s after the patch")
    assert took <= SPEC_APPLY_S, f"applied {took:.2f} s after the edit, not within 2 s"
    tenants.kept()
    _until_spec(tenants, display, "Applied", "runs at 1280x720@60")
    # A mode the monitor does not offer: nothing changes, and the Display says why.
    tenants.node.control.person.patch(DISPLAYS, display, {"spec": {"mode": "800x600@60"}})
    _until_spec(tenants, display, "ModeNotOffered", "offered: 1600x900@60, 1280x720@60")
    tenants.kept()
    tenants.node.control.person.patch(DISPLAYS, display, {"spec": {"mode": None}})
    _until_output(tenants, "back at its preferred mode",
                  lambda s: (s.width, s.height) == (third.modes[0].width,
                                                    third.modes[0].height))
    tenants.kept()


def test_a_replug_cuts_no_other_tenant(tenants: Tenants) -> None:
    node = tenants.node
    assert node.pod is not None
    third = _third(tenants)
    operator = node.pod.runner.pid("operator")
    assert operator is not None
    card.plug(node.config.host, third, connected=False)
    os.kill(operator, signal.SIGHUP)
    wait_for(lambda: third.device not in slice_devices(node), what="the slice without it")
    tenants.kept()
    card.plug(node.config.host, third, connected=True)
    os.kill(operator, signal.SIGHUP)
    wait_for(lambda: third.device in slice_devices(node), what="the slice with it again")
    _until_output(tenants, "driven again at its preferred mode",
                  lambda s: (s.width, s.height) == (third.modes[0].width,
                                                    third.modes[0].height))
    tenants.kept()
    assert denials(node) == []
