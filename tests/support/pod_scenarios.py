"""What the simulated node's pod tests share: waits, reads of the pod's status, the slice and
the API's denials, a capture request over HTTPS, the operator's metrics, and the scenario a
claim, a release, a hotplug, a hang and a roll walk through, run on the pod from the
binaries (tests/pod_scenario_test.py) and from the images (tests/pod_images_test.py)."""

from __future__ import annotations

import os
import signal
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from libdisplay.compositor.wayland import WaylandError, list_outputs
from libdisplay.hardware.modes import Mode
from simnode.cli import report
from simnode.cli.commands import host_pid
from simnode.cluster import control
from simnode.cluster.api import DISPLAYS
from simnode.node import card, pod_node
from tests.support.simulated_pod import NODE

CAPTURE = "https://127.0.0.1:9201"
METRICS = "http://127.0.0.1:9200"
TIMEOUT_S = 90.0


def wait_for(check: Callable[[], bool], *, what: str, timeout: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(0.1)


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


def metrics_text() -> str:
    try:
        with urllib.request.urlopen(f"{METRICS}/metrics", timeout=10) as answer:
            return str(answer.read().decode())
    except OSError:
        return ""  # the operator restarting


def compositor_restarts(reason: str) -> float:
    """The operator's count of compositor restarts for `reason` (unsupported, new-connector,
    start: the ones it orders; crash), as its
    metrics port (the manifest's 9200) serves it."""
    for line in metrics_text().splitlines():
        if line.startswith(f'display_compositor_restarts_total{{reason="{reason}"}}'):
            return float(line.split()[-1])
    return 0.0


def output_size(node: pod_node.PodNode, output: str) -> tuple[int, int] | None:
    socket = node.config.host / "var/run/display.liken.sh/wayland-0"
    try:
        outputs = list_outputs(socket, timeout=5.0)
    except (OSError, WaylandError):
        return None  # restarting
    for found in outputs:
        if found.name == output:
            return (found.mode.width, found.mode.height)
    return None


def eventually(check: Callable[[], bool], timeout: float) -> bool:
    try:
        wait_for(check, what="", timeout=timeout)
    except AssertionError:
        return False
    return True


def claim_release_hotplug_hang_roll_capture(node: pod_node.PodNode) -> None:
    assert node.pod is not None
    monitor = node.monitors[0]
    pid_file = node.pod.volumes.source("weston-config") / "weston.pid"
    pid = pid_file.read_text()
    name, uid = pod_node.claim(node, monitor.device, {"mode": "1280x720@60"})
    # The operator applies the claim's mode live: weston keeps its pid.
    assert eventually(lambda: output_size(node, monitor.output) == (1280, 720), 60), \
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
    wait_for(lambda: output_size(node, third.output) == (1280, 720),
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
