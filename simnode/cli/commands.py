"""The subcommands that act on a running node: status, claim, release, hotplug, hang, shoot.

Each reads the state file `up` wrote and talks to the node as the cluster and the kubelet
would: the cluster `up` published it into (the embedded fake, or a real one through the same
kubeconfig and context) over HTTP, the plugin over its unix sockets, weston by its pid file.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final, TextIO

from fakekube.testing import resource_claim
from libdisplay import procfs
from libdisplay.compositor.wayland import WaylandError, list_outputs, probe
from libdisplay.pod import DRIVER
from simnode.cli import clients, report
from simnode.cli.report import JsonObject
from simnode.cli.state import Layout, State, alive, load
from simnode.cluster import control
from simnode.cluster.api import DISPLAYS, RESOURCE_CLAIMS, Access, Api, ClusterError
from simnode.kubelet.plugin import Claim, Kubelet
from simnode.node import card
from simnode.node.checkout import child_env, pex

METRICS: Final = ("display_slice_publishes_total", "display_compositor", "display_watchdog",
                  "display_prepare")
# Histogram buckets and creation times: too much for a status screen.
_METRIC_DETAIL: Final = ("display_prepare_duration_seconds_bucket",)
NAMESPACE: Final = "default"


class CommandError(Exception):
    """A subcommand that could not do what was asked; the message says why."""


def api(state: State) -> Api:
    """The cluster `up` published the node into, reached as `up` reaches it."""
    kubeconfig = Path(state.kubeconfig) if state.kubeconfig else None
    return Api(Access(server=state.api_url, kubeconfig=kubeconfig, context=state.context))


def actor(layout: Layout, state: State, name: str) -> Api:
    """The API as one actor of a pod-runner node (`scheduler`, `alice`); elsewhere as `up`."""
    path = layout.identities / f"{name}.kubeconfig"
    if state.host_root is None or not path.is_file():
        return api(state)
    return Api(Access.from_kubeconfig(path))


def _host_root(state: State) -> Path | None:
    return Path(state.host_root) if state.host_root else None


def kubelet(layout: Layout, state: State) -> Kubelet:
    return Kubelet(layout.registration_socket, driver=DRIVER, host_root=_host_root(state))


def _read(lines: Callable[[], list[str]]) -> list[str]:
    """A section read from the cluster, or why it could not be (the others are still shown)."""
    try:
        return lines()
    except ClusterError as exc:
        return [f"  unavailable ({exc})"]


def status(layout: Layout, out: TextIO, *, as_json: bool = False) -> None:
    state = load(layout)
    objects, node = api(state).objects, state.node_name
    if as_json:
        report.print_json(out, {
            **pod_facts(layout),
            "devices": facts(lambda: report.device_facts(report.slice_devices(objects, node))),
            "displays": facts(lambda: report.display_facts(objects, node)),
            "claims": facts(lambda: report.claim_facts(objects, node)),
            "demo clients": [{"claim": r.name, "device": r.device, "pid": r.client_pid,
                              "running": clients.client_running(r)}
                             for r in clients.records(layout)],
            "compositor": compositor_facts(layout.wayland_socket, pid=_weston_pid(layout)),
            "metrics": metric_facts(state.metrics_url),
            "where everything lives": report.path_facts(layout, state),
        })
        return
    report.print_sections(out, [
        *pod_sections(layout),
        ("devices", _read(lambda: report.device_lines(report.slice_devices(objects, node)))),
        ("displays", _read(lambda: report.display_lines(objects, node))),
        ("claims", _read(lambda: report.claim_lines(objects, node)) + _client_lines(layout)),
        ("compositor", compositor_lines(compositor_facts(layout.wayland_socket,
                                                         pid=_weston_pid(layout)))),
        ("metrics", metric_lines(state.metrics_url)),
        ("where everything lives", report.paths_lines(layout, state)),
    ])


def facts(read: Callable[[], object]) -> object:
    """A section's facts read from the cluster, or why they could not be."""
    try:
        return read()
    except ClusterError as exc:
        return {"unavailable": str(exc)}


def pod_facts(layout: Layout) -> JsonObject:
    """With the pod runner: the pod's containers and the API's denials, from `up`'s file."""
    try:
        snap: JsonObject = json.loads(layout.pod_file.read_text())
    except (OSError, ValueError):
        return {}
    return {"pod": snap}


def pod_sections(layout: Layout) -> list[tuple[str, list[str]]]:
    """With the pod runner: the pod's containers and the API's denials, from `up`'s file."""
    try:
        snap = json.loads(layout.pod_file.read_text())
    except (OSError, ValueError):
        return []
    lines = []
    for c in snap["containers"]:
        state = next(iter(c["state"]), "?")
        detail = c["state"][state].get("reason", "") if state != "running" else ""
        last = c["last"].get("terminated", {})
        limit = f"{c['limit'] >> 20}Mi" if c["limit"] else "none"
        lines.append(f"  {c['name']}: {state}{f' ({detail})' if detail else ''},"
                     f" restarts {c['restarts']}"
                     + (f" (last: {last.get('reason')} {last.get('exitCode')})" if last else "")
                     + f", memory {c['rss'] >> 20}Mi of {limit}")
    denials = [f"  {d}" for d in snap["denials"]] or ["  (none)"]
    return [(f"pod {snap['pod']}", lines), ("API denials", denials)]


def _client_lines(layout: Layout) -> list[str]:
    return [
        f"  demo client of {r.name} on {r.device}: pid {r.client_pid}"
        f" ({'running' if clients.client_running(r) else 'exited'})"
        for r in clients.records(layout)
    ]


def _weston_pid(layout: Layout) -> str:
    return layout.weston_pid.read_text().strip() if layout.weston_pid.exists() else "?"


def compositor_facts(socket: Path, *, pid: str | None = None) -> JsonObject:
    """What a probe of weston's socket found, and the outputs it lists."""
    result = probe(socket, timeout=2.0)
    found: JsonObject = {"socket": str(socket), "pid": pid, "state": str(result.state),
                         "detail": result.detail}
    try:
        outputs = list_outputs(socket, timeout=5.0)
    except WaylandError as exc:
        return {**found, "outputs": {"unavailable": str(exc)}}
    return {**found, "outputs": [
        {"name": o.name, "mode": str(o.mode),
         "transform": o.transform.name.lower().replace("_", "-"), "scale": o.scale,
         "position": list(o.position)} for o in outputs]}


def compositor_lines(found: JsonObject) -> list[str]:
    who = f"pid {found['pid']}" if found["pid"] is not None else f"at {found['socket']}"
    lines = [f"  weston {who}: {found['state']} ({found['detail']})"]
    outputs = found["outputs"]
    if isinstance(outputs, dict):
        return [*lines, f"  outputs: unavailable ({outputs['unavailable']})"]
    return lines + [f"  {o['name']}: {o['mode']} {o['transform']} scale {o['scale']}"
                    f" at {tuple(o['position'])}" for o in outputs]


def _metric_samples(url: str) -> list[str]:
    with urllib.request.urlopen(url, timeout=10.0) as response:
        text = response.read().decode()
    return [line for line in text.splitlines()
            if line.startswith(METRICS) and not line.startswith(_METRIC_DETAIL)]


def metric_facts(url: str) -> object:
    """The usual metrics' samples as the exposition lists them, or why they could not be read."""
    try:
        return _metric_samples(url)
    except OSError as exc:
        return {"unavailable": str(exc)}


def metric_lines(url: str) -> list[str]:
    try:
        samples = _metric_samples(url)
    except OSError as exc:
        return [f"  unavailable ({exc})"]
    return [f"  {line}" for line in samples] or ["  (none of the usual metrics yet)"]


def claim(layout: Layout, device: str, *, parameters: Mapping[str, object], out: TextIO) -> str:
    """Create and allocate a claim on `device`, prepare it, start the demo client; its uid."""
    state = load(layout)
    monitor = card.find(card.monitors(state.monitors), device)
    name = f"sim-{monitor.device}-{uuid.uuid4().hex[:6]}"
    cluster = api(state)
    created = cluster.create(RESOURCE_CLAIMS, resource_claim(name, namespace=NAMESPACE),
                             namespace=NAMESPACE)
    uid = str(created.get("metadata", {}).get("uid") or "")
    if not uid:
        raise CommandError(f"the API server returned ResourceClaim {name} without a uid")
    status = {"allocation": control.allocation(state.node_name, monitor.device, parameters,
                                               driver=DRIVER)}
    try:
        actor(layout, state, "scheduler").patch(RESOURCE_CLAIMS, name, {"status": status},
                                                 namespace=NAMESPACE, subresource="status")
    except ClusterError:
        # Unallocated, the claim would only be litter in a real cluster.
        cluster.delete(RESOURCE_CLAIMS, name, namespace=NAMESPACE)
        raise
    with kubelet(layout, state) as plugin:
        answer = plugin.prepare([Claim(uid=uid, name=name, namespace=NAMESPACE)])[uid]
    if answer.error:
        cluster.delete(RESOURCE_CLAIMS, name, namespace=NAMESPACE)
        raise CommandError(f"the plugin refused claim {name}: {answer.error}")
    pid = clients.start_client(layout, uid, host_root=_host_root(state))
    clients.save(layout, clients.Record(uid=uid, name=name, device=monitor.device,
                                        client_pid=pid))
    print(f"claim {name} uid {uid}: {monitor.device} ({monitor.output}), demo client pid {pid}",
          file=out)
    print(uid, file=out, flush=True)
    return uid


def release(layout: Layout, name: str, *, out: TextIO) -> None:
    """Stop the claim's demo client, unprepare it, delete the ResourceClaim."""
    state = load(layout)
    record = clients.find(layout, name)
    clients.stop_client(record)
    with kubelet(layout, state) as plugin:
        error = plugin.unprepare([Claim(uid=record.uid, name=record.name)])[record.uid]
    if error:
        raise CommandError(f"the plugin could not unprepare {record.name}: {error}")
    api(state).delete(RESOURCE_CLAIMS, record.name, namespace=NAMESPACE)
    clients.forget(layout, record)
    print(f"released {record.name} ({record.device})", file=out, flush=True)


def hotplug(layout: Layout, device: str, *, connected: bool, out: TextIO) -> None:
    state = load(layout)
    monitor = card.find(card.monitors(state.monitors), device)
    card.plug(layout.root, monitor, connected=connected)
    # No uevent reaches netlink from a simulated card: SIGHUP makes the operator re-read sysfs.
    operator = state.pids.get("draplugin")
    if operator is None or not alive(operator):
        raise CommandError("the operator is not running; its restart re-reads sysfs")
    os.kill(operator, signal.SIGHUP)
    what = "plugged into" if connected else "pulled out of"
    print(f"monitor {monitor.name!r} {what} {monitor.sysfs_name}; the operator re-reads sysfs"
          " now (SIGHUP): watch `simnode status`", file=out, flush=True)


def host_pid(pid: int, comm: str) -> int:
    """The host's pid of the `comm` process a pid file names: the same pid under bubblewrap
    (the host's pid namespace), the one whose innermost NSpid is `pid` under podman (the pod's
    own namespace, where weston writes its pid file). Never a recycled pid of another program.
    """
    with contextlib.suppress(OSError):
        if procfs.comm(pid) == comm:
            return pid
    for found in procfs.named(comm):
        with contextlib.suppress(OSError):
            if procfs.innermost_pid(found) == pid:
                return found
    raise ValueError(f"no {comm} process has pid {pid}, in this or a pod's pid namespace")


def hang(layout: Layout, *, out: TextIO) -> int:
    """SIGSTOP weston: the watchdog should taint the devices and SIGKILL it."""
    load(layout)
    try:
        pid = host_pid(int(layout.weston_pid.read_text()), "weston")
    except (OSError, ValueError) as exc:
        raise CommandError(f"no weston pid in {layout.weston_pid}: {exc}") from exc
    os.kill(pid, signal.SIGSTOP)
    print(f"weston (pid {pid}) stopped with SIGSTOP: watch `simnode status` for the taint,"
          " the watchdog's SIGKILL and the restart", file=out, flush=True)
    return pid


def shoot(layout: Layout, output: str, path: Path, *, dist: Path, out: TextIO) -> None:
    """One PNG of `output` (X1, or a device name) through capture's `shoot`."""
    shoot_through(layout.capture_socket, output, path, monitors=load(layout).monitors,
                  dist=dist, out=out)


def shoot_through(socket: Path, output: str, path: Path, *, monitors: int, dist: Path,
                  out: TextIO) -> None:
    """capture's `shoot` of `output` (X1, or a device name) through the capture `socket`."""
    with_name = output
    if not output.upper().startswith("X"):
        with_name = card.find(card.monitors(monitors), output).output
    argv = [str(pex(dist, "capture")), "shoot", f"--socket={socket}", with_name, str(path)]
    done = subprocess.run(argv, env=child_env(), capture_output=True, text=True, timeout=60,
                          check=False)
    if done.returncode != 0:
        raise CommandError(f"capture shoot failed (rc {done.returncode}): {done.stderr.strip()}")
    print(f"wrote {path} ({with_name})", file=out, flush=True)


def display(layout: Layout, device: str, *, mode: str | None = None, power: str | None = None,
            out: TextIO) -> None:
    """A person sets the monitor's start mode (`spec.mode`) and/or its power (`spec.power`) on
    its Display (as `alice` on a pod-runner node, whom simnode's RBAC lets edit Displays)."""
    state = load(layout)
    monitor = card.find(card.monitors(state.monitors), device)
    name = f"{state.node_name}.{monitor.device}"
    spec = {k: v for k, v in (("mode", mode), ("power", power)) if v is not None}
    actor(layout, state, "alice").patch(DISPLAYS, name, {"spec": spec})
    said = " ".join(f"spec.{k}={v}" for k, v in spec.items())
    print(f"Display {name}: {said} (a mode applies now where no claim holds the output, a "
          "power whoever holds it; its SpecApplied condition and status.power say how it "
          "went: kubectl get displays)", file=out, flush=True)


ROLL_TIMEOUT_S: Final = 180.0


def roll(layout: Layout, *, out: TextIO) -> str:
    """Replace the pod as a DaemonSet roll does (maxSurge 0); the new pod's name."""
    state = load(layout)
    if state.host_root is None:
        raise CommandError("roll needs a node whose pod runs through the pod runner"
                           " (`simnode up` without --kubeconfig)")
    before = json.loads(layout.pod_file.read_text())["pod"]
    os.kill(state.pid, signal.SIGUSR1)
    deadline = time.monotonic() + ROLL_TIMEOUT_S
    while time.monotonic() < deadline:
        now = json.loads(layout.pod_file.read_text())
        if now["pod"] not in (None, before) and all(
                "running" in c["state"] or "terminated" in c["state"]
                for c in now["containers"]):
            print(f"rolled: {before} stopped, {now['pod']} running", file=out, flush=True)
            return str(now["pod"])
        time.sleep(0.5)
    raise CommandError(f"the pod did not roll in {ROLL_TIMEOUT_S:g} s: see {layout.logs}")
