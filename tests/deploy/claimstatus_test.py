"""The driver writes what a claim got into its ResourceClaim's status.devices, as the rendered
base's ServiceAccount, through the fake's RBAC: allowed, nothing denied, other drivers' entries
kept, and `kubectl get resourceclaim -o yaml` would show the entry. With
DISPLAY_OPERATOR_REAL_API=1, through a real kube-apiserver 1.37's (`tests.support.realapi`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from draplugin.claims import ClaimRef
from draplugin.driver import claimstatus
from draplugin.driver.claimstatus import AppliedOutput, ClaimStatusWriter, DeviceStatus
from fakekube import client as fakeclient
from fakekube import testing
from fakekube.server import FakeKube
from tests.deploy.appliedbase import applied_base
from tests.support import realapi
from tests.support.realapi import real_kube  # noqa: F401 - a fixture

NODE = "kiosk-1"
NAMESPACE = "tenant"
CLAIMS = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
OTHER: dict[str, Any] = {"driver": "gpu.example.com", "pool": NODE, "device": "gpu0",
         "conditions": [{"type": "Ready", "status": "True", "reason": "Configured",
                         "message": "", "lastTransitionTime": "2026-11-30T06:00:00Z"}]}
OTHER_NODE = "kiosk-2"
OPERATOR_NS = "display-operator"  # the ServiceAccount's name too
APPLIED = AppliedOutput(device="card0-hdmi-a-1", output="HDMI-A-1", mode="1280x720@60",
                        transform="flipped-rotate-90", scale=2)


@pytest.fixture(scope="module")
def fake(real_kube: realapi.RealKube | None) -> Iterator[Any]:  # noqa: F811
    fake = applied_base(real_kube)
    try:
        _admin(fake, "POST", "/api/v1/namespaces",
               {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        for node in (NODE, OTHER_NODE):
            _admin(fake, "POST", "/api/v1/nodes",
                   {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
            # The operator's pod on each node, whose projected token the driver writes with.
            _admin(fake, "POST", f"/api/v1/namespaces/{OPERATOR_NS}/pods", {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"display-operator-{node}", "namespace": OPERATOR_NS},
                "spec": {"nodeName": node, "serviceAccountName": OPERATOR_NS,
                         "containers": [{"name": "operator", "image": "display-operator"}]}})
        yield fake
    finally:
        fake.stop()


def _admin(fake: Any, method: str, path: str, body: object) -> dict[str, Any]:
    content = "application/merge-patch+json" if method == "PATCH" else "application/json"
    reply = testing.call(fake.url, method, path, body, token=fake.admin_token, ca=fake.ca_pem,
                         content_type=content)
    assert reply.code in (200, 201), reply.body
    result: dict[str, Any] = reply.body
    return result


def _allocated_claim(fake: Any, name: str) -> ClaimRef:
    """A claim the scheduler allocated: our device and another driver's, whose status that
    driver already wrote."""
    created = _admin(fake, "POST", CLAIMS, testing.resource_claim(name, namespace=NAMESPACE))
    results = [{"request": "screen", "driver": "display.liken.sh", "pool": NODE,
                "device": "card0-hdmi-a-1"},
               {"request": "screen", "driver": "gpu.example.com", "pool": NODE, "device": "gpu0"}]
    # The scheduler's allocation of node-local devices selects their node by name.
    on_node = {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}
    _admin(fake, "PATCH", f"{CLAIMS}/{name}/status",
           {"status": {"allocation": {"devices": {"results": results}, "nodeSelector": on_node},
                       "devices": [OTHER]}})
    return ClaimRef(NAMESPACE, name, created["metadata"]["uid"])


def _pod_token(fake: Any, node: str) -> str:
    """The token the kubelet projects into the operator's pod on `node`: bound to the pod,
    so the API server knows its node."""
    pod = _admin(fake, "GET", f"/api/v1/namespaces/{OPERATOR_NS}/pods/display-operator-{node}",
                 None)
    answer = _admin(fake, "POST",
                    f"/api/v1/namespaces/{OPERATOR_NS}/serviceaccounts/{OPERATOR_NS}/token",
                    {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                     "spec": {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
                                                 "name": pod["metadata"]["name"],
                                                 "uid": pod["metadata"]["uid"]}}})
    return str(answer["status"]["token"])


def _writer(fake: Any, *, token: str | None = None) -> ClaimStatusWriter:
    token = token or _pod_token(fake, NODE)
    client = fakeclient.sync_client(fake.url, token=token, ca=fake.ca_pem)
    return ClaimStatusWriter(client, pool=NODE)


def _devices(fake: Any, name: str) -> list[dict[str, Any]]:
    claim = _admin(fake, "GET", f"{CLAIMS}/{name}", None)
    devices: list[dict[str, Any]] = claim["status"].get("devices") or []
    return devices


def _patches(fake: Any, name: str) -> int:
    return len([r for r in fake.request_log()
                if r.method == "PATCH" and r.path == f"{CLAIMS}/{name}/status"])


def test_the_service_account_writes_what_the_claim_got(fake: Any) -> None:
    claim = _allocated_claim(fake, "screen")
    writer = _writer(fake)
    denied_before = len(fake.denials())

    assert writer.report(claim, [DeviceStatus.ready_with(APPLIED)]) == "updated"
    other, ours = _devices(fake, "screen")
    assert other == OTHER
    assert {k: ours[k] for k in ("driver", "pool", "device")} == {
        "driver": "display.liken.sh", "pool": NODE, "device": "card0-hdmi-a-1"}
    assert ours["data"] == {"apiVersion": "display.liken.sh/v1alpha1", "kind": "AppliedOutput",
                            "output": "HDMI-A-1", "mode": "1280x720@60",
                            "transform": "flipped-rotate-90", "scale": 2}
    (ready,) = ours["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "OutputApplied")
    assert "1280x720@60" in ready["message"]

    # The same again costs one read and no write.
    writes = _patches(fake, "screen")
    assert writer.report(claim, [DeviceStatus.ready_with(APPLIED)]) == "unchanged"
    assert _patches(fake, "screen") == writes

    assert writer.withdraw(claim) == "updated"
    assert _devices(fake, "screen") == [OTHER]
    assert len(fake.denials()) == denied_before


@pytest.mark.parametrize("token", ["unbound", "other-node"])
def test_only_a_token_of_the_claims_node_may_write_its_device_status(fake: Any,
                                                                     token: str) -> None:
    """The driver verb the base grants is associated-node:patch: a token not bound to the
    claim's node (a bare ServiceAccount token, or the operator's on another node) needs
    arbitrary-node:patch, and the API server refuses the write as invalid."""
    claim = _allocated_claim(fake, f"guarded-{token}")
    bearer = (fake.service_account_token(OPERATOR_NS, OPERATOR_NS) if token == "unbound"
              else _pod_token(fake, OTHER_NODE))
    with pytest.raises(claimstatus.ClaimStatusWriteError) as raised:
        _writer(fake, token=bearer).report(claim, [DeviceStatus.ready_with(APPLIED)])
    assert raised.value.code == 422 and not raised.value.retryable
    assert ('status.devices: Forbidden: changing status.devices requires '
            'resource="resourceclaims/driver", verb="[arbitrary-node:patch]" permission: '
            'resourceclaims.resource.k8s.io "display.liken.sh" is forbidden: User '
            '"system:serviceaccount:display-operator:display-operator" cannot '
            'arbitrary-node:patch resource "resourceclaims/driver" in API group '
            f'"resource.k8s.io" in the namespace "{NAMESPACE}"') in str(raised.value)
    assert _devices(fake, f"guarded-{token}") == [OTHER]


def test_a_write_from_a_stale_read_reads_again_and_keeps_the_other_writer(
    fake: FakeKube,
) -> None:
    claim = _allocated_claim(fake, "raced")
    stale = _admin(fake, "GET", f"{CLAIMS}/raced", None)
    changed = {**OTHER, "device": "gpu0", "conditions": [{**OTHER["conditions"][0],
                                                         "message": "re-configured"}]}
    _admin(fake, "PATCH", f"{CLAIMS}/raced/status", {"status": {"devices": [changed]}})

    assert _writer(fake).report(claim, [DeviceStatus.ready_with(APPLIED)],
                                stored=stale) == "updated"
    other, ours = _devices(fake, "raced")
    assert other == changed and ours["device"] == "card0-hdmi-a-1"
    assert [r.status for r in fake.request_log()
            if r.method == "PATCH" and r.path == f"{CLAIMS}/raced/status"][-2:] == [409, 200]


def test_a_device_the_claim_was_not_allocated_here_is_refused_before_any_write(
    fake: FakeKube,
) -> None:
    claim = _allocated_claim(fake, "elsewhere")
    writes = _patches(fake, "elsewhere")
    with pytest.raises(claimstatus.ClaimStatusError) as raised:
        _writer(fake).report(claim, [DeviceStatus.ready_with(
            AppliedOutput(device="card0-dp-1", output="DP-1", mode="1920x1080@60"))])
    assert raised.value.field == "device"
    assert _patches(fake, "elsewhere") == writes
    assert _devices(fake, "elsewhere") == [OTHER]


def test_a_claim_gone_or_recreated_is_left_alone(fake: Any) -> None:
    claim = _allocated_claim(fake, "again")
    _admin(fake, "DELETE", f"{CLAIMS}/again", None)
    recreated = _allocated_claim(fake, "again")
    writer = _writer(fake)
    assert writer.report(claim, [DeviceStatus.ready_with(APPLIED)]) == "missing"
    assert _devices(fake, "again") == [OTHER]
    assert writer.report(ClaimRef(NAMESPACE, "never", "u"),
                         [DeviceStatus.ready_with(APPLIED)]) == "missing"
    assert writer.report(recreated, [DeviceStatus.not_ready(
        "card0-hdmi-a-1", "ModeNotOffered", "offered: 1920x1080@60")]) == "updated"
    assert _devices(fake, "again")[1]["conditions"][0]["status"] == "False"
