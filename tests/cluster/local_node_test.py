"""The real-cluster tier: `simnode up --cluster local` as a person runs it, then read with the
real kubectl through the kubeconfig it printed. A real kube-apiserver, controller-manager,
scheduler, kube-proxy, containerd and kubelet 1.37 run the operator's pod from the base as an
owner applies it (deploy/overlays/simulated-node: the base, images never pulled).

Needs root, the components (build-support/kube/build: many minutes cold, cached after) and
the images (deploy/images/build.sh), so it runs only with DISPLAY_OPERATOR_CLUSTER=1 (the
"real cluster tier" phase of .ci/run sets it); there a missing tool fails the test.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.simnode_up import REPO, Sim, running

pytestmark = pytest.mark.skipif(os.environ.get("DISPLAY_OPERATOR_CLUSTER") != "1",
                                reason="the real-cluster tier: DISPLAY_OPERATOR_CLUSTER=1")

NODE = "sim-node-1"
CLUSTER_PROCESSES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                     "containerd", "containerd-shim-runc-v2", "kube-proxy", "kubelet")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    with running(tmp_path_factory.mktemp("local"), "--cluster", "local") as sim:
        yield sim


def _printed(sim: Sim, key: str) -> Path:
    """The path `up` printed on its `key:` line."""
    return Path(re.findall(rf"^{key}: (\S+)", sim.process.log_text(), re.M)[-1])


def _kubectl_run(sim: Sim, *args: str,
                 input: str | None = None) -> subprocess.CompletedProcess[str]:
    """The built kubectl, through the kubeconfig `up` printed."""
    return subprocess.run([str(_printed(sim, "bin") / "kubectl"),
                           f"--kubeconfig={_printed(sim, 'kubeconfig')}", *args],
                          input=input, capture_output=True, text=True, timeout=60,
                          check=False)


def _kubectl_text(sim: Sim, *args: str, input: str | None = None) -> str:
    done = _kubectl_run(sim, *args, input=input)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _kubectl(sim: Sim, *args: str) -> Any:
    return json.loads(_kubectl_text(sim, *args, "-o", "json"))


def test_the_node_is_the_real_kubelet_1_37_and_ready(node: Sim) -> None:
    found = _kubectl(node, "get", "node", NODE)
    assert found["status"]["nodeInfo"]["kubeletVersion"] == "v1.37.2"
    assert found["status"]["nodeInfo"]["containerRuntimeVersion"] == "containerd://2.4.2"
    ready = [c for c in found["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True", found["status"]["conditions"]


def test_the_operator_pod_runs_its_four_containers_in_order(node: Sim) -> None:
    pods = _kubectl(node, "get", "pods", "-n", "display-operator")["items"]
    assert len(pods) == 1
    pod = pods[0]
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"
    assert pod["spec"]["nodeName"] == NODE
    init = {s["name"]: s for s in pod["status"]["initContainerStatuses"]}
    assert init["declare"]["state"]["terminated"]["exitCode"] == 0
    assert "running" in init["weston"]["state"]
    main = {s["name"]: s for s in pod["status"]["containerStatuses"]}
    assert set(main) == {"operator", "capture"}
    assert all("running" in s["state"] for s in main.values()), main
    # declare finished before weston started: the kubelet's order, not ours.
    assert (init["declare"]["state"]["terminated"]["finishedAt"]
            <= init["weston"]["state"]["running"]["startedAt"])


def test_the_scheduler_allocated_the_operator_s_claim_from_liken_s_slice(node: Sim) -> None:
    claims = _kubectl(node, "get", "resourceclaims", "-n", "display-operator")["items"]
    assert len(claims) == 1
    results = {r["request"]: r for r in
               claims[0]["status"]["allocation"]["devices"]["results"]}
    assert {r: (v["driver"], v["device"]) for r, v in results.items()} == {
        "display": ("liken.sh", "card0"), "render": ("liken.sh", "renderd128"),
        "wires": ("liken.sh", "card0-i2c")}


def test_the_operator_publishes_its_monitors_in_a_resourceslice(node: Sim) -> None:
    def published() -> list[str]:
        slices = _kubectl(node, "get", "resourceslices")["items"]
        return sorted(d["name"] for s in slices if s["spec"]["driver"] == "display.liken.sh"
                      and s["spec"].get("nodeName") == NODE for d in s["spec"]["devices"])

    node.wait(lambda: len(published()) == 3, timeout=120,
              what="the display.liken.sh slice with three monitors")
    assert published() == ["card0-dp-1", "card0-dp-2", "card0-hdmi-a-1"]


def _slices(sim: Sim) -> dict[str, tuple[str, int]]:
    """driver -> (uid, device count) of this node's slices."""
    return {s["spec"]["driver"]: (s["metadata"]["uid"], len(s["spec"].get("devices", [])))
            for s in _kubectl(sim, "get", "resourceslices")["items"]
            if s["spec"].get("nodeName") == NODE}


def _pid_of(comm: str) -> int:
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if (proc / "comm").read_text().strip() == comm:
                    return int(proc.name)
            except OSError:
                continue
    raise AssertionError(f"no {comm} running")


def test_after_a_kubelet_restart_the_operator_publishes_its_slice_again(node: Sim) -> None:
    node.wait(lambda: _slices(node).get("display.liken.sh", ("", 0))[1] == 3, timeout=120,
              what="the operator's slice")
    before = _slices(node)["display.liken.sh"][0]
    os.kill(_pid_of("kubelet"), signal.SIGKILL)
    node.wait(lambda: "the kubelet exited; started it again" in node.process.log_text(),
              timeout=60, what="up starting the kubelet again")
    # The kubelet deletes the node's slices when it starts; the operator, registered again,
    # publishes a new one (another uid) with every monitor.
    node.wait(lambda: _slices(node).get("display.liken.sh", (before, 0))[0] != before
              and _slices(node)["display.liken.sh"][1] == 3, timeout=180,
              what="the operator's slice published again")
    # And liken's stand-in, which checks its own every few seconds.
    node.wait(lambda: "liken.sh" in _slices(node), timeout=60, what="liken's slice again")


def _crictl(sim: Sim, *args: str) -> Any:
    crictl = _printed(sim, "bin") / "crictl"
    done = subprocess.run([str(crictl), "--runtime-endpoint",
                           "unix:///run/containerd/containerd.sock", *args], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _apply_hello_screen(sim: Sim) -> None:
    """The README's smallest consumer as shipped, but for the pull policy (no registry)."""
    manifest = (REPO / "deploy" / "examples" / "hello-screen.yaml").read_text()
    image = "      image: ghcr.io/liken-sh/display-weston:latest\n"
    assert image in manifest
    manifest = manifest.replace(image, image + "      imagePullPolicy: Never\n")
    _kubectl_text(sim, "apply", "-f", "-", input=manifest)


def test_a_consumer_gets_its_monitor_through_the_real_kubelet_and_cdi(node: Sim) -> None:
    _apply_hello_screen(node)

    def running() -> bool:
        pod = _kubectl(node, "get", "pod", "hello-screen")
        return any("running" in s["state"] for s in pod["status"].get("containerStatuses", []))

    node.wait(running, timeout=180, what="hello-screen Running")
    claim = _kubectl(node, "get", "resourceclaims")["items"][0]
    uid = claim["metadata"]["uid"]
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert result["driver"] == "display.liken.sh"
    # What the operator wrote to the claim (resourceclaims/driver, judged by the real
    # authorizer) and what containerd applied from its CDI spec.
    [device] = claim["status"]["devices"]
    assert device["device"] == result["device"]
    assert device["data"]["kind"] == "AppliedOutput"
    assert [c["status"] for c in device["conditions"] if c["type"] == "Ready"] == ["True"]
    container = _crictl(node, "ps", "--name", "hello", "-q").split()[0]
    spec = json.loads(_crictl(node, "inspect", container))["info"]["runtimeSpec"]
    env = dict(e.split("=", 1) for e in spec["process"]["env"])
    claim_dir = f"/var/run/display.liken.sh/claims/{uid}"
    assert env["WAYLAND_DISPLAY"] == f"{claim_dir}/wayland-0"
    assert env["DISPLAY_OUTPUT"] == device["data"]["output"]
    assert claim_dir in {m["destination"] for m in spec["mounts"]}
    assert Path(claim_dir).is_dir()

    # Deleting the pod: the claim goes with it, and the kubelet's unprepare call makes the
    # operator remove the claim's socket directory.
    _kubectl_text(node, "delete", "pod", "hello-screen", "--wait=false")
    node.wait(lambda: not Path(claim_dir).exists(), timeout=180,
              what="the claim unprepared by the kubelet")
    node.wait(lambda: _kubectl(node, "get", "resourceclaims")["items"] == [], timeout=120,
              what="the consumer's claim deleted")


def _denials(sim: Sim) -> tuple[int, list[str]]:
    """How many requests the pod's service accounts made, and each the real authorizer
    answered 403."""
    log = _printed(sim, "audit log")
    found = []
    made = 0
    for line in log.read_text().splitlines():
        event = json.loads(line)
        user = event["user"]["username"]
        if not user.startswith("system:serviceaccount:display-operator:"):
            continue
        made += 1
        if event.get("responseStatus", {}).get("code") == 403:
            ref = event.get("objectRef", {})
            found.append(f"{user} {event['verb']} {ref.get('resource')}/"
                         f"{ref.get('subresource', '')} {ref.get('name', '')}")
    return made, found


def test_no_call_of_the_operator_declare_or_capture_was_denied(node: Sim) -> None:
    # A Display's status written since the start: the operator has been through its calls.
    node.wait(lambda: all(d.get("status", {}).get("connected") for d in
                          _kubectl(node, "get", "displays.display.liken.sh")["items"]),
              timeout=120, what="every Display's status written")
    made, denied = _denials(node)
    assert made > 0
    assert denied == []


def test_a_call_outside_the_operator_s_rbac_is_denied(node: Sim) -> None:
    done = _kubectl_run(node, "--as=system:serviceaccount:display-operator:display-operator",
                        "get", "secrets", "-n", "kube-system")
    assert done.returncode != 0 and "Forbidden" in done.stderr, done.stderr


def _running(names: tuple[str, ...]) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                comm = (proc / "comm").read_text().strip()
                state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state == "Z":  # ended, its parent not yet told
                continue
            if comm in names or comm[:15] in {n[:15] for n in names}:
                found.append(f"{comm} ({proc.name})")
    return found


def test_stopping_up_stops_every_component_and_container(node: Sim) -> None:
    assert _running(CLUSTER_PROCESSES)
    node.process.stop(grace=120.0)
    assert "simnode: stopped, no process left" in node.process.log_text()
    assert _running(CLUSTER_PROCESSES) == []
