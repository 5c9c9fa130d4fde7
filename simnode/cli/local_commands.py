"""The subcommands on `up --cluster local`'s node, done as a person does them on a real cluster.

- `claim` creates a ResourceClaim (a request of the class display.liken.sh whose CEL selector
  names the monitor's connector, with DisplayConfig parameters) and a consumer Pod that runs the
  demo client from the project's weston image (the one the node's DaemonSet already runs). The
  real scheduler allocates the claim, the kubelet calls the operator's NodePrepareResources and
  containerd applies the operator's CDI edits: nothing is written on the cluster's behalf.
- `release` deletes the Pod and then the claim; the kubelet unprepares it.
- `hotplug` changes the simulated card's sysfs and SIGHUPs the operator's process, as the
  embedded node does (no uevent reaches netlink from a simulated card).
- `hang` SIGSTOPs the weston of the operator's pod; `shoot` asks capture's socket in the pod's
  weston-config volume; `display` edits a Display as the admin; `status` reads the real API and
  the pod's sockets.
- `roll` is `kubectl rollout restart`: the real DaemonSet controller replaces the pod.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, TextIO

from libdisplay import procfs
from libdisplay.pod import DRIVER
from simnode.cli import report
from simnode.cli.commands import (
    compositor_facts,
    compositor_lines,
    host_pid,
    metric_facts,
    metric_lines,
    shoot_through,
)
from simnode.cli.state import Layout, State, load
from simnode.cluster import control
from simnode.cluster.api import (
    DISPLAYS,
    RESOURCE_CLAIMS,
    Access,
    Api,
    ClusterError,
    JsonObject,
    Resource,
)
from simnode.node import card

PODS: Final = Resource("v1", "pods")
DAEMONSETS: Final = Resource("apps/v1", "daemonsets")
NAMESPACE: Final = "default"
OPERATOR_NAMESPACE: Final = "display-operator"
DAEMONSET: Final = "display-operator"
OPERATOR_LABEL: Final = "app=display-operator"
# The base's hostPath of the operator's sockets and its emptyDir of weston's settings.
SOCKETS: Final = Path("/var/run/display.liken.sh")
WESTON_CONFIG_VOLUME: Final = "weston-config"
KUBELET_PODS: Final = Path("/var/lib/kubelet/pods")
METRICS_PORT: Final = 9200
DEMO_CLIENT: Final = "/usr/bin/weston-simple-shm"
# A consumer's first start pays the scheduler, the kubelet's prepare and a container start on
# a loaded 2-core machine; a roll pays the pod's four containers.
CONSUMER_TIMEOUT_S: Final = 180.0
ROLL_TIMEOUT_S: Final = 300.0
POLL_S: Final = 0.5


class LocalCommandError(Exception):
    """A subcommand on the local cluster that could not do what was asked; says why."""


def api(state: State) -> Api:
    assert state.kubeconfig is not None
    return Api(Access.from_kubeconfig(Path(state.kubeconfig)))


def _wait(ready: Callable[[], bool], *, timeout: float, what: str,
          why: Callable[[], str] = lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() >= deadline:
            detail = why()
            raise LocalCommandError(f"not within {timeout:g} s: {what}"
                                    + (f" ({detail})" if detail else ""))
        time.sleep(POLL_S)


# --- the operator's pod ------------------------------------------------------------------

def operator_pod(cluster: Api) -> JsonObject:
    pods = [p for p in cluster.items(PODS) if p["metadata"]["namespace"] == OPERATOR_NAMESPACE
            and p["metadata"].get("labels", {}).get("app") == "display-operator"
            and "deletionTimestamp" not in p["metadata"]]
    if not pods:
        raise LocalCommandError(f"no operator pod in namespace {OPERATOR_NAMESPACE}")
    return pods[0]


def weston_config_dir(pod: JsonObject) -> Path:
    """The pod's weston-config emptyDir on this host: weston.ini, weston.pid, capture.sock."""
    return (KUBELET_PODS / str(pod["metadata"]["uid"]) / "volumes" / "kubernetes.io~empty-dir"
            / WESTON_CONFIG_VOLUME)


def _running_containers(pod: JsonObject) -> dict[str, bool]:
    return {s["name"]: "running" in s["state"] for s in
            pod.get("status", {}).get("initContainerStatuses", [])
            + pod.get("status", {}).get("containerStatuses", [])}


def operator_running(pod: JsonObject) -> bool:
    """The pod Running with weston, operator and capture up (declare has finished)."""
    running = _running_containers(pod)
    return (pod.get("status", {}).get("phase") == "Running"
            and all(running.get(c) for c in ("weston", "operator", "capture")))


def _operator_process(pod: JsonObject) -> int:
    """The host pid of the operator container's process: the one whose cgroup names its
    container id (the container's own pid namespace numbers it otherwise)."""
    [container] = [s for s in pod["status"]["containerStatuses"] if s["name"] == "operator"]
    cid = container.get("containerID", "").split("://", 1)[-1]
    if not cid:
        raise LocalCommandError("the operator container has not started")
    for pid in procfs.named("pex"):
        try:
            if cid in Path(f"/proc/{pid}/cgroup").read_text():
                return pid
        except OSError:
            continue
    raise LocalCommandError(f"no process of the operator container {cid[:12]} on this host")


# --- claim and release -------------------------------------------------------------------

def _claim_object(name: str, monitor: card.Monitor, parameters: Mapping[str, object]
                  ) -> JsonObject:
    selector = f'device.attributes["{DRIVER}"].connector == "{monitor.connector}"'
    devices: JsonObject = {"requests": [{"name": "screen", "exactly": {
        "deviceClassName": DRIVER, "selectors": [{"cel": {"expression": selector}}]}}]}
    if parameters:
        devices["config"] = [{"requests": ["screen"], "opaque": {
            "driver": DRIVER, "parameters": {**control.CONFIG_KIND, **parameters}}}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NAMESPACE,
                         "labels": {"app.kubernetes.io/managed-by": "simnode"}},
            "spec": {"devices": devices}}


def weston_image(cluster: Api) -> str:
    """The weston image of the node's DaemonSet: one the node already holds."""
    ds = cluster.get(DAEMONSETS, DAEMONSET, namespace=OPERATOR_NAMESPACE)
    if ds is None:
        raise LocalCommandError(f"no DaemonSet {OPERATOR_NAMESPACE}/{DAEMONSET}")
    spec = ds["spec"]["template"]["spec"]
    for container in spec.get("initContainers", []) + spec["containers"]:
        if container["name"] == "weston":
            return str(container["image"])
    raise LocalCommandError("the operator's DaemonSet has no weston container")


def _consumer_pod(name: str, image: str) -> JsonObject:
    """The demo client in a container that holds nothing but its claim. It is never restarted:
    a client cut from the compositor shows as a terminated container, not a new one."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE,
                         "labels": {"app.kubernetes.io/managed-by": "simnode"}},
            "spec": {"restartPolicy": "Never",
                     "resourceClaims": [{"name": "screen", "resourceClaimName": name}],
                     "containers": [{
                         "name": "client", "image": image, "imagePullPolicy": "Never",
                         "command": [DEMO_CLIENT],
                         "securityContext": {"allowPrivilegeEscalation": False,
                                             "capabilities": {"drop": ["ALL"]}},
                         "resources": {"limits": {"memory": "64Mi"},
                                       "claims": [{"name": "screen"}]}}]}}


def _pod_problem(cluster: Api, name: str) -> str:
    pod = cluster.get(PODS, name, namespace=NAMESPACE) or {}
    status = pod.get("status", {})
    found = [f"{c['type']}={c['status']}: {c.get('message', c.get('reason', ''))}"
             for c in status.get("conditions", []) if c["status"] != "True"]
    found += [f"{s['name']}: {json.dumps(s['state'])}" for s in status.get("containerStatuses",
                                                                           [])]
    return "; ".join(found) or f"phase {status.get('phase', 'unknown')}"


def claim(layout: Layout, device: str, *, parameters: Mapping[str, object], out: TextIO) -> str:
    state = load(layout)
    monitor = card.find(card.monitors(state.monitors), device)
    name = f"sim-{monitor.device}-{uuid.uuid4().hex[:6]}"
    cluster = api(state)
    image = weston_image(cluster)
    created = cluster.create(RESOURCE_CLAIMS, _claim_object(name, monitor, parameters),
                             namespace=NAMESPACE)
    uid = str(created["metadata"]["uid"])
    try:
        cluster.create(PODS, _consumer_pod(name, image), namespace=NAMESPACE)
        _wait(lambda: (cluster.get(PODS, name, namespace=NAMESPACE) or {}).get(
            "status", {}).get("phase") == "Running", timeout=CONSUMER_TIMEOUT_S,
            what=f"consumer pod {NAMESPACE}/{name} Running", why=lambda: _pod_problem(
                cluster, name))
    except (ClusterError, LocalCommandError):
        # A claim and pod that never ran would only be litter.
        cluster.delete(PODS, name, namespace=NAMESPACE)
        cluster.delete(RESOURCE_CLAIMS, name, namespace=NAMESPACE)
        raise
    print(f"claim {name} uid {uid}: {monitor.device} ({monitor.output}), consumer pod"
          f" {NAMESPACE}/{name} Running", file=out)
    print(uid, file=out, flush=True)
    return uid


def release(layout: Layout, name: str, *, out: TextIO) -> None:
    """Delete the consumer pod, then its claim once the kubelet has unprepared it."""
    cluster = api(load(layout))
    found = cluster.get(RESOURCE_CLAIMS, name, namespace=NAMESPACE)
    if found is None:
        raise LocalCommandError(f"no ResourceClaim {NAMESPACE}/{name}")
    claim_dir = SOCKETS / "claims" / found["metadata"]["uid"]
    cluster.delete(PODS, name, namespace=NAMESPACE)
    _wait(lambda: cluster.get(PODS, name, namespace=NAMESPACE) is None,
          timeout=CONSUMER_TIMEOUT_S, what=f"pod {NAMESPACE}/{name} gone")
    cluster.delete(RESOURCE_CLAIMS, name, namespace=NAMESPACE)
    _wait(lambda: not claim_dir.exists(), timeout=CONSUMER_TIMEOUT_S,
          what=f"claim {name} unprepared (its {claim_dir} removed by the operator)")
    print(f"released {name}: the kubelet unprepared it, pod and claim deleted", file=out,
          flush=True)


# --- the node's hardware and compositor --------------------------------------------------

def hotplug(layout: Layout, device: str, *, connected: bool, out: TextIO) -> None:
    state = load(layout)
    assert state.host_root is not None
    monitor = card.find(card.monitors(state.monitors), device)
    card.plug(Path(state.host_root), monitor, connected=connected)
    operator = _operator_process(operator_pod(api(state)))
    os.kill(operator, signal.SIGHUP)
    what = "plugged into" if connected else "pulled out of"
    print(f"monitor {monitor.name!r} {what} {monitor.sysfs_name}; the operator (host pid"
          f" {operator}) re-reads sysfs now (SIGHUP)", file=out, flush=True)


def weston_pid(pod: JsonObject) -> int:
    """weston's pid on this host, from the pid file it wrote in its own pid namespace."""
    pid_file = weston_config_dir(pod) / "weston.pid"
    try:
        return host_pid(int(pid_file.read_text()), "weston")
    except (OSError, ValueError) as exc:
        raise LocalCommandError(f"no weston pid in {pid_file}: {exc}") from exc


def hang(layout: Layout, *, out: TextIO) -> int:
    pid = weston_pid(operator_pod(api(load(layout))))
    os.kill(pid, signal.SIGSTOP)
    print(f"weston (host pid {pid}) stopped with SIGSTOP: the watchdog taints the devices and"
          " kills it; watch `kubectl get resourceslices -o yaml`", file=out, flush=True)
    return pid


def shoot(layout: Layout, output: str, path: Path, *, dist: Path, out: TextIO) -> None:
    state = load(layout)
    socket = short_path(layout, weston_config_dir(operator_pod(api(state)))) / "capture.sock"
    shoot_through(socket, output, path, monitors=state.monitors, dist=dist, out=out)


def short_path(layout: Layout, directory: Path) -> Path:
    """`directory` through a link in the state dir: a socket under the kubelet's pod dirs is
    past AF_UNIX's 108 bytes."""
    link = layout.root / "pod"
    tmp = layout.root / "pod.tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(directory)
    tmp.replace(link)
    return link


def display(layout: Layout, device: str, *, mode: str | None = None, power: str | None = None,
            out: TextIO) -> None:
    state = load(layout)
    monitor = card.find(card.monitors(state.monitors), device)
    name = f"{state.node_name}.{monitor.device}"
    spec = {k: v for k, v in (("mode", mode), ("power", power)) if v is not None}
    api(state).patch(DISPLAYS, name, {"spec": spec})
    said = " ".join(f"spec.{k}={v}" for k, v in spec.items())
    print(f"Display {name}: {said} (its SpecApplied condition and status.power say how it"
          " went: kubectl get displays)", file=out, flush=True)


# --- the pod's roll ----------------------------------------------------------------------

def roll(layout: Layout, *, out: TextIO) -> str:
    """`kubectl rollout restart` of the DaemonSet; waits for the new pod with its containers."""
    state = load(layout)
    cluster = api(state)
    before = operator_pod(cluster)["metadata"]["name"]
    assert state.bin_dir is not None
    done = subprocess.run([str(Path(state.bin_dir) / "kubectl"),
                           f"--kubeconfig={state.kubeconfig}", "rollout", "restart",
                           f"daemonset/{DAEMONSET}", "-n", OPERATOR_NAMESPACE],
                          capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise LocalCommandError(f"kubectl rollout restart: {done.stderr.strip()}")
    found: dict[str, Any] = {}

    def rolled() -> bool:
        try:
            pod = operator_pod(cluster)
        except LocalCommandError:
            return False
        found["pod"] = pod
        return pod["metadata"]["name"] != before and operator_running(pod)

    _wait(rolled, timeout=ROLL_TIMEOUT_S, what="the DaemonSet's new pod Running")
    after = str(found["pod"]["metadata"]["name"])
    print(f"rolled: {before} stopped, {after} running", file=out, flush=True)
    return after


# --- status ------------------------------------------------------------------------------

def _read(lines: Callable[[], list[str]]) -> list[str]:
    try:
        return lines()
    except (ClusterError, LocalCommandError) as exc:
        return [f"  unavailable ({exc})"]


def status(layout: Layout, out: TextIO, *, as_json: bool = False) -> None:
    state = load(layout)
    cluster = api(state)
    objects, node = cluster.objects, state.node_name

    def pod_facts() -> JsonObject:
        pod = operator_pod(cluster)
        statuses = (pod["status"].get("initContainerStatuses", [])
                    + pod["status"].get("containerStatuses", []))
        return {"name": pod["metadata"]["name"], "phase": pod["status"].get("phase"),
                "containers": [{"name": s["name"], "state": next(iter(s["state"]), "?"),
                                "restarts": s["restartCount"]} for s in statuses]}

    def consumer_facts() -> list[JsonObject]:
        return [{"name": p["metadata"]["name"], "phase": p["status"].get("phase")}
                for p in cluster.items(PODS) if p["metadata"]["namespace"] == NAMESPACE
                and p["metadata"].get("labels", {}).get("app.kubernetes.io/managed-by")
                == "simnode"]

    def metrics_url() -> str:
        return f"http://{operator_pod(cluster)['status']['podIP']}:{METRICS_PORT}/metrics"

    where = {"kubeconfig": state.kubeconfig, "kubectl": str(Path(state.bin_dir or "") / "kubectl"),
             "sockets": str(SOCKETS), "simulated host": state.host_root, "logs": str(layout.logs)}
    compositor = compositor_facts(SOCKETS / "wayland-0")
    if as_json:
        report.print_json(out, {
            "operator pod": _facts(pod_facts),
            "devices": _facts(lambda: report.device_facts(report.slice_devices(objects, node))),
            "displays": _facts(lambda: report.display_facts(objects, node)),
            "claims": _facts(lambda: report.claim_facts(objects, node)),
            "consumer pods (simnode claim)": _facts(consumer_facts),
            "compositor": compositor,
            "metrics": _facts(lambda: metric_facts(metrics_url())),
            "where everything lives": where,
        })
        return

    def pod_lines() -> list[str]:
        pod = pod_facts()
        return [f"  {pod['name']} {pod['phase']}"] + [
            f"  {c['name']}: {c['state']}, restarts {c['restarts']}" for c in pod["containers"]]

    report.print_sections(out, [
        ("operator pod", _read(pod_lines)),
        ("devices", _read(lambda: report.device_lines(report.slice_devices(objects, node)))),
        ("displays", _read(lambda: report.display_lines(objects, node))),
        ("claims", _read(lambda: report.claim_lines(objects, node))),
        ("consumer pods (simnode claim)", _read(lambda: [
            f"  {p['name']}: {p['phase']}" for p in consumer_facts()] or ["  (none)"])),
        ("compositor", compositor_lines(compositor)),
        ("metrics", _read(lambda: metric_lines(metrics_url()))),
        ("where everything lives", [f"  {k + ':':<15} {v}" for k, v in where.items()]),
    ])


def _facts(read: Callable[[], object]) -> object:
    try:
        return read()
    except (ClusterError, LocalCommandError) as exc:
        return {"unavailable": str(exc)}
