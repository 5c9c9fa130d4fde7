"""Toy pods for the runner's tests (`toy_pod` in conftest.py): a template from YAML, run
with bwrap from the images' bases, reaped whatever happens."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from simnode.kubelet import manifest
from simnode.kubelet.assemble import Assembler, Machine
from simnode.kubelet.launcher import BwrapLauncher
from simnode.kubelet.runner import PodRunner
from simnode.kubelet.volumes import PodVolumes

REPO = Path(__file__).resolve().parents[2]
DECLARE_IMAGE = "ghcr.io/liken-sh/display-declare:latest"
# The image tests run only with this set to 1: .ci/run sets it after building the images.
IMAGES_ENV = "DISPLAY_OPERATOR_IMAGES"
WESTON_IMAGE = "ghcr.io/liken-sh/display-weston:latest"
NODE = "toy-node"


def toy_daemonset(spec: dict[str, Any]) -> str:
    return yaml.safe_dump({"apiVersion": "apps/v1", "kind": "DaemonSet",
                           "metadata": {"name": "toy", "namespace": "toyns"},
                           "spec": {"template": {"metadata": {"labels": {"app": "toy"}},
                                                 "spec": spec}}})


def wait_for(check: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(0.05)


class ToyPod:
    def __init__(self, root: Path, spec: dict[str, Any]) -> None:
        if shutil.which("bwrap") is None or os.getuid() != 0:
            pytest.skip("needs bwrap (build-support/install-debs) and root")
        self.root = root
        self.host = root / "host"
        self.template = manifest.from_text(toy_daemonset(spec))
        self.pod = {"metadata": {"name": "toy-abcde", "namespace": "toyns", "uid": "u-1"},
                    "spec": {"nodeName": NODE, **self.template.spec}}
        self.volumes = PodVolumes(self.template, host_root=self.host, pod_dir=root / "pod")
        trixie = os.environ.get("TRIXIE_ROOT")
        machine = Machine(repo=REPO, dist=REPO / "dist",
                          trixie_root=Path(trixie) if trixie else None,
                          pex_root=root / "pex-root")
        (root / "logs").mkdir()
        self.assembler = Assembler(self.template, machine=machine, pod=self.pod,
                                   volumes=self.volumes, service_account=None, api=None, cdi={},
                                   logs=root / "logs", scratch=root / "scratch")
        self.statuses: list[dict[str, Any]] = []
        self.runner = PodRunner(self.template, launcher=BwrapLauncher(),
                                spec_for=self.assembler.spec, images={},
                                on_status=self.statuses.append)

    def start(self, timeout: float = 60.0) -> None:
        self.volumes.create()
        self.runner.start(timeout_s=timeout)

    def container(self, name: str) -> dict[str, Any]:
        status = self.runner.status()
        for entry in status["initContainerStatuses"] + status["containerStatuses"]:
            if entry["name"] == name:
                return dict(entry)
        raise KeyError(name)

    def log(self, name: str) -> str:
        return (self.root / "logs" / f"{name}.log").read_text(errors="replace")


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def render_base() -> list[dict[str, Any]]:
    """`kubectl kustomize deploy/base`, as documents."""
    import subprocess

    done = subprocess.run(["kubectl", "kustomize", str(REPO / "deploy" / "base")],
                          capture_output=True, text=True, timeout=120, check=True)
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def stand_in_cluster(kube: Any, docs: list[dict[str, Any]], *, user: str,
                     omit: tuple[str, ...] = ()) -> str:
    """Make `kube` (a FakeKube with tls and authorize) the real cluster `up --kubeconfig`
    meets: the rendered base without its DaemonSet applied by its owner (less the objects
    named `Kind name` in `omit`), and `user` granted `remote.USER_RULES`; `user`'s token."""
    from simnode.cluster.preflight import without_daemonsets
    from simnode.cluster.remote import USER_RULES

    for obj in without_daemonsets(docs):
        if f"{obj['kind']} {obj['metadata']['name']}" not in omit:
            kube.create(obj)
    rbac = "rbac.authorization.k8s.io"
    kube.create({"apiVersion": f"{rbac}/v1", "kind": "ClusterRole",
                 "metadata": {"name": "simnode-up"}, "rules": list(USER_RULES)})
    kube.create({"apiVersion": f"{rbac}/v1", "kind": "ClusterRoleBinding",
                 "metadata": {"name": "simnode-up"},
                 "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": "simnode-up"},
                 "subjects": [{"apiGroup": rbac, "kind": "User", "name": user}]})
    return str(kube.user_token(user))


def user_kubeconfig(path: Path, *, server: str, ca_pem: bytes | None, token: str) -> Path:
    """A kubeconfig whose context `sim` reaches `server` with `token` (CA data if given); its
    current context is a dead server, so whatever reads the current context instead fails."""
    import base64

    cluster: dict[str, Any] = {"server": server}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": "dead",
        "contexts": [{"name": "dead", "context": {"cluster": "dead", "user": "u"}},
                     {"name": "sim", "context": {"cluster": "sim", "user": "u"}}],
        "clusters": [{"name": "dead", "cluster": {"server": "https://127.0.0.1:1"}},
                     {"name": "sim", "cluster": cluster}],
        "users": [{"name": "u", "user": {"token": token}}],
    }
    path.write_text(yaml.safe_dump(doc))
    return path
