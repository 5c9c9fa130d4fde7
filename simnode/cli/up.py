"""`simnode up`: what it was asked for, the node (`simnode.node.pod_node`) brought up with the
rendered base's pod in the embedded cluster or, with `--kubeconfig`, in a real one
(`simnode.cluster.remote`: checked before anything starts), served until SIGINT/SIGTERM (which
during start-up also interrupt it), then everything stopped.

The state dir is the node's: `host/` the simulated host (hostPaths, the card's /sys and /dev),
`pods/` each pod's own volumes, `identities/` a kubeconfig per actor of the embedded cluster,
`logs/` everything's logs.
The paths the other subcommands use (`simnode.cli.state.Layout`) are links into it: `etc-weston` to
the current pod's emptyDir, `run`, `cdi`, `plugins`, `plugins_registry`, `sys` and `dev` to
the host's. `pod.json` holds what `status` shows of the pod (containers' state, restarts and
memory against limits, and the API's denials), rewritten every second; SIGUSR1 (`simnode roll`)
replaces the pod.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TextIO

import yaml

from libdisplay import fsutil
from simnode.cli import clients, report
from simnode.cli.state import Layout, State, check_free, save
from simnode.cluster import prometheus
from simnode.cluster.embedded import Embedded, PodCluster
from simnode.cluster.preflight import without_daemonsets
from simnode.cluster.remote import Remote
from simnode.kubelet.manifest import load_documents
from simnode.node.checkout import (
    UpError,
    check_tools,
    pex,
    render,
    repo_of,
    trixie_root,
    use_trixie_compositor,
)
from simnode.node.pod_node import NodeConfig, PodNode

SNAPSHOT_S: Final = 1.0
METRICS_URL: Final = "http://127.0.0.1:9200/metrics"
LIVE_VIEW: Final = "https://127.0.0.1:9201/"
_HOST_LINKS: Final = {"run": "var/run/display.liken.sh", "cdi": "var/run/cdi",
                      "plugins": "var/lib/kubelet/plugins",
                      "plugins_registry": "var/lib/kubelet/plugins_registry",
                      "sys": "sys", "dev": "dev"}


@dataclass(frozen=True, slots=True)
class Options:
    """What `up` was asked for; without `kubeconfig` the cluster is an embedded fake."""

    layout: Layout
    dist: Path
    monitors: int
    clean: bool
    node_name: str
    kubeconfig: Path | None = None
    context: str | None = None
    images: bool = False  # containers from the built images (podman), not the PEXes
    prometheus: bool = False  # Prometheus with the shipped alerts (simnode.cluster.prometheus)
    without_ddc: tuple[str, ...] = ()  # devices whose monitor's DDC/CI does not answer


class StartInterruptedError(UpError):
    """SIGINT or SIGTERM came while the node was starting."""


class Signals:
    """SIGINT/SIGTERM set `stop`; while `interrupting` (start-up) they also raise, to stop it."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.interrupting = True

    def handle(self, signum: int, _frame: object) -> None:
        self.stop.set()
        if self.interrupting:
            self.interrupting = False
            raise StartInterruptedError(signal.Signals(signum).name)


@contextlib.contextmanager
def handled_signals() -> Iterator[Signals]:
    signals = Signals()
    previous = {
        sig: signal.signal(sig, signals.handle) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield signals
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def link(path: Path, target: Path) -> None:
    """`path` -> `target`, replaced atomically."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    tmp.rename(path)


def link_layout(layout: Layout, node: PodNode) -> None:
    for name, under in _HOST_LINKS.items():
        (node.config.host / under).mkdir(parents=True, exist_ok=True)
        link(layout.root / name, node.config.host / under)
    if node.pod is not None:
        link(layout.etc, node.pod.volumes.source("weston-config"))


def snapshot(node: PodNode) -> dict[str, Any]:
    pod = node.pod
    containers = []
    if pod is not None:
        status = pod.runner.status()
        memory = pod.runner.memory()
        for entry in status["initContainerStatuses"] + status["containerStatuses"]:
            rss, limit = memory[entry["name"]]
            containers.append({"name": entry["name"], "state": entry["state"],
                               "restarts": entry["restartCount"],
                               "last": entry["lastState"], "rss": rss, "limit": limit,
                               "pid": pod.runner.pid(entry["name"])})
    return {"pod": pod.name if pod else None, "containers": containers,
            "denials": node.cluster.denials()}


def state(options: Options, node: PodNode, snap: dict[str, Any]) -> State:
    pids = {c["name"]: c["pid"] for c in snap["containers"] if c["pid"]}
    if "operator" in pids:
        pids["draplugin"] = pids["operator"]  # the name `hotplug` signals
    kubeconfig: Path | None
    if isinstance(node.cluster, Embedded):
        kubeconfig, context = node.control.kubeconfig_of("admin"), None
    else:
        kubeconfig, context = options.kubeconfig, options.context
    return State(pid=os.getpid(), node_name=options.node_name, api_url=node.cluster.url,
                 metrics_url=METRICS_URL, monitors=options.monitors,
                 xvfb_display=node.display, pids=pids,
                 kubeconfig=str(kubeconfig) if kubeconfig else None, context=context,
                 host_root=str(node.host_link))


def prerequisites(repo: Path) -> str:
    """The rendered base without its DaemonSet, what a real cluster needs for `up`."""
    return yaml.safe_dump_all(without_daemonsets(load_documents(render(repo))),
                              sort_keys=False)


def cluster_of(options: Options) -> PodCluster | None:
    """The real cluster `--kubeconfig` names (its kubeconfig checked now), or None."""
    if options.kubeconfig is None:
        return None
    return Remote(options.kubeconfig, context=options.context, node=options.node_name)


def run(options: Options, out: TextIO) -> None:
    """Start the node and its pod, print it, serve until SIGINT/SIGTERM, stop everything."""
    use_trixie_compositor(options.dist)
    check_tools()
    for name in ("declare", "westonctl", "draplugin", "capture"):
        pex(options.dist, name)
    cluster = cluster_of(options)
    check_free(options.layout, clean=options.clean)
    layout = options.layout
    layout.root.mkdir(parents=True, exist_ok=True)
    fsutil.atomic_write(layout.marker, "")
    layout.clients.mkdir(exist_ok=True)
    repo = repo_of(options.dist)
    config = NodeConfig(state=layout.root, repo=repo, dist=options.dist.resolve(),
                        manifests=render(repo), trixie_root=trixie_root(repo),
                        node_name=options.node_name, monitors=options.monitors,
                        images=options.images, without_ddc=options.without_ddc)
    node = PodNode(config, cluster=cluster)
    roll = threading.Event()
    previous = signal.signal(signal.SIGUSR1, lambda *_: roll.set())
    watch = (prometheus.Settings(repo=repo, state=layout.root, node_name=options.node_name)
             if options.prometheus else None)
    with handled_signals() as signals, prometheus.serving(watch, out):
        try:
            node.start()
            link_layout(layout, node)
            _save(options, node)
            report.print_up(node.cluster.reader.objects, layout, _state(options, node), out)
            print(f"live view: {LIVE_VIEW}" + (f" (token: {node.control.viewer_token})"
                  if isinstance(node.cluster, Embedded) else ""), file=out)
            print(report.READY_LINE, file=out, flush=True)
            signals.interrupting = False
            while not signals.stop.wait(SNAPSHOT_S):
                if roll.is_set():
                    roll.clear()
                    print("simnode: rolling the pod", file=out, flush=True)
                    node.roll()
                    link_layout(layout, node)
                _save(options, node)
        except StartInterruptedError as exc:
            print(f"simnode: {exc} while starting", file=out, flush=True)
        finally:
            signals.interrupting = False
            signal.signal(signal.SIGUSR1, previous)
            print("simnode: stopping", file=out, flush=True)
            for record in clients.records(layout):  # `simnode claim`'s, not our children
                clients.stop_client(record)
            node.stop()
            if node.withdrawn:
                print(f"simnode: deleted {', '.join(node.withdrawn)}", file=out, flush=True)
            fsutil.remove(layout.state_file)
    print("simnode: stopped, no process left", file=out, flush=True)


def _state(options: Options, node: PodNode) -> State:
    return state(options, node, snapshot(node))


def _save(options: Options, node: PodNode) -> None:
    snap = snapshot(node)
    fsutil.atomic_write(options.layout.pod_file, json.dumps(snap, indent=1) + "\n")
    save(options.layout, state(options, node, snap))
