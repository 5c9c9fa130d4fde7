"""The rendered base's pod run through the pod runner on a simulated node, against the fake
API with HTTPS, tokens and RBAC: no flag the manifest does not state, and no 403.

The node's containers listen on the manifest's ports (9200, 9201) on the host's network, so
the tests of this module share one node at a time (module order), and run as root with bwrap.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import ssl
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from simnode.cluster import control
from simnode.cluster.api import DISPLAYS
from simnode.kubelet import images
from simnode.kubelet.manifest import load_documents
from simnode.node import pod_node
from tests.support.pod_scenarios import (
    capture_get,
    claim_release_hotplug_hang_roll_capture,
    compositor_restarts,
    denials,
    metrics_text,
    output_size,
    slice_devices,
    statuses,
    wait_for,
)
from tests.support.simulated_pod import NODE, REPO, dist, rendered, simulated_node


@pytest.fixture(scope="module")
def node() -> Iterator[pod_node.PodNode]:
    yield from simulated_node(rendered())


def test_each_process_carries_the_manifests_args_and_nothing_else(
        node: pod_node.PodNode) -> None:
    assert node.pod is not None
    builds = images.load(REPO / "deploy" / "images")
    for container in node.template.all_containers():
        if container.name == "declare":
            continue  # ran to completion before the others started
        pid = node.pod.runner.pid(container.name)
        assert pid is not None, container.name
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
        image = images.find(builds, container.image)
        expected = image.argv(command=container.command, args=container.args)
        # The PEX at the image's path re-executes itself from its venv in the PEX cache:
        # python -sE <venv>/pex, then exactly the manifest's args (or the image's CMD).
        interpreter, flags, venv_pex, *args = (a.decode() for a in argv)
        assert (flags, Path(venv_pex).name) == ("-sE", "pex"), (container.name, argv)
        assert args == expected[1:], container.name
        assert not any(a.startswith("--") for a in args), container.name


def test_the_pod_as_its_manifest_states_it(node: pod_node.PodNode) -> None:
    inits = statuses(node, "initContainerStatuses")
    mains = statuses(node, "containerStatuses")
    assert inits["declare"]["state"]["terminated"]["reason"] == "Completed"
    assert "running" in inits["weston"]["state"]
    assert {n: "running" in s["state"] for n, s in mains.items()} == {
        "operator": True, "capture": True}
    # Registered with the kubelet stand-in (start did the handshake), and publishing.
    wait_for(lambda: set(slice_devices(node)) == {m.device for m in node.monitors},
             what="the slice of every monitor")
    wait_for(lambda: capture_get("/healthz", "")[0] == 200, what="capture's /healthz over HTTPS")
    assert denials(node) == []


def test_claim_release_hotplug_hang_roll_capture_with_no_403(node: pod_node.PodNode) -> None:
    claim_release_hotplug_hang_roll_capture(node)


def test_the_start_mode_example_applied_by_a_person_is_the_mode_after_a_roll(
        node: pod_node.PodNode) -> None:
    """deploy/examples/display-start-mode.yaml, retargeted to this node's second monitor and
    to a mode it offers, applied as a person: the rolled pod's compositor starts at it."""
    monitor = node.monitors[1]
    example = yaml.safe_load((REPO / "deploy/examples/display-start-mode.yaml").read_text())
    assert example["kind"] == "Display"
    # A mode this monitor offers; scale 1 because weston's x11 backend, which stands in for the
    # card here, sizes its window (and so the mode it reports) by the scale.
    spec = {**example["spec"], "mode": "1024x768@60", "scale": 1}
    display = f"{NODE}.{monitor.device}"
    wait_for(lambda: node.control.person.get(DISPLAYS, display) is not None,
             what=f"the operator's Display {display}")
    # Before the edit, not after: the running operator may apply it at once, live.
    preferred = (monitor.modes[0].width, monitor.modes[0].height)
    assert preferred != (1024, 768)
    wait_for(lambda: output_size(node, monitor.output) == preferred,
             what=f"{monitor.output} at the monitor's preferred mode")
    node.control.person.patch(DISPLAYS, display, {"spec": spec})
    node.roll()
    wait_for(lambda: output_size(node, monitor.output) == (1024, 768),
             what=f"{monitor.output} started at the Display's spec.mode", timeout=120)
    # declare wrote it (a new pod sets each mode once): the new operator ordered no restart.
    wait_for(lambda: "display_compositor_restarts_total" in metrics_text(),
             what="the new operator's metrics")
    assert [compositor_restarts(r) for r in ("unsupported", "new-connector", "start")] == [0] * 3
    found = node.control.person.get(DISPLAYS, display)
    assert found is not None and found["spec"]["mode"] == "1024x768@60"
    assert denials(node) == []


def _served_certificate() -> bytes | None:
    try:
        pem = ssl.get_server_certificate(("127.0.0.1", 9201), timeout=10)
    except OSError:
        return None  # capture restarting
    return ssl.PEM_cert_to_DER_cert(pem)


def test_the_capture_secret_made_while_the_pod_runs_is_served_without_a_restart(
        node: pod_node.PodNode, tmp_path: Path) -> None:
    """The optional Secret volume: absent at start (capture serves its self-signed leaf), then
    created through the API, projected by the runner as the kubelet does, and served."""
    assert node.pod is not None
    wait_for(lambda: _served_certificate() is not None, what="capture serving TLS")
    before = _served_certificate()
    restarts = statuses(node, "containerStatuses")["capture"]["restartCount"]
    key, cert = tmp_path / "tls.key", tmp_path / "tls.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                    "/CN=capture.test", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
              "metadata": {"name": "display-capture-server"},
              "data": {name: base64.b64encode(path.read_bytes()).decode()
                       for name, path in (("tls.crt", cert), ("tls.key", key))}}
    node.control.admin.create(control.SECRETS, secret, namespace=node.template.namespace)
    wanted = ssl.PEM_cert_to_DER_cert(cert.read_text())
    assert before != wanted
    wait_for(lambda: _served_certificate() == wanted, what="capture serving the Secret's leaf")
    assert statuses(node, "containerStatuses")["capture"]["restartCount"] == restarts
    assert denials(node) == []


def test_a_verb_taken_from_the_clusterrole_is_a_reported_denial(
        node: pod_node.PodNode) -> None:
    node.stop()  # the ports are the manifest's: one node at a time
    docs = load_documents(rendered())
    for doc in docs:
        if doc["kind"] == "ClusterRole" and doc["metadata"]["name"] == "display-operator":
            for rule in doc["rules"]:
                if rule["resources"] == ["displays"]:
                    rule["verbs"].remove("watch")
    manifests = yaml.safe_dump_all(docs)
    state = Path(tempfile.mkdtemp(prefix="pod-", dir="/tmp"))
    config = pod_node.NodeConfig(state=state, repo=REPO, dist=dist(), manifests=manifests,
                                 trixie_root=Path(os.environ["TRIXIE_ROOT"]), node_name=NODE,
                                 start_timeout_s=60)
    crippled = pod_node.PodNode(config)
    account = "system:serviceaccount:display-operator:display-operator"
    try:
        # The operator exits on a 403, so its registration may never hold: only the denial
        # is asked for.
        with contextlib.suppress(pod_node.NodeError):
            crippled.start()
        found = [d for d in denials(crippled) if d.startswith(f"{account} watch displays/")]
        if not found:
            wait_for(lambda: any(d.startswith(f"{account} watch displays/")
                                 for d in denials(crippled)),
                     what="the operator's watch of Displays denied", timeout=60)
    finally:
        crippled.stop()
        shutil.rmtree(state, ignore_errors=True)
