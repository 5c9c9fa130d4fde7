"""End to end: `simnode up` as a process, driven by its own subcommands, the way a user would.

One node for the module (starting it builds the layout module and starts Xvfb, weston and the
operator). The tests run in file order: status, DDC/CI found on every simulated monitor, a
claim with a brightness read back from the monitor, a claim with a mode on the real compositor
and its release, a monitor pulled and plugged back, a hung compositor, and last SIGTERM, after
which no process of the node may be left. The node's fake apiserver runs inside `up`; the tests
read it over HTTP at the URL in the state file.

Then `up --kubeconfig` runs the pod in a "real" cluster: a FakeKube with TLS and RBAC in this
test process, the base (but its DaemonSet) applied by its owner, reached through a kubeconfig
with a token and a non-current context. All four containers run; the Node is created labelled
and tainted; the slice and Displays appear there, written as the manifest's ServiceAccount
(with a token the user requested), with no request denied; `status` and `claim` work through
the kubeconfig; stopping `up` deletes the Node, the slice and the Pod. A cluster without one of
the base's bindings fails `up` before anything starts, naming it.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fakekube.server import FakeKube
from libdisplay import display
from libdisplay.hardware import mccs
from libdisplay.hardware.ddc import DdcClient
from libdisplay.hardware.ddc_socket import SocketBusError, SocketI2c
from libdisplay.processes import start
from simnode.cli.report import JsonObject, slice_devices
from simnode.cli.state import NODE_NAME, Layout, alive
from simnode.kubelet.node_object import SIMULATED_LABEL
from simnode.kubelet.testing import render_base, stand_in_cluster, user_kubeconfig
from tests.support.simnode_up import COMMAND_TIMEOUT_S, Sim, running, sim_env, up_argv

HOTPLUG_TIMEOUT_S = 60.0
HANG_TIMEOUT_S = 90.0
# The operator probes each monitor's DDC/CI after it first publishes (about 2 s a monitor).
DDC_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    with running(tmp_path_factory.mktemp("simnode")) as node:
        yield node


DEVICES = ("card0-dp-1", "card0-dp-2", "card0-hdmi-a-1")


def test_up_prints_the_devices_and_status_lists_them(sim: Sim) -> None:
    log = sim.process.log_text()
    for device in DEVICES:
        assert f"  {device}: connector=" in log
    status = sim.run("status")
    for device in DEVICES:
        assert f"  {device}: connector=" in status
        assert f"sim-node-1.{device}: connected=True" in status
    assert sim.modes() == {"X1": "1920x1080@60", "X2": "1280x1024@60", "X3": "1600x900@60"}
    assert "display_slice_publishes_total" in status
    # --json: the same facts, a key a section.
    facts = json.loads(sim.run("status", "--json"))
    assert [d["name"] for d in facts["devices"]] == sorted(DEVICES)
    assert {d["name"]: d["connected"] for d in facts["displays"]} == {
        f"sim-node-1.{device}": True for device in DEVICES}
    assert facts["compositor"]["state"] == "answering"
    assert {o["name"]: o["mode"] for o in facts["compositor"]["outputs"]} == sim.modes()
    assert any(s.startswith("display_slice_publishes_total") for s in facts["metrics"])
    assert facts["claims"] == []


def _ddc_attributes(sim: Sim) -> dict[str, object]:
    return {name: device["attributes"].get("ddc", {}).get("bool")
            for name, device in sim.devices().items()}


def test_every_monitor_answers_ddc_ci_on_its_bus(sim: Sim) -> None:
    sim.wait(lambda: _ddc_attributes(sim) == dict.fromkeys(DEVICES, True),
             timeout=DDC_TIMEOUT_S, what="the slice says ddc=true for every device")
    status = sim.run("status")
    assert status.count("    ddc: brightness=75 contrast=75 input=") == len(DEVICES)
    assert "input=HDMI-1 power=on" in status and "input=DisplayPort-1 power=on" in status


def _brightness(path: Path) -> int:
    """Read the monitor itself over its bus, as ddcutil would on a real node."""
    with SocketI2c(path) as bus:
        return DdcClient(bus).get_vcp(mccs.BRIGHTNESS).current


def test_claim_with_a_brightness_sets_the_monitor(sim: Sim) -> None:
    bus = sim.i2c("card0-HDMI-A-1")
    assert _brightness(bus) == 75
    uid = sim.run("claim", "card0-hdmi-a-1", "--brightness=40").split()[-1]
    assert _brightness(bus) == 40
    assert _brightness(sim.i2c("card0-DP-1")) == 75, "only the claimed monitor changes"
    sim.run("release", uid)


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_claim_with_a_mode_changes_the_output_and_release_restores_it(
    sim: Sim, tmp_path: Path
) -> None:
    uid = sim.run("claim", "card0-dp-1", "--mode=1024x768@60").split()[-1]
    assert sim.modes()["X2"] == "1024x768@60"
    assert uid in sim.run("status")
    (record,) = (json.loads(p.read_text()) for p in sim.layout.clients.glob("*.json"))
    assert record["uid"] == uid and alive(record["client_pid"])
    shot = tmp_path / "x2.png"
    sim.run("shoot", "X2", str(shot))
    assert _png_size(shot) == (1024, 768)

    sim.run("release", uid)
    assert sim.modes()["X2"] == "1280x1024@60"
    sim.wait(lambda: not alive(record["client_pid"]), timeout=30.0, what="demo client gone")
    assert list(sim.layout.clients.glob("*.json")) == []


def test_hotplug_off_drops_the_device_and_on_brings_it_back(sim: Sim) -> None:
    bus = sim.i2c("card0-DP-2")
    sim.run("hotplug", "card0-dp-2", "--off")
    with SocketI2c(bus) as pulled, pytest.raises(SocketBusError) as caught:
        pulled.read(0x50, 8)
    assert caught.value.errno == errno.ENXIO, "an unplugged monitor's EDID does not answer"
    sim.wait(lambda: set(sim.devices()) == {"card0-dp-1", "card0-hdmi-a-1"},
             timeout=HOTPLUG_TIMEOUT_S, what="slice drops card0-dp-2")
    assert "sim-node-1.card0-dp-2: connected=False" in sim.run("status")
    sim.run("hotplug", "card0-dp-2", "--on")
    # The operator probes a plugged monitor's DDC/CI; a monitor holds one request at a time,
    # so the test reads once the probe's result is in the slice, as ddcutil beside it would.
    sim.wait(lambda: _ddc_attributes(sim).get("card0-dp-2") is True,
             timeout=HOTPLUG_TIMEOUT_S, what="slice lists card0-dp-2 again, ddc=true")
    assert set(sim.devices()) == set(DEVICES)
    assert _brightness(bus) == 75, "plugged back, the monitor answers DDC/CI again"


def _tainted(sim: Sim) -> bool:
    return all(device.get("taints") for device in sim.devices().values())


def test_hang_taints_the_devices_until_the_compositor_is_back(sim: Sim) -> None:
    hung = int(sim.layout.weston_pid.read_text())
    sim.run("hang")
    sim.wait(lambda: _tainted(sim), timeout=HANG_TIMEOUT_S, what="devices tainted")
    sim.wait(lambda: not alive(hung), timeout=HANG_TIMEOUT_S, what="watchdog killed weston")
    sim.wait(lambda: not any(d.get("taints") for d in sim.devices().values()),
             timeout=HANG_TIMEOUT_S, what="taint cleared after the restart")
    # The kubelet's count of the weston sidecar's crashes (as `status` shows it).
    sim.wait(lambda: _restarts(sim, "weston") >= 1, timeout=HANG_TIMEOUT_S,
             what="the weston container restarted")
    assert int(sim.layout.weston_pid.read_text()) != hung


def _restarts(sim: Sim, container: str) -> int:
    snap = json.loads(sim.layout.pod_file.read_text())
    return int(next(c["restarts"] for c in snap["containers"] if c["name"] == container))


def _processes_naming(text: str) -> list[int]:
    """Pids of live processes whose command line holds `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdecimal() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def test_sigterm_stops_and_reaps_every_process(sim: Sim) -> None:
    pids = [*sim.state()["pids"].values(), int(sim.layout.weston_pid.read_text())]
    sim.process.send_signal(signal.SIGTERM)
    assert sim.process.wait(timeout=60.0) == 0
    assert sim.process.log_contains("simnode: stopped")
    assert [p for p in pids if alive(p)] == []
    assert _processes_naming(str(sim.layout.root)) == []
    assert not sim.layout.state_file.exists()


# --- `up --kubeconfig`: the pod in a cluster of its own ---------------------------------

REMOTE_NODE = "sim-kube-1"
REMOTE_USER = "simnode-user"
SERVICE_ACCOUNT = "system:serviceaccount:display-operator:display-operator"
CONTAINERS = ("declare", "weston", "operator", "capture")


@dataclass(frozen=True, slots=True)
class Published:
    kube: FakeKube
    sim: Sim

    def objects(self, api_version: str, kind: str) -> list[JsonObject]:
        return self.kube.objects(api_version, kind)

    def node(self) -> JsonObject | None:
        return self.kube.get("v1", "Node", REMOTE_NODE)

    def displays(self) -> set[str]:
        return {d["metadata"]["name"] for d in self.objects(display.API_VERSION, display.KIND)
                if d["metadata"]["labels"][display.NODE_LABEL] == REMOTE_NODE}

    def writers(self, path: str) -> set[str]:
        """Who wrote under `path` (POST, PUT, PATCH, DELETE), by the fake's request log."""
        return {r.user for r in self.kube.request_log()
                if r.path.startswith(path) and r.method != "GET"}

    def containers(self) -> dict[str, JsonObject]:
        snap = json.loads(self.sim.layout.pod_file.read_text())
        return {c["name"]: c for c in snap["containers"]}


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Published]:
    """A FakeKube with TLS and RBAC as the real cluster: the base (but its DaemonSet) applied
    by its owner, and a user who may do what `up --kubeconfig` does."""
    work = tmp_path_factory.mktemp("simnode-kube")
    kube = FakeKube(tls=True, authorize=True).start()
    try:
        token = stand_in_cluster(kube, render_base(), user=REMOTE_USER)
        kubeconfig = user_kubeconfig(work / "kubeconfig", server=kube.url, ca_pem=kube.ca_pem,
                                     token=token)
        with running(work, f"--kubeconfig={kubeconfig}", "--context=sim",
                      f"--node-name={REMOTE_NODE}") as node:
            yield Published(kube=kube, sim=node)
    finally:
        kube.stop()


def test_kubeconfig_up_runs_the_pod_with_the_service_accounts_identity(
        published: Published) -> None:
    node = published.node()
    assert node is not None
    assert node["metadata"]["labels"][SIMULATED_LABEL] == "true"
    taint = {"key": SIMULATED_LABEL, "value": "true", "effect": "NoSchedule"}
    assert taint in node["spec"]["taints"]
    assert any(c["type"] == "Ready" and c["status"] == "True"
               for c in node["status"]["conditions"])
    assert set(slice_devices(published.objects, REMOTE_NODE)) == set(DEVICES)
    containers = published.containers()
    assert set(containers) == set(CONTAINERS)
    assert containers["declare"]["state"]["terminated"]["reason"] == "Completed"
    assert [c for c in CONTAINERS[1:] if "running" not in containers[c]["state"]] == []
    (pod,) = published.objects("v1", "Pod")
    assert pod["spec"]["nodeName"] == REMOTE_NODE
    assert [s["name"] for s in pod["status"]["initContainerStatuses"]] == ["declare", "weston"]
    expected = {f"{REMOTE_NODE}.{device}" for device in DEVICES}
    published.sim.wait(lambda: published.displays() == expected, timeout=DDC_TIMEOUT_S,
                       what="a Display per monitor in the cluster")
    # The operator's writes carry the manifest's ServiceAccount; the user's only the Node's,
    # the Pod's and its token's.
    assert published.writers("/apis/resource.k8s.io/v1/resourceslices") == {SERVICE_ACCOUNT}
    assert published.writers("/apis/display.liken.sh/") == {SERVICE_ACCOUNT}
    assert published.writers("/api/v1/namespaces/display-operator/serviceaccounts/") == {
        REMOTE_USER}
    assert published.kube.denials() == []
    state = published.sim.state()
    assert (state["api_url"], state["context"]) == (published.kube.url, "sim")
    assert published.kube.get("v1", "Node", NODE_NAME) is None, "only the node asked for"


def test_kubeconfig_status_and_claim_reach_the_same_cluster(published: Published) -> None:
    sim = published.sim
    status = sim.run("status")
    for device in DEVICES:
        assert f"  {device}: connector=" in status
        assert f"{REMOTE_NODE}.{device}: connected=True" in status
    assert "(context sim)" in status
    uid = sim.run("claim", "card0-dp-1", "--mode=1024x768@60").split()[-1]
    sim.wait(lambda: sim.modes()["X2"] == "1024x768@60", timeout=HANG_TIMEOUT_S,
             what="weston at the claim's mode")
    (claim,) = published.objects("resource.k8s.io/v1", "ResourceClaim")
    assert claim["metadata"]["uid"] == uid
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["pool"], result["device"]) == (REMOTE_NODE, "card0-dp-1")
    sim.run("release", uid)
    sim.wait(lambda: sim.modes()["X2"] == "1280x1024@60", timeout=HANG_TIMEOUT_S,
             what="weston back at the preferred mode")
    assert published.objects("resource.k8s.io/v1", "ResourceClaim") == []
    assert published.kube.denials() == []


def test_kubeconfig_stop_deletes_the_node_its_slice_and_the_pod(published: Published) -> None:
    sim = published.sim
    pids = [*sim.state()["pids"].values(), int(sim.layout.weston_pid.read_text())]
    sim.process.send_signal(signal.SIGTERM)
    assert sim.process.wait(timeout=120.0) == 0
    assert sim.process.log_contains(f"Node {REMOTE_NODE}")
    assert published.node() is None
    assert published.objects("resource.k8s.io/v1", "ResourceSlice") == []
    assert published.objects("v1", "Pod") == []
    assert len(published.displays()) == len(DEVICES), "Displays are records of monitors: kept"
    assert [p for p in pids if alive(p)] == []
    assert _processes_naming(str(sim.layout.root)) == []
    assert not sim.layout.state_file.exists()
    assert published.kube.denials() == []


def test_kubeconfig_cluster_without_a_binding_fails_before_starting(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # Short, as the node's sockets would be under it were it to start.
    tmp_path = tmp_path_factory.mktemp("nobinding")
    with FakeKube(tls=True, authorize=True) as kube:
        token = stand_in_cluster(kube, render_base(), user=REMOTE_USER,
                                 omit=("ClusterRoleBinding display-operator",))
        kubeconfig = user_kubeconfig(tmp_path / "kubeconfig", server=kube.url,
                                     ca_pem=kube.ca_pem, token=token)
        layout = Layout(tmp_path / "node")
        process = start(up_argv(layout, f"--kubeconfig={kubeconfig}", "--context=sim"),
                        log_path=tmp_path / "up.log", env=sim_env(tmp_path))
        try:
            assert process.wait(timeout=COMMAND_TIMEOUT_S) == 1, process.log_tail()
        finally:
            process.stop(grace=30.0)
        log = process.log_text()
        assert "ClusterRoleBinding display-operator: missing" in log
        assert "simnode prerequisites | kubectl" in log
        assert kube.objects("v1", "Node") == [] and kube.objects("v1", "Pod") == []
    assert not (layout.logs / "xvfb.log").exists(), "no child was started"
    assert not layout.state_file.exists()
    assert _processes_naming(str(layout.root)) == []
