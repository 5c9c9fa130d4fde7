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

import pytest

from libdisplay.hardware.modes import Mode
from simnode.cluster.api import DISPLAYS
from simnode.node import card, pod_node
from tests.support.pod_scenarios import denials, slice_devices, wait_for
from tests.support.simulated_pod import NODE, rendered, simulated_node
from tests.support.tenant import Tenant
from tests.support.tenants import (
    GREEN,
    RED,
    SPEC_APPLY_S,
    Tenants,
    a_claims_mode_and_its_release_cut_no_other_tenant,
    claim_socket,
    third_monitor,
    until_output,
    until_spec,
)


@pytest.fixture(scope="module")
def tenants() -> Iterator[Tenants]:
    for node in simulated_node(rendered()):
        assert node.pod is not None
        devices = {m.device for m in node.monitors}
        wait_for(lambda: set(slice_devices(node)) == devices,  # noqa: B023 (used at once)
                 what="the slice of every monitor")
        first, second = node.monitors[0], node.monitors[1]
        left_claim = pod_node.claim(node, first.device, {})
        right_claim = pod_node.claim(node, second.device, {})
        left = Tenant(claim_socket(node, left_claim[1]), colour=RED, output=first.output)
        right = Tenant(claim_socket(node, right_claim[1]), colour=GREEN, output=second.output)
        try:
            pid = (node.pod.volumes.source("weston-config") / "weston.pid").read_text()
            found = Tenants(node, left, right, pid)
            found.kept()
            yield found
        finally:
            left.stop()
            right.stop()


def test_a_claims_mode_and_its_release_cut_no_other_tenant(tenants: Tenants) -> None:
    a_claims_mode_and_its_release_cut_no_other_tenant(tenants)


def test_a_claim_turned_90_cuts_no_other_tenant(tenants: Tenants) -> None:
    third = third_monitor(tenants)
    name, uid = pod_node.claim(tenants.node, third.device, {"transform": "rotate-90"})
    until_output(tenants, "turned 90", lambda s: s.transform == "rotate-90"
                  and (s.logical_width, s.logical_height) == (s.height, s.width))
    tenants.kept()
    pod_node.release(tenants.node, name, uid)
    until_output(tenants, "turned back", lambda s: s.transform == "normal")
    tenants.kept()


def test_a_claim_at_scale_2_cuts_no_other_tenant(tenants: Tenants) -> None:
    third = third_monitor(tenants)
    name, uid = pod_node.claim(tenants.node, third.device, {"scale": 2})
    until_output(tenants, "at scale 2", lambda s: s.scale == 2)
    tenants.kept()
    pod_node.release(tenants.node, name, uid)
    until_output(tenants, "at scale 1", lambda s: s.scale == 1)
    tenants.kept()


def test_a_persons_spec_edit_on_the_unclaimed_output_applies_at_once(tenants: Tenants) -> None:
    third = third_monitor(tenants)
    assert Mode(1280, 720, 60000) in third.modes and third.modes[0] != Mode(1280, 720, 60000)
    display = f"{NODE}.{third.device}"
    began = time.monotonic()
    tenants.node.control.person.patch(DISPLAYS, display, {"spec": {"mode": "1280x720@60"}})
    until_output(tenants, "at the spec's 1280x720",
                  lambda s: (s.width, s.height) == (1280, 720), timeout=SPEC_APPLY_S * 5)
    took = time.monotonic() - began
    print(f"spec.mode edit applied {took:.2f} s after the patch")
    assert took <= SPEC_APPLY_S, f"applied {took:.2f} s after the edit, not within " \
        f"{SPEC_APPLY_S:g} s"
    tenants.kept()
    until_spec(tenants, display, "Applied", "runs at 1280x720@60")
    # A mode the monitor does not offer: nothing changes, and the Display says why.
    tenants.node.control.person.patch(DISPLAYS, display, {"spec": {"mode": "800x600@60"}})
    until_spec(tenants, display, "ModeNotOffered", "offered: 1600x900@60, 1280x720@60")
    tenants.kept()
    tenants.node.control.person.patch(DISPLAYS, display, {"spec": {"mode": None}})
    until_output(tenants, "back at its preferred mode",
                  lambda s: (s.width, s.height) == (third.modes[0].width,
                                                    third.modes[0].height))
    tenants.kept()


def test_a_replug_cuts_no_other_tenant(tenants: Tenants) -> None:
    node = tenants.node
    assert node.pod is not None
    third = third_monitor(tenants)
    operator = node.pod.runner.pid("operator")
    assert operator is not None
    card.plug(node.config.host, third, connected=False)
    os.kill(operator, signal.SIGHUP)
    wait_for(lambda: third.device not in slice_devices(node), what="the slice without it")
    tenants.kept()
    card.plug(node.config.host, third, connected=True)
    os.kill(operator, signal.SIGHUP)
    wait_for(lambda: third.device in slice_devices(node), what="the slice with it again")
    until_output(tenants, "driven again at its preferred mode",
                  lambda s: (s.width, s.height) == (third.modes[0].width,
                                                    third.modes[0].height))
    tenants.kept()
    assert denials(node) == []
