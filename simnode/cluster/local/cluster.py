"""A real one-machine Kubernetes cluster, as hack/local-up-cluster.sh runs one: etcd,
kube-apiserver (TLS, Node and RBAC authorization, NodeRestriction, a service-account issuer),
kube-controller-manager with every default controller, kube-scheduler, containerd with CDI and
runc, the CNI bridge, kube-proxy and the kubelet, each started from the binaries
build-support/kube/build made, each awaited on its own health endpoint, and stopped and reaped
by pid in the reverse order.

The kubelet and containerd use the machine's own paths (/var/lib/kubelet, /run/containerd,
/var/run/cdi), as the DaemonSet's hostPaths name them, so one local cluster runs on a machine
at a time. The pods the kubelet started are removed through the runtime before containerd
stops: their shims are not containerd's children and would outlive it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Final

from libdisplay.processes import Process, ProcessError, start, unix_socket_accepts
from simnode.cluster.api import ClusterError
from simnode.cluster.local import components, network, pki
from simnode.cluster.local.components import Paths

log = logging.getLogger(__name__)

# Bounds a loaded two-core machine meets: the API server's first start migrates etcd's
# schema and compiles its OpenAPI, which takes tens of seconds there.
START_TIMEOUT_S: Final = 180.0
NODE_READY_TIMEOUT_S: Final = 180.0
SHIM_EXIT_TIMEOUT_S: Final = 30.0
BUILD: Final = Path("build-support") / "kube" / "build"
DEFAULT_CACHE: Final = Path("/var/cache/display-operator")


class LocalClusterError(ClusterError):
    """A component did not build, start or become healthy; the message names it and its log."""


def binaries(repo: Path) -> Path:
    """The components' bin dir, built now if its inputs changed (cached, else minutes)."""
    script = repo / BUILD
    try:
        done = subprocess.run([str(script)], stdout=subprocess.PIPE, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise LocalClusterError(f"{script} failed: {exc}") from exc
    return Path(done.stdout.strip().splitlines()[-1])


def _get(url: str, *, context: ssl.SSLContext | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as answer:
            return answer.status, answer.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, ""
    except (OSError, ValueError):
        return 0, ""


def _insecure() -> ssl.SSLContext:
    # The controllers' and scheduler's health ports serve self-signed certificates.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


class LocalCluster:
    def __init__(self, paths: Paths, *, node: str) -> None:
        self.paths = paths
        self.node = node
        self.pki: pki.Pki | None = None
        self._processes: list[Process] = []
        self._commands: dict[str, tuple[list[str], Callable[[], bool]]] = {}

    @property
    def admin_kubeconfig(self) -> Path:
        return self.paths.kubeconfig("admin")

    @property
    def processes(self) -> list[Process]:
        """The running components, in the order they started."""
        return list(self._processes)

    def process(self, name: str) -> Process:
        for p in self._processes:
            if p.name == name:
                return p
        raise KeyError(name)

    def start(self) -> None:
        paths = self.paths
        for d in (paths.state, paths.logs, paths.containerd_root):
            d.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        self.pki = keys = pki.ensure(paths.pki_dir, node=self.node, node_ip=components.BRIDGE_IP,
                                     api_ips=["127.0.0.1", components.BRIDGE_IP, "10.0.0.1"])
        for who in pki.identities(self.node):
            components.write_kubeconfig(paths.kubeconfig(who.name), pki=keys, who=who.name,
                                        server=components.api_url())
        network.ensure()
        components.cni_config(paths)
        api_context = ssl.create_default_context(cafile=str(keys.ca))
        api_context.load_cert_chain(str(keys.cert("admin")), str(keys.key("admin")))

        self._run("etcd", components.etcd(paths),
                  lambda: _get(f"{components.ETCD_CLIENT}/health")[0] == 200)
        self._run("kube-apiserver", components.apiserver(paths, keys),
                  lambda: _get(f"{components.api_url()}/readyz", context=api_context)[0]
                  == 200)
        self._run("kube-controller-manager", components.controller_manager(paths, keys),
                  lambda: _get(components.CONTROLLER_MANAGER_HEALTHZ,
                               context=_insecure())[0] == 200)
        self._run("kube-scheduler", components.scheduler(paths),
                  lambda: _get(components.SCHEDULER_HEALTHZ, context=_insecure())[0] == 200)
        self._run("containerd", components.containerd(paths),
                  lambda: unix_socket_accepts(components.CONTAINERD_SOCKET))
        self._run("kubelet", components.kubelet(paths, keys, node=self.node),
                  lambda: _get(components.KUBELET_HEALTHZ)[0] == 200)
        self.process("kubelet").wait_until(self.node_ready, timeout=NODE_READY_TIMEOUT_S,
                                           what=f"node {self.node} Ready")
        # kube-proxy reports healthy only once its Node exists, as local-up-cluster starts it.
        self._run("kube-proxy", components.proxy(paths, node=self.node),
                  lambda: _get(components.PROXY_HEALTHZ)[0] == 200)
        log.info("local cluster: node %s Ready %.1f s after start", self.node,
                 time.monotonic() - started)

    def _run(self, name: str, argv: list[str], ready: Callable[[], bool]) -> None:
        process = start(argv, log_path=self.paths.logs / f"{name}.log",
                        env={**os.environ, "PATH": f"{self.paths.bin}:{os.environ['PATH']}"})
        self._processes.append(process)
        self._commands[name] = (argv, ready)
        try:
            process.wait_until(ready, timeout=START_TIMEOUT_S, what=f"{name} healthy")
        except ProcessError as exc:
            raise LocalClusterError(f"{name} did not become healthy: {exc}") from exc

    def restart_exited_kubelet(self) -> bool:
        """The kubelet started again if it has exited, as a node's service manager does
        (Restart=always); True when it was."""
        kubelet = self.process("kubelet")
        if not kubelet.exited():
            return False
        log.warning("local cluster: the kubelet exited (%s): starting it again",
                    kubelet.returncode)
        kubelet.stop()  # reaped
        self._processes.remove(kubelet)
        argv, ready = self._commands["kubelet"]
        self._run("kubelet", argv, ready)
        return True

    def kubectl(self, *args: str, input: str | None = None,
                timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """The built kubectl as the cluster's admin; raises with its stderr on failure."""
        argv = [self.paths.exe("kubectl"), f"--kubeconfig={self.admin_kubeconfig}", *args]
        done = subprocess.run(argv, input=input, capture_output=True, text=True,
                              timeout=timeout, check=False)
        if done.returncode != 0:
            raise LocalClusterError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done

    def node_ready(self) -> bool:
        try:
            node = json.loads(self.kubectl("get", "node", self.node, "-o", "json",
                                           timeout=20).stdout)
        except (LocalClusterError, subprocess.TimeoutExpired, ValueError):
            return False
        return any(c["type"] == "Ready" and c["status"] == "True"
                   for c in node.get("status", {}).get("conditions", []))

    def stop(self) -> None:
        """Everything stopped and reaped, the kubelet's pods removed, in reverse order."""
        names = [p.name for p in self._processes]
        if "kubelet" in names:
            self.process("kubelet").stop(grace=10)
        if "containerd" in names and not self.process("containerd").exited():
            self._remove_pods()
        for process in reversed(self._processes):
            if not process.exited():
                with contextlib.suppress(ProcessError):
                    process.stop(grace=10)
        self._kill_shims()
        self._processes.clear()

    def _remove_pods(self) -> None:
        crictl = [self.paths.exe("crictl"), "--runtime-endpoint",
                  f"unix://{components.CONTAINERD_SOCKET}", "--timeout", "30s"]
        try:
            subprocess.run([*crictl, "rmp", "--force", "--all"], capture_output=True,
                           timeout=120, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("local cluster: removing the pods failed: %s", exc)

    def _kill_shims(self) -> None:
        """Any runc shim of ours still running (a pod the runtime could not remove), killed
        and awaited: they are not our children, so their end is read from /proc."""
        shim = os.path.realpath(self.paths.exe("containerd-shim-runc-v2"))
        pids = []
        for pid_dir in Path("/proc").iterdir():
            if pid_dir.name.isdigit():
                with contextlib.suppress(OSError):
                    if os.path.realpath(pid_dir / "exe") == shim:
                        pids.append(int(pid_dir.name))
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + SHIM_EXIT_TIMEOUT_S
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)


def _alive(pid: int) -> bool:
    """Running, or not yet dead: a zombie has ended."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def clean_host() -> None:
    """What an earlier run left in the kubelet's root, which a new cluster's kubelet would
    trip on: its checkpoints of pods and claims the new API server never held, plugin
    registrations whose sockets are gone, its pods' volumes (tmpfs mounts among them)."""
    root = components.KUBELET_ROOT
    for mount in sorted(_mounts_under(root), reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True, timeout=30, check=False)
    shutil.rmtree(root, ignore_errors=True)


def _mounts_under(root: Path) -> list[str]:
    prefix = f"{root}/"
    found = []
    with open("/proc/self/mountinfo") as mounts:
        for line in mounts:
            point = line.split()[4].replace("\\040", " ")
            if point.startswith(prefix):
                found.append(point)
    return found
