"""`simnode up --cluster local`: the simulated card on a real one-machine Kubernetes 1.37 node,
and the operator deployed on it as a cluster owner deploys it.

In order: the components built (cached) and the cluster started (`cluster.LocalCluster`); the
simulated card (its sysfs tree, a DDC/CI monitor on each i2c socket, Xvfb for its screens);
the pod's images from deploy/images/build.sh put into containerd at the manifests' names
(`images`); liken's stand-in plugin registered with the kubelet (`liken`); then
`kubectl apply -k deploy/overlays/simulated-node` (the base, images never pulled, the
simulated screens' IPC), and the
operator's pod awaited: the real scheduler allocates its claim from the template, the real
kubelet runs its four containers. `stop` undoes it all in reverse.
"""

from __future__ import annotations

import json
import logging
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from libdisplay import __version__
from libdisplay.processes import Process
from simnode.cluster.api import Access, Api, ClusterError
from simnode.cluster.local import cluster, images
from simnode.cluster.local.cluster import LocalCluster, LocalClusterError
from simnode.cluster.local.components import Paths
from simnode.node import card
from simnode.node.i2c import serve_monitors, stop_monitors
from simnode.node.liken_plugin import LikenPlugin
from simnode.node.xvfb import start_xvfb

log = logging.getLogger(__name__)

OVERLAY: Final = Path("deploy") / "overlays" / "simulated-node"
NAMESPACE: Final = "display-operator"
POD_TIMEOUT_S: Final = 300.0
CDI_DIR: Final = Path("/var/run/cdi")
# How often liken's stand-in checks its slice is still there (a real liken watches it).
PUBLISH_CHECK_S: Final = 5.0


@dataclass(frozen=True, slots=True)
class LocalConfig:
    state: Path
    repo: Path
    node_name: str
    monitors: int
    cache: Path = cluster.DEFAULT_CACHE


class LocalNode:
    def __init__(self, config: LocalConfig) -> None:
        self.config = config
        self.monitors = card.monitors(config.monitors)
        self.cluster: LocalCluster | None = None
        self.liken: LikenPlugin | None = None
        self.xvfb: Process | None = None
        self.display = ""  # Xvfb's DISPLAY
        self.servers: dict[str, Any] = {}
        self.timings: dict[str, float] = {}
        self._next_publish_check = 0.0

    @property
    def host(self) -> Path:
        return self.config.state / "host"

    @property
    def logs(self) -> Path:
        return self.config.state / "logs"

    def _timed(self, what: str, step: Callable[[], object]) -> None:
        started = time.monotonic()
        step()
        self.timings[what] = time.monotonic() - started
        log.info("local node: %s in %.1f s", what, self.timings[what])

    def start(self) -> None:
        config = self.config
        self.logs.mkdir(parents=True, exist_ok=True)
        bin_dir = cluster.binaries(config.repo)
        paths = Paths(state=config.state / "cluster", cache=config.cache / "kube", bin=bin_dir)
        self.cluster = LocalCluster(paths, node=config.node_name)
        cluster.clean_host()
        self._timed("cluster up, node Ready", self.cluster.start)
        card.write_card(self.host, self.monitors)
        self.servers = serve_monitors(self.host, self.monitors)
        self.xvfb, self.display = start_xvfb(self.logs / "xvfb.log", timeout_s=60)
        self._timed("images in containerd", lambda: self._load_images(paths))
        api = Api(Access.from_kubeconfig(self.cluster.admin_kubeconfig))
        self.liken = LikenPlugin(api, node=config.node_name, host_root=self.host,
                                 monitors=self.monitors, display=self.display, cdi_dir=CDI_DIR)
        self.liken.start()
        self._timed("base applied, operator Running", self._deploy)

    def _load_images(self, paths: Paths) -> None:
        pause = images.ensure_pause(self.config.repo)
        refs = {pause: pause}
        for name in self._pod_images():  # as build.sh tags them: the binaries' version
            refs[name] = f"{name.rsplit(':', 1)[0]}:{__version__}"
        images.load(paths, self.config.repo, refs)

    def _pod_images(self) -> list[str]:
        assert self.cluster is not None
        rendered = self.cluster.kubectl("kustomize", str(self.config.repo / OVERLAY)).stdout
        found = []
        for line in rendered.splitlines():
            image = line.strip().removeprefix("image: ")
            if image != line.strip() and image not in found:
                found.append(image)
        return found

    def _deploy(self) -> None:
        assert self.cluster is not None
        self.cluster.kubectl("apply", "--server-side", "-k", str(self.config.repo / OVERLAY))
        self.cluster.process("kubelet").wait_until(
            self.operator_running, timeout=POD_TIMEOUT_S,
            what="the operator's pod Running with its four containers")

    def operator_pod(self) -> dict[str, Any] | None:
        assert self.cluster is not None
        pods = json.loads(self.cluster.kubectl(
            "get", "pods", "-n", NAMESPACE, "-l", "app=display-operator", "-o", "json",
            timeout=20).stdout)["items"]
        return pods[0] if pods else None

    def operator_running(self) -> bool:
        try:
            pod = self.operator_pod()
        except (LocalClusterError, subprocess.TimeoutExpired):
            return False
        if pod is None or pod["status"].get("phase") != "Running":
            return False
        states = {s["name"]: s["state"] for s in
                  pod["status"].get("initContainerStatuses", []) +
                  pod["status"].get("containerStatuses", [])}
        return ("terminated" in states.get("declare", {})
                and states["declare"]["terminated"].get("exitCode") == 0
                and all("running" in states.get(c, {})
                        for c in ("weston", "operator", "capture")))

    def supervise(self) -> bool:
        """The kubelet kept running (True when it had to be started again) and liken's
        slice kept published (the kubelet deletes a node's slices when it starts)."""
        assert self.cluster is not None and self.liken is not None
        restarted = self.cluster.restart_exited_kubelet()
        now = time.monotonic()
        if restarted or now >= self._next_publish_check:
            self._next_publish_check = now + PUBLISH_CHECK_S
            try:
                self.liken.publish(replace=False)
            except ClusterError as exc:  # the API is away: the next check tries again
                log.warning("liken stand-in: cannot check its slice: %s", exc)
        return restarted

    def stop(self) -> None:
        if self.liken is not None:
            self.liken.stop()
        if self.cluster is not None:
            self.cluster.stop()
        if self.xvfb is not None:
            self.xvfb.stop()
        stop_monitors(self.servers)
