"""What each component of the local cluster is started with: its command line and the files it
reads, as kubernetes' hack/local-up-cluster.sh configures a one-machine cluster, adapted to
these machines (cgroup v1 without systemd, no overlay mounts, no registry to pull from).

The addresses: the API server listens on every address of the host at `API_PORT` and
advertises the CNI bridge's own address, so a pod reaches it through the `kubernetes`
Service (kube-proxy's DNAT) at an address of this machine; etcd and the components' own ports
stay on loopback. Nothing here routes a pod's traffic off the machine (`network.guard`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from libdisplay import fsutil
from simnode.cluster.local.pki import Pki

K8S_VERSION: Final = "v1.37.2"
ETCD_CLIENT: Final = "http://127.0.0.1:2379"
ETCD_PEER: Final = "http://127.0.0.1:2380"
API_PORT: Final = 6443
BRIDGE: Final = "cni0"
# Not 10.88.0.0/16, containerd's and podman's default, which podman's cni-podman0 may hold.
POD_CIDR: Final = "10.244.0.0/16"
BRIDGE_IP: Final = "10.244.0.1"
SERVICE_CIDR: Final = "10.0.0.0/24"
CONTAINERD_SOCKET: Final = Path("/run/containerd/containerd.sock")
KUBELET_ROOT: Final = Path("/var/lib/kubelet")
KUBELET_HEALTHZ: Final = "http://127.0.0.1:10248/healthz"
PROXY_HEALTHZ: Final = "http://127.0.0.1:10256/healthz"
CONTROLLER_MANAGER_HEALTHZ: Final = "https://127.0.0.1:10257/healthz"
SCHEDULER_HEALTHZ: Final = "https://127.0.0.1:10259/healthz"
# The sandbox image containerd starts each pod with, built here (`images.pause`): no
# registry is reachable for registry.k8s.io/pause.
PAUSE_IMAGE: Final = "localhost/simnode/pause:3.10"
SERVICE_ACCOUNT_ISSUER: Final = "https://kubernetes.default.svc.cluster.local"


@dataclass(frozen=True, slots=True)
class Paths:
    """Where the cluster keeps its files: `state` (new each start), `cache` (kept: containerd's
    images), `bin` (the built components)."""

    state: Path
    cache: Path
    bin: Path

    @property
    def pki_dir(self) -> Path:
        return self.state / "pki"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    def kubeconfig(self, who: str) -> Path:
        return self.state / "kubeconfigs" / f"{who}.kubeconfig"

    @property
    def audit_log(self) -> Path:
        """The API server's audit log: one JSON event a request (Metadata level)."""
        return self.logs / "audit.jsonl"

    @property
    def cni_conf_dir(self) -> Path:
        return self.state / "cni" / "net.d"

    @property
    def registry_hosts(self) -> Path:
        """containerd's per-registry host configs (<host>/hosts.toml): none unless a test
        puts one there; set explicitly, as containerd's default (two dirs joined by ':') is
        read as one dir by its transfer service's pulls."""
        return self.state / "certs.d"

    @property
    def containerd_root(self) -> Path:
        return self.cache / "containerd"

    def exe(self, name: str) -> str:
        return str(self.bin / name)


def api_url(host: str = "127.0.0.1") -> str:
    return f"https://{host}:{API_PORT}"


def write_kubeconfig(path: Path, *, pki: Pki, who: str, server: str) -> Path:
    """A kubeconfig for the identity `who` of `pki` (its certificate and key by path)."""
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "local",
        "clusters": [{"name": "local", "cluster": {"server": server,
                                                   "certificate-authority": str(pki.ca)}}],
        "users": [{"name": who, "user": {"client-certificate": str(pki.cert(who)),
                                         "client-key": str(pki.key(who))}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": who}}],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fsutil.atomic_write(path, json.dumps(config, indent=2) + "\n")
    return path


def etcd(paths: Paths, *, client: str = ETCD_CLIENT, peer: str = ETCD_PEER) -> list[str]:
    """etcd on `client` and `peer` (URLs); a control plane of its own beside the local
    cluster (`tests.support.realapi`) passes ports of its own."""
    return [paths.exe("etcd"), "--name", "local", "--data-dir", str(paths.state / "etcd"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"local={peer}",
            "--log-level", "warn", "--quota-backend-bytes", str(2 << 30)]


def apiserver(paths: Paths, pki: Pki, *, etcd: str = ETCD_CLIENT, port: int = API_PORT,
              bind: str = "0.0.0.0", advertise: str = BRIDGE_IP,
              extra: Sequence[str] = ()) -> list[str]:
    """kube-apiserver on `bind`:`port` with etcd at `etcd`; `extra` flags go last (a later
    flag wins over an earlier one of the same name)."""
    return [
        paths.exe("kube-apiserver"),
        f"--etcd-servers={etcd}",
        f"--bind-address={bind}", f"--secure-port={port}",
        f"--advertise-address={advertise}",
        f"--tls-cert-file={pki.cert('apiserver')}",
        f"--tls-private-key-file={pki.key('apiserver')}",
        f"--client-ca-file={pki.ca}",
        f"--kubelet-client-certificate={pki.cert('apiserver-kubelet-client')}",
        f"--kubelet-client-key={pki.key('apiserver-kubelet-client')}",
        f"--kubelet-certificate-authority={pki.ca}",
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={pki.service_account_pub}",
        f"--service-account-signing-key-file={pki.service_account_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        "--allow-privileged=true",
        "--profiling=false",
        # Every request's who, what and answer, so a denial anywhere can be found.
        f"--audit-policy-file={audit_policy(paths)}",
        f"--audit-log-path={paths.audit_log}", "--audit-log-format=json",
        *extra,
    ]


def audit_policy(paths: Paths) -> Path:
    policy = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy",
              "omitStages": ["RequestReceived"], "rules": [{"level": "Metadata"}]}
    path = paths.state / "audit-policy.yaml"
    fsutil.atomic_write(path, json.dumps(policy) + "\n")
    return path


def controller_manager(paths: Paths, pki: Pki) -> list[str]:
    config = str(paths.kubeconfig("controller-manager"))
    return [
        paths.exe("kube-controller-manager"),
        f"--kubeconfig={config}", f"--authentication-kubeconfig={config}",
        f"--authorization-kubeconfig={config}",
        "--bind-address=127.0.0.1", "--secure-port=10257",
        "--controllers=*", "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki.service_account_key}",
        f"--root-ca-file={pki.ca}",
        f"--cluster-signing-cert-file={pki.ca}", f"--cluster-signing-key-file={pki.key('ca')}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--leader-elect=false", "--profiling=false",
    ]


def scheduler(paths: Paths) -> list[str]:
    config = str(paths.kubeconfig("scheduler"))
    return [paths.exe("kube-scheduler"), f"--kubeconfig={config}",
            f"--authentication-kubeconfig={config}", f"--authorization-kubeconfig={config}",
            "--bind-address=127.0.0.1", "--secure-port=10259", "--leader-elect=false",
            "--profiling=false"]


def containerd_config(paths: Paths) -> Path:
    """containerd 2's config (version 3): CDI from /etc/cdi and /var/run/cdi, runc as built,
    the native snapshotter (these machines refuse overlay mounts), our CNI bridge."""
    cri = "plugins.'io.containerd.cri.v1.runtime'"
    text = f"""version = 3
root = "{paths.containerd_root}"
state = "/run/containerd"

[grpc]
  address = "{CONTAINERD_SOCKET}"

[{cri}]
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  # The kubelet asks for a critical pod's oom_score_adj below containerd's own, which needs
  # CAP_SYS_RESOURCE, which these machines withhold: keep it at containerd's instead.
  restrict_oom_score_adj = true

[{cri}.containerd]
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  BinaryName = "{paths.exe('runc')}"
  SystemdCgroup = false

[{cri}.cni]
  bin_dirs = ["{paths.bin}"]
  conf_dir = "{paths.cni_conf_dir}"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "native"

[plugins.'io.containerd.cri.v1.images'.registry]
  config_path = "{paths.registry_hosts}"

# `ctr images import` unpacks through the transfer service, which knows only overlayfs unless
# told: without this it answers "no unpack platforms defined".
[[plugins.'io.containerd.transfer.v1.local'.unpack_config]]
  platform = "linux/amd64"
  snapshotter = "native"

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "{PAUSE_IMAGE}"
"""
    path = paths.state / "containerd.toml"
    fsutil.atomic_write(path, text)
    return path


def containerd(paths: Paths) -> list[str]:
    return [paths.exe("containerd"), "--config", str(containerd_config(paths))]


def cni_config(paths: Paths) -> Path:
    """A bridge on `BRIDGE` with host-local addresses, as containerd's own example; no
    masquerade: nothing a pod here sends leaves the machine."""
    conflist: dict[str, Any] = {
        "cniVersion": "1.0.0", "name": "simnode",
        "plugins": [
            {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False,
             "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR,
                                                         "gateway": BRIDGE_IP}]],
                      "routes": [{"dst": "0.0.0.0/0"}],
                      "dataDir": str(paths.state / "cni" / "ipam")}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    path = paths.cni_conf_dir / "10-simnode.conflist"
    path.parent.mkdir(parents=True, exist_ok=True)
    fsutil.atomic_write(path, json.dumps(conflist, indent=2) + "\n")
    return path


def kubelet_config(paths: Paths, pki: Pki) -> Path:
    """The kubelet's configuration for these machines: cgroup v1 (allowed by failCgroupV1:
    false until 1.38) through cgroupfs, no per-QoS hierarchy or allocatable enforcement
    (no systemd to delegate to), no swap check, evictions only at the edge of the disk."""
    config: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(pki.ca)}},
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(pki.cert("kubelet-serving")),
        "tlsPrivateKeyFile": str(pki.key("kubelet-serving")),
        "containerRuntimeEndpoint": f"unix://{CONTAINERD_SOCKET}",
        "cgroupDriver": "cgroupfs", "cgroupsPerQOS": False, "enforceNodeAllocatable": [],
        "failCgroupV1": False, "failSwapOn": False,
        "healthzBindAddress": "127.0.0.1", "healthzPort": 10248,
        "readOnlyPort": 0, "clusterDNS": [], "resolvConf": "/etc/resolv.conf",
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "localStorageCapacityIsolation": False,
        "serializeImagePulls": False,
    }
    path = paths.state / "kubelet.yaml"
    fsutil.atomic_write(path, json.dumps(config, indent=2) + "\n")
    return path


def kubelet(paths: Paths, pki: Pki, *, node: str) -> list[str]:
    return [paths.exe("kubelet"), f"--config={kubelet_config(paths, pki)}",
            f"--kubeconfig={paths.kubeconfig('kubelet')}", f"--hostname-override={node}",
            f"--node-ip={BRIDGE_IP}", f"--root-dir={KUBELET_ROOT}",
            "--node-labels=display.liken.sh/simulated=true", "--v=1"]


def proxy_config(paths: Paths, *, node: str) -> Path:
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(paths.kubeconfig("kube-proxy"))},
        "hostnameOverride": node, "mode": "iptables", "clusterCIDR": POD_CIDR,
        "bindAddress": "127.0.0.1", "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        # No conntrack sysctls to set in a sandbox that may not let us.
        "conntrack": {"maxPerCore": 0, "min": 0},
    }
    path = paths.state / "kube-proxy.yaml"
    fsutil.atomic_write(path, json.dumps(config, indent=2) + "\n")
    return path


def proxy(paths: Paths, *, node: str) -> list[str]:
    return [paths.exe("kube-proxy"), f"--config={proxy_config(paths, node=node)}"]
