"""The real-cluster tier: `simnode up --cluster local` as a person runs it, then read with the
real kubectl through the kubeconfig it printed. A real kube-apiserver, controller-manager,
scheduler, kube-proxy, containerd and kubelet 1.37 run the operator's pod from the base as an
owner applies it (deploy/overlays/simulated-node: the base, images never pulled). The cluster
is the one readme_walk_test ran the README on first (conftest.py); this module's last test
stops it.

Needs root, the components (build-support/kube/build: many minutes cold, cached after) and
the images (deploy/images/build.sh), so it runs only with DISPLAY_OPERATOR_CLUSTER=1 (the
"real cluster tier" phase of .ci/run sets it); there a missing tool fails the test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from libdisplay.compositor.wayland import list_outputs
from tests.cluster.cluster_node import colours, printed
from tests.support.simnode_up import REPO, Sim

pytestmark = pytest.mark.skipif(os.environ.get("DISPLAY_OPERATOR_CLUSTER") != "1",
                                reason="the real-cluster tier: DISPLAY_OPERATOR_CLUSTER=1")

NODE = "sim-node-1"
CLUSTER_PROCESSES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                     "containerd", "containerd-shim-runc-v2", "kube-proxy", "kubelet")


def _kubectl_run(sim: Sim, *args: str,
                 input: str | None = None) -> subprocess.CompletedProcess[str]:
    """The built kubectl, through the kubeconfig `up` printed."""
    return subprocess.run([str(printed(sim, "bin") / "kubectl"),
                           f"--kubeconfig={printed(sim, 'kubeconfig')}", *args],
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
    # liken's slice lists another card's i2c bus first: only the template's matchAttribute on
    # liken.sh/address keeps the allocator from taking it.
    [liken] = [s for s in _kubectl(node, "get", "resourceslices")["items"]
               if s["spec"]["driver"] == "liken.sh"]
    first = liken["spec"]["devices"][0]
    assert (first["name"], first["attributes"]["liken.sh/address"]["string"]) == (
        "card1-i2c", "0000:00:03.0")
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


def test_status_json_says_what_status_prints(node: Sim) -> None:
    text = node.run("status")
    facts = json.loads(node.run("status", "--json"))
    pod = facts["operator pod"]
    assert f"  {pod['name']} Running" in text and pod["phase"] == "Running"
    assert {c["name"]: c["state"] for c in pod["containers"]} == {
        "declare": "terminated", "weston": "running", "operator": "running",
        "capture": "running"}
    assert [d["name"] for d in facts["devices"]] == ["card0-dp-1", "card0-dp-2",
                                                     "card0-hdmi-a-1"]
    for display in facts["displays"]:
        assert f"  {display['name']}: connected={display['connected']}" in text
    assert facts["compositor"]["state"] == "answering"
    assert len(facts["compositor"]["outputs"]) == 3
    assert any(s.startswith("display_slice_publishes_total") for s in facts["metrics"])
    assert facts["where everything lives"]["kubeconfig"] == str(printed(node, "kubeconfig"))


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
    crictl = printed(sim, "bin") / "crictl"
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


SOCKETS = Path("/var/run/display.liken.sh")
# Past `simnode claim`'s and `release`'s own bounds (180 s each), so theirs says why.
CONSUMER_S = 240.0
HOLDER = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: NAME}
spec:
  devices:
    requests:
      - name: screen
        exactly:
          deviceClassName: display.liken.sh
          selectors:
            - cel: {expression: 'device.attributes["display.liken.sh"].connector == "CONNECTOR"'}
---
apiVersion: v1
kind: Pod
metadata: {name: NAME}
spec:
  terminationGracePeriodSeconds: 1
  resourceClaims: [{name: screen, resourceClaimName: NAME}]
  containers:
    - name: pause
      image: localhost/simnode/pause:3.10
      imagePullPolicy: Never
      resources: {claims: [{name: screen}]}
"""


def _holder(sim: Sim, name: str, connector: str) -> None:
    """A pod that holds a claim on the monitor at `connector` and draws nothing: it outlives
    the compositor, so the kubelet's view of the device's health can be read on it."""
    _kubectl_text(sim, "apply", "-f", "-",
                  input=HOLDER.replace("NAME", name).replace("CONNECTOR", connector))


def _outputs() -> dict[str, tuple[str, str]]:
    """weston's outputs on the node: name -> (mode, transform)."""
    return {o.name: (str(o.mode), o.transform.name.lower().replace("_", "-"))
            for o in list_outputs(SOCKETS / "wayland-0", timeout=10.0)}


def _pod_state(sim: Sim, name: str) -> tuple[str, int, str]:
    """(phase, restarts, start time) of a one-container pod."""
    pod = _kubectl(sim, "get", "pod", name)
    statuses = pod["status"].get("containerStatuses") or [{"restartCount": 0, "state": {}}]
    return (pod["status"]["phase"], statuses[0]["restartCount"],
            statuses[0]["state"].get("running", {}).get("startedAt", ""))


def test_a_claim_at_a_mode_and_rotation_draws_on_its_output_beside_another_tenant(
        node: Sim, tmp_path: Path) -> None:
    keeper = node.run("claim", "card0-hdmi-a-1", timeout=CONSUMER_S).split()[1]
    kept = _pod_state(node, keeper)
    assert kept[:2] == ("Running", 0)

    # simnode claim: a real ResourceClaim with DisplayConfig parameters and a consumer pod;
    # the scheduler allocates it, the kubelet asks the operator to prepare it.
    words = node.run("claim", "card0-dp-1", "--mode", "1024x768@60",
                     "--transform", "rotate-90", timeout=CONSUMER_S).split()
    name, uid = words[1], words[-1]
    # The operator writes what it applied once the prepare has answered.
    node.wait(lambda: "devices" in _kubectl(node, "get", "resourceclaim", name)["status"],
              timeout=60, what="the claim's status.devices written by the operator")
    claim = _kubectl(node, "get", "resourceclaim", name)
    assert claim["metadata"]["uid"] == uid
    [device] = claim["status"]["devices"]
    assert device["device"] == "card0-dp-1"
    assert {k: device["data"][k] for k in ("output", "mode", "transform")} == {
        "output": "X2", "mode": "1024x768@60", "transform": "rotate-90"}
    assert _outputs()["X2"] == ("1024x768@60", "rotate-90")
    container = _crictl(node, "ps", "--name", "client", "--label",
                        f"io.kubernetes.pod.name={name}", "-q").split()[0]
    spec = json.loads(_crictl(node, "inspect", container))["info"]["runtimeSpec"]
    env = dict(e.split("=", 1) for e in spec["process"]["env"])
    assert env["WAYLAND_DISPLAY"] == f"/var/run/display.liken.sh/claims/{uid}/wayland-0"

    # Its pixels on its output, turned: the demo client's pattern (thousands of colours) on a
    # 768x1024 picture; the unclaimed output beside it is one colour.
    shot = tmp_path / "x2.png"

    def drawn() -> bool:
        node.run("shoot", "card0-dp-1", str(shot))
        return colours(shot)[1] > 1000

    node.wait(drawn, timeout=60, what="the consumer's pattern on X2")
    assert colours(shot)[0] == (768, 1024)
    node.run("shoot", "card0-dp-2", str(tmp_path / "x3.png"))
    assert colours(tmp_path / "x3.png")[1] == 1
    # The other tenant's client never lost its compositor: a client cut from it exits, and
    # its pod is never restarted.
    assert _pod_state(node, keeper) == kept


def test_releasing_the_claim_unprepares_it_and_the_output_returns_to_its_settings(
        node: Sim) -> None:
    [name] = [c["metadata"]["name"] for c in _kubectl(node, "get", "resourceclaims")["items"]
              if c["metadata"]["name"].startswith("sim-card0-dp-1-")]
    uid = _kubectl(node, "get", "resourceclaim", name)["metadata"]["uid"]
    node.run("release", name, timeout=CONSUMER_S)
    assert not (SOCKETS / "claims" / uid).exists()
    assert _kubectl_run(node, "get", "resourceclaim", name).returncode != 0
    # The Display's derived settings: no spec.mode, so the monitor's preferred mode.
    assert _outputs()["X2"] == ("1280x1024@60", "normal")


def _health(sim: Sim, pod: str) -> str:
    status = _kubectl(sim, "get", "pod", pod)["status"]
    found = [r["health"] for c in status.get("containerStatuses", [])
             for claim in c.get("allocatedResourcesStatus", []) for r in claim["resources"]]
    return found[0] if found else ""


def _tainted(sim: Sim) -> bool:
    return any(t["key"] == "display.liken.sh/compositor-unavailable"
               for s in _kubectl(sim, "get", "resourceslices")["items"]
               if s["spec"]["driver"] == "display.liken.sh"
               for d in s["spec"].get("devices", []) for t in d.get("taints", []))


def test_a_hung_compositor_taints_its_monitors_until_the_watchdog_s_restart(node: Sim) -> None:
    _holder(node, "holder", "DP-2")
    node.wait(lambda: _health(node, "holder") == "Healthy", timeout=120,
              what="the holder Running, its device Healthy (dra-health, read by the kubelet)")
    node.run("hang")
    node.wait(lambda: _tainted(node), timeout=60, what="the devices tainted")
    # A pod that does not tolerate the taint: the real scheduler will not allocate a monitor.
    _holder(node, "waiter", "DP-1")
    try:
        _while_hung(node)
    finally:
        _kubectl_text(node, "delete", "pod,resourceclaim", "waiter", "--wait=false")


def _while_hung(node: Sim) -> None:
    """What the scheduler and the kubelet make of the hang, then of the watchdog's restart."""

    def unschedulable() -> bool:
        conditions = _kubectl(node, "get", "pod", "waiter")["status"].get("conditions", [])
        return any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
                   and "cannot allocate all claims" in c.get("message", "")
                   for c in conditions)

    # Both are looked for at each look: the hang lasts only until the watchdog's kill (7.5 s of
    # silence), so the holder's Unhealthy may come and go while the scheduler is still deciding.
    seen: set[str] = set()

    def both() -> bool:
        if unschedulable():
            seen.add("unschedulable")
        if _health(node, "holder") == "Unhealthy":
            seen.add("unhealthy")
        return seen == {"unschedulable", "unhealthy"}

    node.wait(both, timeout=60, what="the scheduler's reason on the new pod and the kubelet "
                                     "reporting the holder's device Unhealthy")
    # The watchdog kills weston, it starts again, the taint goes: the waiting pod runs and the
    # holder's device is Healthy again.
    node.wait(lambda: not _tainted(node), timeout=120, what="the taint gone")
    node.wait(lambda: _pod_state(node, "waiter")[0] == "Running", timeout=120,
              what="the waiting pod scheduled and Running")
    node.wait(lambda: _health(node, "holder") == "Healthy", timeout=120,
              what="the holder's device Healthy again")


def test_a_rollout_restart_replaces_the_pod_before_starting_the_new_one(node: Sim) -> None:
    before = _kubectl(node, "get", "pods", "-n", "display-operator")["items"]
    [old] = [p["metadata"]["name"] for p in before]
    seen: list[dict[str, list[str]]] = []  # each look: pod -> its running containers
    roll = subprocess.Popen([*node.command, "roll", f"--state-dir={node.layout.root}"],
                            env=node.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        while roll.poll() is None:
            seen.append({p["metadata"]["name"]: [
                s["name"] for s in p["status"].get("initContainerStatuses", [])
                + p["status"].get("containerStatuses", []) if "running" in s["state"]]
                for p in _kubectl(node, "get", "pods", "-n", "display-operator")["items"]})
        out, err = roll.communicate(timeout=30)
    finally:
        if roll.poll() is None:
            roll.kill()
            roll.wait()
    assert roll.returncode == 0, err
    new = out.split()[-2]
    assert new != old
    # maxSurge 0, and the card's devices held by one claim at a time: the new pod's
    # containers start only once the old pod's have all stopped.
    assert not [look for look in seen if look.get(old) and look.get(new)], seen
    assert any(look.get(old) for look in seen), seen
    node.wait(lambda: _slices(node).get("display.liken.sh", ("", 0))[1] == 3, timeout=120,
              what="the slice published by the new pod")
    # The held claim is still prepared (the new pod read its checkpoint), and a new claim is
    # prepared by the new pod.
    holder = _kubectl(node, "get", "resourceclaim", "holder")["metadata"]["uid"]
    assert (SOCKETS / "claims" / holder).is_dir()
    assert _health(node, "holder") == "Healthy"
    name = node.run("claim", "card0-dp-1", timeout=CONSUMER_S).split()[1]
    assert _pod_state(node, name)[0] == "Running"
    node.run("release", name, timeout=CONSUMER_S)


def _denials(sim: Sim) -> tuple[int, list[str]]:
    """How many requests the pod's service accounts made, and each the real authorizer
    answered 403."""
    log = printed(sim, "audit log")
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


def _running(names: tuple[str, ...], root: Path) -> list[str]:
    """The processes of `names` this node started: each component names a file under the
    state dir `root` on its command line (another test may run its own etcd and API server on
    this machine); containerd's shims and containers are this node's alone."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                comm = (proc / "comm").read_text().strip()
                state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
                argv = (proc / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if state == "Z":  # ended, its parent not yet told
                continue
            ours = str(root) in argv or comm.startswith("containerd-shim")
            if ours and (comm in names or comm[:15] in {n[:15] for n in names}):
                found.append(f"{comm} ({proc.name})")
    return found


def test_stopping_up_stops_every_component_and_container(node: Sim) -> None:
    root = node.layout.root
    assert len(_running(CLUSTER_PROCESSES, root)) >= len(CLUSTER_PROCESSES)
    node.process.stop(grace=120.0)
    assert "simnode: stopped, no process left" in node.process.log_text()
    assert _running(CLUSTER_PROCESSES, root) == []
