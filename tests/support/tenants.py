"""Two tenants of their own on the simulated node's pod: real Wayland clients on two claims'
sockets, what "kept" means for them (same connection, same pixels, same compositor), the
waits on the third output and its Display, and the claim-and-release scenario run on the pod
from the binaries (tests/tenants_test.py) and from the images (tests/pod_images_test.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from libdisplay.compositor.layout import LayoutControl, LayoutError, OutputState
from simnode.cluster import control
from simnode.cluster.api import DISPLAYS
from simnode.node import card, pod_node
from tests.support.pod_scenarios import wait_for
from tests.support.simulated_pod import NODE
from tests.support.tenant import Tenant, wait_still

RED = (255, 0, 0)
GREEN = (0, 255, 0)
APPLY_S = 30.0
# A spec edit is applied on its watch event, not at the 30 s re-read (hotplug_resync): a
# bound a loaded 2-core machine meets that still tells the two apart.
SPEC_APPLY_S = 15.0


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


def claim_socket(node: pod_node.PodNode, uid: str) -> Path:
    found = list((node.config.host / "var/run/display.liken.sh/claims" / uid).glob("wayland-*"))
    assert len(found) == 1, found
    return found[0]


def third_monitor(tenants: Tenants) -> card.Monitor:
    return tenants.node.monitors[2]


def until_output(tenants: Tenants, what: str, check: object, timeout: float = APPLY_S) -> None:
    name = third_monitor(tenants).output
    wait_for(lambda: (state := tenants.output(name)) is not None and check(state),  # type: ignore[operator]
             what=f"{name} {what}", timeout=timeout)


def until_spec(tenants: Tenants, display: str, reason: str, words: str) -> None:
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


def a_claims_mode_and_its_release_cut_no_other_tenant(tenants: Tenants) -> None:
    third = third_monitor(tenants)
    preferred = third.modes[0]
    name, uid = pod_node.claim(tenants.node, third.device, {"mode": "1280x720@60"})
    until_output(tenants, "at 1280x720", lambda s: (s.width, s.height) == (1280, 720))
    tenants.kept()
    until_spec(tenants, f"{NODE}.{third.device}", "HeldByClaim", f"/{name} holds the output")
    # The claim says what it got.
    found = tenants.node.control.admin.get(control.CLAIMS, name,
                                           namespace=pod_node.CONSUMER_NAMESPACE) or {}
    (entry,) = found["status"]["devices"]
    assert (entry["device"], entry["data"]["output"], entry["data"]["mode"]) == (
        third.device, third.output, "1280x720@60")
    assert [c["type"] for c in entry["conditions"] if c["status"] == "True"] == ["Ready"]
    pod_node.release(tenants.node, name, uid)
    until_output(tenants, f"back at {preferred}",
                  lambda s: (s.width, s.height) == (preferred.width, preferred.height))
    tenants.kept()
