"""The rendered base's pod on a simulated node (`simnode.node.pod_node`), as the tests that run
the whole pod against the fake API start it: the manifests `kubectl kustomize` renders, the
binaries of this build, and the trixie root for weston.

The node's containers listen on the manifest's ports on the host's network; the pod runner's
lock (/tmp/simnode-pod-ports.lock) makes a second node on this machine wait for the first.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from simnode.node import pod_node

REPO = Path.cwd()
NODE = "sim-node-1"


def rendered(overlay: str = "base") -> str:
    """`kubectl kustomize deploy/<overlay>`."""
    return subprocess.run(["kubectl", "kustomize", str(REPO / "deploy" / overlay)], check=True,
                          capture_output=True, text=True, timeout=120).stdout


def dist() -> Path:
    """Where the PEXes are: the sandbox's package dirs under pants, else ./dist."""
    sandboxed = REPO / "declare" / "declare.pex"
    return REPO if sandboxed.is_file() else REPO / "dist"


def simulated_node(manifests: str) -> Iterator[pod_node.PodNode]:
    """A started node running `manifests`' pod, stopped and its state removed when the
    generator closes; skips where the node cannot run (not root, no bwrap or trixie root)."""
    trixie = os.environ.get("TRIXIE_ROOT")
    if os.getuid() != 0 or shutil.which("bwrap") is None or not trixie:
        pytest.skip("needs root, bwrap and TRIXIE_ROOT (./pants test)")
    # Short: the kubelet stand-in dials the plugin's sockets under it (AF_UNIX's 108 bytes).
    state = Path(tempfile.mkdtemp(prefix="pod-", dir="/tmp"))
    config = pod_node.NodeConfig(state=state, repo=REPO, dist=dist(), manifests=manifests,
                                 trixie_root=Path(trixie), node_name=NODE)
    node = pod_node.PodNode(config)
    try:
        node.start()
        yield node
    finally:
        node.stop()
        shutil.rmtree(state, ignore_errors=True)
