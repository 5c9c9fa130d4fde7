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
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from libdisplay.compositor.wayland import WaylandError, list_outputs
from libdisplay.hardware.modes import Mode
from simnode.cli import report
from simnode.cli.commands import host_pid
from simnode.cluster import control
from simnode.cluster.api import DISPLAYS
from simnode.kubelet import images
from simnode.kubelet.manifest import load_documents
from simnode.node import card, pod_node
from tests.support import simulated_pod

# Also what tests/pod_images_test.py and tests/tenants_test.py import from here.
NODE = simulated_pod.NODE
REPO = simulated_pod.REPO
rendered = simulated_pod.rendered
_dist = simulated_pod.dist
_node = simulated_pod.simulated_node
CAPTURE = "https://127.0.0.1:9201"
METRICS = "http://127.0.0.1:9200"
TIMEOUT_S = 90.0


def wait_for(check: Callable[[], bool], *, what: str, timeout: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def node() -> Iterator[pod_node.PodNode]:
    yield from _node(rendered())


def pod_object(node: pod_node.PodNode) -> dict[str, Any]:
    assert node.pod is not None
    found = node.control.admin.get(control.PODS, node.pod.name,
                                   namespace=node.template.namespace)
    assert found is not None
    return found


def statuses(node: pod_node.PodNode, field: str) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in pod_object(node).get("status", {}).get(field, [])}


def slice_devices(node: pod_node.PodNode) -> dict[str, Any]:
    return report.slice_devices(node.control.admin.objects, NODE)


def denials(node: pod_node.PodNode) -> list[str]:
    return [f"{d.user} {d.verb} {d.resource}/{d.subresource} {d.name} ({d.code})"
            for d in node.kube.denials()]


def capture_get(path: str, token: str) -> tuple[int, bytes]:
    context = ssl.create_default_context(cafile=None)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(CAPTURE + path,
                                     headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=60, context=context) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()
    except OSError as exc:  # not listening yet (a new pod's capture starting)
        return 0, str(exc).encode()


def _metrics_text() -> str:
    try:
        with urllib.request.urlopen(f"{METRICS}/metrics", timeout=10) as answer:
            return str(answer.read().decode())
    except OSError:
        return ""  # the operator restarting


def compositor_restarts(reason: str) -> float:
    """The operator's count of compositor restarts for `reason` (unsupported, new-connector,
    start: the ones it orders; crash), as its
    metrics port (the manifest's 9200) serves it."""
    for line in _metrics_text().splitlines():
        if line.startswith(f'display_compositor_restarts_total{{reason="{reason}"}}'):
            return float(line.split()[-1])
    return 0.0


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


def _size_of(node: pod_node.PodNode, output: str) -> tuple[int, int] | None:
    socket = node.config.host / "var/run/display.liken.sh/wayland-0"
    try:
        outputs = list_outputs(socket, timeout=5.0)
    except (OSError, WaylandError):
        return None  # restarting
    for found in outputs:
        if found.name == output:
            return (found.mode.width, found.mode.height)
    return None


def _eventually(check: Callable[[], bool], timeout: float) -> bool:
    try:
        wait_for(check, what="", timeout=timeout)
    except AssertionError:
        return False
    return True


def test_claim_release_hotplug_hang_roll_capture_with_no_403(node: pod_node.PodNode) -> None:
    assert node.pod is not None
    monitor = node.monitors[0]
    pid_file = node.pod.volumes.source("weston-config") / "weston.pid"
    pid = pid_file.read_text()
    name, uid = pod_node.claim(node, monitor.device, {"mode": "1280x720@60"})
    # The operator applies the claim's mode live: weston keeps its pid.
    assert _eventually(lambda: _size_of(node, monitor.output) == (1280, 720), 60), \
        "weston did not take the claim's mode 1280x720"
    pod_node.release(node, name, uid)
    assert pid_file.read_text() == pid

    # Hotplug: pull the third monitor; the operator re-reads sysfs on SIGHUP.
    third = node.monitors[2]
    config = node.pod.volumes.source("weston-config")
    before = ((config / "weston.ini").read_text(), (config / "weston.pid").read_text())
    card.plug(node.config.host, third, connected=False)
    operator = node.pod.runner.pid("operator")
    assert operator is not None
    os.kill(operator, signal.SIGHUP)
    wait_for(lambda: third.device not in slice_devices(node), what="the slice without it")
    # weston.ini follows the unplug, but no restart cuts the other screens' clients.
    wait_for(lambda: (config / "weston.ini").read_text() != before[0],
             what="weston.ini rewritten after the unplug")
    assert (config / "weston.pid").read_text() == before[1]
    # While it is out, a person states its mode: plugged in again, it comes up at that mode
    # (the operator derives weston.ini again after the connector change), not its preferred.
    assert third.modes[0] != Mode(1280, 720, 60000) and Mode(1280, 720, 60000) in third.modes
    node.control.person.patch(DISPLAYS, f"{NODE}.{third.device}",
                              {"spec": {"mode": "1280x720@60", "scale": 1}})
    card.plug(node.config.host, third, connected=True)
    os.kill(operator, signal.SIGHUP)
    wait_for(lambda: third.device in slice_devices(node), what="the slice with it again")
    wait_for(lambda: _size_of(node, third.output) == (1280, 720),
             what=f"{third.output} plugged in again at its Display's spec.mode 1280x720")

    # Hang: the watchdog SIGKILLs the stopped compositor; westonctl exits on the unordered
    # exit, and the kubelet counts the crash on the sidecar's status.
    pid_file = node.pod.volumes.source("weston-config") / "weston.pid"
    # The pid weston wrote is its pod namespace's: the host's under bubblewrap, not under podman.
    weston = host_pid(int(pid_file.read_text()), "weston")
    os.kill(weston, signal.SIGSTOP)
    wait_for(lambda: statuses(node, "initContainerStatuses")["weston"]["restartCount"] >= 1,
             what="initContainerStatuses[weston].restartCount 1")
    wait_for(lambda: "running" in statuses(node, "initContainerStatuses")["weston"]["state"],
             what="weston running again")
    # The operator reads that count from its own Pod (every 15 s) into its crash metric.
    wait_for(lambda: compositor_restarts("crash") >= 1,
             what="display_compositor_restarts{reason=crash} 1",
             timeout=60)

    # Roll: the old pod is gone, and its emptyDir, before the new one starts.
    old = node.pod
    old_config = old.volumes.source("weston-config")
    node.roll()
    assert node.pod is not None and node.pod.name != old.name
    assert not old_config.exists()
    assert (node.config.host / "var/lib/kubelet/plugins_registry").is_dir()
    assert node.control.admin.get(control.PODS, old.name,
                                  namespace=node.template.namespace) is None
    wait_for(lambda: set(slice_devices(node)) == {m.device for m in node.monitors},
             what="the new pod's slice")

    # A capture with a token RBAC allows; one it does not gets 403.
    output = monitor.output
    wait_for(lambda: capture_get(f"/api/v1/outputs/{output}/still.png",
                                 node.control.viewer_token)[0] == 200,
             what="a still for the viewer", timeout=60)
    status, body = capture_get(f"/api/v1/outputs/{output}/still.png",
                               node.control.capture_token("default", "mallory"))
    # mallory may capture no screen of the node: 403 (a caller allowed some gets 404 for the
    # others, as for outputs that do not exist, so no refusal tells which screens exist).
    assert status == 403 and not body.startswith(b"\x89PNG"), (status, body)
    assert denials(node) == []


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
    node.control.person.patch(DISPLAYS, display, {"spec": spec})
    assert _size_of(node, monitor.output) != (1024, 768)
    node.roll()
    wait_for(lambda: _size_of(node, monitor.output) == (1024, 768),
             what=f"{monitor.output} started at the Display's spec.mode", timeout=120)
    # declare wrote it (a new pod sets each mode once): the new operator ordered no restart.
    wait_for(lambda: "display_compositor_restarts_total" in _metrics_text(),
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
    config = pod_node.NodeConfig(state=state, repo=REPO, dist=_dist(), manifests=manifests,
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
