"""A simulated node running the rendered DaemonSet's pod through the runner.

What the node is, before any pod: its cluster (`simnode.cluster.embedded`: the embedded fake API,
HTTPS with tokens and RBAC, every object of the manifests applied; or with `--kubeconfig` a
real one, checked to hold what the pod needs, `simnode.cluster.remote`) and the node's Node object,
the simulated card under the host root with a DDC/CI monitor on each connector's i2c socket,
the node's Xvfb (the card's "screens"), the weston image's layout module, and liken's CDI spec
of the card. Then the pod: the Pod object (as the DaemonSet controller makes it) and, in the
embedded cluster, its claim (allocated as the scheduler allocates it), the volumes and
projections the kubelet makes (the service account's token renewed before it expires), the
containers run by `PodRunner`, the status written as the kubelet writes it, and the plugin's
registration as the kubelet does it. `roll` replaces the pod as the DaemonSet's roll does with
`maxSurge: 0`: the old pod has stopped, and its emptyDir is gone, before the new one starts;
hostPaths stay.
"""

from __future__ import annotations

import fcntl
import logging
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from fakekube.server import FakeKube
from libdisplay.hardware.ddc_socket import MonitorServer
from libdisplay.pod import DRIVER
from libdisplay.processes import Process, unix_socket_accepts
from simnode.cluster import control
from simnode.cluster.embedded import Embedded, PodCluster
from simnode.kubelet.assemble import Assembler, Machine
from simnode.kubelet.launcher import BwrapLauncher, Launcher
from simnode.kubelet.manifest import PodTemplate, daemonset, load_documents, pod_template
from simnode.kubelet.node_object import NodeObject
from simnode.kubelet.plugin import Kubelet
from simnode.kubelet.podman import PodmanLauncher
from simnode.kubelet.runner import PodRunner
from simnode.kubelet.tokens import AccountProjection
from simnode.kubelet.volumes import PodVolumes, SecretVolumes
from simnode.node import card, card_cdi
from simnode.node.checkout import UpError, use_trixie_compositor
from simnode.node.i2c import serve_monitors, stop_monitors
from simnode.node.xvfb import start_xvfb

log = logging.getLogger(__name__)

START_TIMEOUT_S: Final = 120.0
# The pod's containers listen on the manifest's ports on the host's network: one pod-runner
# node per machine at a time, the next one (a test beside another) waits for the lock.
PORTS_LOCK: Final = Path("/tmp/simnode-pod-ports.lock")
PORTS_WAIT_S: Final = 900.0
MODULEDIR: Final = Path("usr/lib/x86_64-linux-gnu/weston")
LAYOUT_BUILD: Final = Path("westonctl") / "layout" / "build.sh"


class NodeError(UpError):
    """The node or its pod could not start; the message says which part and where its log is."""


@dataclass(frozen=True, slots=True)
class NodeConfig:
    state: Path
    repo: Path
    dist: Path
    manifests: str
    """The rendered manifests (`kubectl kustomize deploy/base`)."""
    trixie_root: Path
    node_name: str = "sim-node-1"
    monitors: int = 3
    start_timeout_s: float = START_TIMEOUT_S
    images: bool = False
    """Run each container from its built image with podman (simnode.kubelet.podman)."""
    without_ddc: tuple[str, ...] = ()
    """Devices whose monitor's DDC/CI does not answer (`up --no-ddc`)."""

    @property
    def host(self) -> Path:
        """The simulated host's root: hostPaths, the card's /sys and /dev."""
        return self.state / "host"

    @property
    def logs(self) -> Path:
        return self.state / "logs"


class RunningPod:
    """One pod of the DaemonSet on this node, from its Pod object to its removal."""

    def __init__(self, node: PodNode, number: int) -> None:
        self.node = node
        config = node.config
        self.template = node.template
        self.object = node.cluster.create_pod(self.template)
        self.name = str(self.object["metadata"]["name"])
        self.claims = node.cluster.create_claims(self.template, self.object,
                                                 card_cdi.ALLOCATION, card_cdi.LIKEN_DRIVER)
        self.dir = config.state / "pods" / self.name
        self.logs = config.logs / f"pod-{number}-{self.name}"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.volumes = PodVolumes(self.template, host_root=config.host, pod_dir=self.dir)
        self.secrets: SecretVolumes | None = None
        cdi = {}
        for claim in self.template.claim_templates:
            cdi.update(card_cdi.claim_edits(claim, card_cdi.ALLOCATION, node.devices))
        namespace, account = self.template.namespace, self.template.service_account
        self.account = AccountProjection(
            self.dir / "serviceaccount", ca_pem=node.cluster.ca_pem, namespace=namespace,
            issue=lambda: node.cluster.issue_token(namespace, account, self.object))
        self.assembler = Assembler(
            self.template, machine=node.machine, pod=self.object, volumes=self.volumes,
            service_account=self.account.directory, api=node.cluster.service_address, cdi=cdi,
            logs=self.logs, scratch=self.dir / "scratch")
        self.runner = PodRunner(
            self.template, launcher=node.launcher, spec_for=self.assembler.spec,
            images={c.name: c.image for c in self.template.all_containers()},
            on_status=lambda status: node.cluster.write_status(self.object, status))

    def build_images(self) -> None:
        """Each image's PEX unpacked once (see `Assembler.warm_spec`)."""
        if isinstance(self.node.launcher, PodmanLauncher):
            return  # built images: their entrypoints are installed
        for container in self.template.all_containers():
            if container.command is not None:
                continue
            launched = self.node.launcher.launch(self.assembler.warm_spec(container))
            deadline = time.monotonic() + START_TIMEOUT_S
            while not launched.exited() and time.monotonic() < deadline:
                time.sleep(0.1)
            code = launched.reap() if launched.exited() else launched.kill_and_reap()
            if code != 0:
                raise NodeError(f"image of {container.name}: `--version` exited {code}: see"
                                f" {self.logs}/build-{container.name}.log")

    def start(self) -> None:
        self.build_images()
        self.volumes.create()
        self.account.start()
        self.secrets = SecretVolumes(
            self.node.cluster.kubelet.endpoint, self.template.namespace,
            {v.secret_name: self.volumes.source(v.name)
             for v in self.template.volumes.values() if v.kind == "secret"})
        self.secrets.start(timeout_s=self.node.config.start_timeout_s)
        self.runner.start(timeout_s=self.node.config.start_timeout_s)

    def stop(self) -> None:
        self.runner.stop()
        self.account.stop()
        if self.secrets is not None:
            self.secrets.stop()
        self.volumes.remove()
        self.node.cluster.delete_pod(self.object, self.claims)


class PodNode:
    """The node; `cluster` is the embedded fake unless another is given."""

    def __init__(self, config: NodeConfig, *, launcher: Launcher | None = None,
                 cluster: PodCluster | None = None) -> None:
        self.config = config
        self.template: PodTemplate = pod_template(daemonset(load_documents(config.manifests)))
        self.launcher = launcher or (PodmanLauncher(repo=config.repo) if config.images
                                     else BwrapLauncher())
        self.cluster: PodCluster = cluster or Embedded(config.state / "identities",
                                                       node=config.node_name)
        self.node_object: NodeObject | None = None
        self.monitors = card.monitors(config.monitors)
        self.servers: dict[str, MonitorServer] = {}
        self.xvfb: Process | None = None
        self.display = ""
        self.devices: dict[str, Any] = {}
        self.machine = Machine(
            repo=config.repo, dist=config.dist, trixie_root=config.trixie_root,
            pex_root=Path("/var/cache/display-operator/simnode-pex-root"),
            extra_usr={"trixie": config.state / "images" / "trixie-layer" / "usr"})
        self.pod: RunningPod | None = None
        self._pods = 0
        self._ports: IO[bytes] | None = None
        self._link_dir: Path | None = None
        self.host_link = config.host
        self.withdrawn: list[str] = []
        """What stopping deleted from the cluster, as `Kind name`."""

    @property
    def kube(self) -> FakeKube:
        """The embedded fake API (a node with another cluster has none)."""
        return self._embedded().kube

    @property
    def control(self) -> control.ControlPlane:
        """The embedded fake's actors: admin, scheduler, the person, the viewer's token."""
        return self._embedded().control

    def _embedded(self) -> Embedded:
        if not isinstance(self.cluster, Embedded):
            raise NodeError("this node's cluster is not the embedded fake")
        return self.cluster

    @property
    def registration_socket(self) -> Path:
        return self.host_link / "var/lib/kubelet/plugins_registry" / f"{DRIVER}-reg.sock"

    def start(self) -> None:
        config = self.config
        config.logs.mkdir(parents=True, exist_ok=True)
        # Before waiting for the ports: a cluster that cannot take the pod fails at once.
        self.cluster.start(load_documents(config.manifests))
        self._ports = _lock(PORTS_LOCK, timeout_s=PORTS_WAIT_S)
        # The kubelet stand-in dials the plugin's sockets on the host through a short link
        # (AF_UNIX paths are at most 108 bytes; a state dir may be deep).
        self._link_dir = Path(tempfile.mkdtemp(prefix="sn-", dir="/tmp"))
        self.host_link = self._link_dir / "h"
        self.host_link.symlink_to(config.host.resolve())
        use_trixie_compositor(config.dist)
        self.node_object = NodeObject(self.cluster.kubelet, config.node_name)
        self.node_object.publish()
        card.write_card(config.host, self.monitors)
        self.servers = serve_monitors(config.host, self.monitors,
                                      without_ddc=config.without_ddc)
        self._build_layout()
        self._start_xvfb()
        self.devices = card_cdi.edits(config.host, self.monitors, display=self.display)
        cdi_dir = config.host / "var/run/cdi"
        cdi_dir.mkdir(parents=True, exist_ok=True)
        card_cdi.write_spec(cdi_dir, self.devices)
        self.start_pod()

    def start_pod(self) -> None:
        self._pods += 1
        self.pod = RunningPod(self, self._pods)
        self.pod.start()
        self._register()

    def _register(self) -> None:
        """The kubelet's plugin watcher: GetInfo and NotifyRegistrationStatus, retried while
        the operator (re)starts."""
        assert self.pod is not None
        deadline = time.monotonic() + self.config.start_timeout_s
        while True:
            error: Exception | None = None
            if unix_socket_accepts(self.registration_socket):
                try:
                    with self.kubelet() as kubelet:
                        log.info("kubelet: registered %s (%s)", DRIVER, kubelet.service)
                    return
                except Exception as exc:  # the plugin went away mid-handshake: try again
                    error = exc
            if time.monotonic() >= deadline:
                raise NodeError(f"the operator did not register on {self.registration_socket}"
                                f" in {self.config.start_timeout_s:g} s ({error}): see"
                                f" {self.pod.logs}/operator.log")
            time.sleep(0.2)

    def kubelet(self) -> Kubelet:
        return Kubelet(self.registration_socket, driver=DRIVER, host_root=self.host_link)

    def roll(self) -> None:
        """Replace the pod: the old one stops and is deleted before the new one starts."""
        self.stop_pod()
        self.start_pod()

    def stop_pod(self) -> None:
        if self.pod is not None:
            self.pod.stop()
            self.pod = None

    def stop(self) -> None:
        try:
            self.stop_pod()
        finally:
            if self.xvfb is not None:
                self.xvfb.stop()
            stop_monitors(self.servers)
            self.withdrawn = self._withdraw()
            self.cluster.stop()
            if self._link_dir is not None:
                shutil.rmtree(self._link_dir, ignore_errors=True)
                self._link_dir = None
            if self._ports is not None:
                self._ports.close()
                self._ports = None

    def _withdraw(self) -> list[str]:
        """Delete the Node and this node's slices (as `Kind name`), once the pod is gone."""
        if self.node_object is None:
            return []
        self.node_object.api = self.cluster.owner
        try:
            return self.node_object.withdraw()
        except Exception:  # what could not be deleted stays; the rest of stop() goes on
            log.exception("withdrawing the Node failed")
            return []

    def _build_layout(self) -> None:
        out = self.machine.extra_usr["trixie"].parent / MODULEDIR / "layout-shell.so"
        out.parent.mkdir(parents=True, exist_ok=True)
        with (self.config.logs / "layout-build.log").open("wb") as log_file:
            done = subprocess.run(["sh", str(self.config.repo / LAYOUT_BUILD), str(out)],
                                  stdout=log_file, stderr=subprocess.STDOUT, timeout=300,
                                  check=False)
        if done.returncode != 0:
            raise NodeError(f"building the layout module failed: see"
                            f" {self.config.logs / 'layout-build.log'}")

    def _start_xvfb(self) -> None:
        self.xvfb, self.display = start_xvfb(self.config.logs / "xvfb.log",
                                             timeout_s=START_TIMEOUT_S)


def _lock(path: Path, *, timeout_s: float) -> IO[bytes]:
    """An exclusive flock on `path`, held while the returned file is open."""
    handle = path.open("ab")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            if time.monotonic() >= deadline:
                handle.close()
                raise NodeError(f"another pod-runner node holds {path} (the ports 9200 and"
                                f" 9201) after {timeout_s:g} s: stop it first") from None
            time.sleep(0.5)


CONSUMER_NAMESPACE: Final = "default"


def claim(node: PodNode, device: str, parameters: dict[str, object]) -> tuple[str, str]:
    """A consumer's claim on `device` (created as the cluster owner, allocated as the
    scheduler) prepared by the operator as the kubelet asks it; (name, uid)."""
    from fakekube.testing import resource_claim
    from simnode.kubelet.plugin import Claim

    name = f"sim-{device}-{uuid.uuid4().hex[:6]}"
    created = node.control.admin.create(control.CLAIMS, resource_claim(
        name, namespace=CONSUMER_NAMESPACE), namespace=CONSUMER_NAMESPACE)
    uid = str(created["metadata"]["uid"])
    node.control.scheduler.patch(
        control.CLAIMS, name, {"status": {"allocation": control.allocation(
            node.config.node_name, device, parameters, driver=DRIVER)}},
        namespace=CONSUMER_NAMESPACE, subresource="status")
    with node.kubelet() as kubelet:
        answer = kubelet.prepare([Claim(uid=uid, name=name, namespace=CONSUMER_NAMESPACE)])[uid]
    if answer.error:
        node.control.admin.delete(control.CLAIMS, name, namespace=CONSUMER_NAMESPACE)
        raise NodeError(f"the operator refused claim {name}: {answer.error}")
    return name, uid


def release(node: PodNode, name: str, uid: str) -> None:
    from simnode.kubelet.plugin import Claim

    with node.kubelet() as kubelet:
        error = kubelet.unprepare([Claim(uid=uid, name=name, namespace=CONSUMER_NAMESPACE)])[uid]
    if error:
        raise NodeError(f"the operator could not unprepare {name}: {error}")
    node.control.admin.delete(control.CLAIMS, name, namespace=CONSUMER_NAMESPACE)
