"""The base's NetworkPolicy: the capture port 9201 is reachable only from pods labelled as
capture clients, the metrics port as before, and the capture container cannot rewrite
weston.ini. Peers are judged with NetworkPolicy's own rules (a pod selected by a policy of
type Ingress takes only what some rule allows; a rule without `from` allows every peer, one
without `ports` every port)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.manifests import Doc, container, daemonset, find, pod_spec, render

CAPTURE_PORT = 9201
METRICS_PORT = 9200
CLIENT_LABEL = {"display.liken.sh/capture-client": "true"}


def _policy(rendering: str = "base") -> Doc:
    return find(render(rendering), "NetworkPolicy", "display-operator")


def _matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """matchLabels only: the base uses no matchExpressions (asserted below)."""
    if selector is None:
        return True
    assert "matchExpressions" not in selector
    wanted: dict[str, str] = selector.get("matchLabels") or {}
    return all(labels.get(key) == value for key, value in wanted.items())


def _peer_allows(peer: Doc, labels: dict[str, str], source_ip: str | None) -> bool:
    if "ipBlock" in peer:
        return source_ip is not None and source_ip == peer["ipBlock"]["cidr"].split("/")[0]
    if "namespaceSelector" not in peer:
        return False  # a podSelector alone means the policy's own namespace; not used here
    return _matches(peer.get("podSelector"), labels)


def allowed(policy: Doc, port: int, labels: dict[str, str], source_ip: str | None = None) -> bool:
    for rule in policy["spec"].get("ingress", []):
        ports = rule.get("ports")
        if ports is not None and not any(p.get("port") == port for p in ports):
            continue
        peers = rule.get("from")
        if peers is None or any(_peer_allows(p, labels, source_ip) for p in peers):
            return True
    return False


def test_the_policy_selects_the_operators_pods_for_ingress_only() -> None:
    policy = _policy()
    labels = daemonset()["spec"]["template"]["metadata"]["labels"]
    assert _matches(policy["spec"]["podSelector"], labels)
    assert policy["spec"]["policyTypes"] == ["Ingress"]


@pytest.mark.parametrize(
    ("labels", "expected"),
    [({}, False), ({"app": "kiosk"}, False), (CLIENT_LABEL, True),
     ({**CLIENT_LABEL, "app": "viewer"}, True),
     ({"display.liken.sh/capture-client": "false"}, False)],
    ids=["unlabelled", "other-label", "client", "client-with-more-labels", "label-false"],
)
def test_capture_port_is_open_to_capture_clients_only(labels: dict[str, str],
                                                      expected: bool) -> None:
    assert allowed(_policy(), CAPTURE_PORT, labels) is expected


def test_metrics_port_stays_open_to_every_peer() -> None:
    assert allowed(_policy(), METRICS_PORT, {})


def test_every_port_the_pod_declares_has_a_rule() -> None:
    declared = {p["containerPort"] for c in pod_spec()["containers"] for p in c.get("ports", [])}
    ruled = {p["port"] for rule in _policy()["spec"]["ingress"] for p in rule.get("ports", [])}
    assert declared == ruled == {METRICS_PORT, CAPTURE_PORT}


def test_the_documented_patch_opens_the_capture_port_to_a_network() -> None:
    """The policy's comment tells an owner to add a peer to the second rule's `from`."""
    policy = _policy()
    assert policy["spec"]["ingress"][1]["ports"] == [{"protocol": "TCP", "port": CAPTURE_PORT}]
    policy["spec"]["ingress"][1]["from"].append({"ipBlock": {"cidr": "192.0.2.7/32"}})
    assert allowed(policy, CAPTURE_PORT, {}, "192.0.2.7")
    assert not allowed(policy, CAPTURE_PORT, {}, "198.51.100.1")


def test_release_ships_it_and_no_capture_drops_it() -> None:
    assert _policy("release")["metadata"]["namespace"] == "display-system"
    assert not [d for d in render("no-capture") if d["kind"] == "NetworkPolicy"]


def test_capture_mounts_the_weston_config_read_only() -> None:
    mount = next(m for m in container("capture")["volumeMounts"] if m["name"] == "weston-config")
    assert mount == {"name": "weston-config", "mountPath": "/etc/weston", "readOnly": True}
