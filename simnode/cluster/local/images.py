"""The images the local cluster's containerd runs, put in as an owner's node would pull them:
the pod's images that deploy/images/build.sh built (podman), at the manifests' own names and
tags, and the pods' sandbox image, kubernetes' own pause built from the module's source. No
registry is reachable, so each goes from podman's store into containerd's (`ctr images
import`), and only when containerd does not hold that image already (same config digest).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

from simnode.cluster.local import components
from simnode.cluster.local.cluster import LocalClusterError
from simnode.cluster.local.components import Paths

log = logging.getLogger(__name__)

NAMESPACE: Final = "k8s.io"
PAUSE_SOURCE: Final = Path("k8s.io") / f"kubernetes@{components.K8S_VERSION}" / "build" / \
    "pause" / "linux" / "pause.c"
GO_MODULES: Final = Path("/var/cache/display-operator/go/mod")
PODMAN_CONF: Final = Path("deploy") / "images" / "podman"
IMAGES_BUILD: Final = Path("deploy") / "images" / "build.sh"


def podman_env(repo: Path) -> dict[str, str]:
    """podman as build.sh runs it on these machines (its store, runc, cgroupfs)."""
    conf = repo / PODMAN_CONF
    return {**os.environ, "CONTAINERS_CONF": str(conf / "containers.conf"),
            "CONTAINERS_STORAGE_CONF": str(conf / "storage.conf")}


def _run(argv: list[str], *, env: Mapping[str, str] | None = None,
         timeout: float = 600) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LocalClusterError(f"{argv[0]} {argv[1]}: {exc}") from exc
    if done.returncode != 0:
        raise LocalClusterError(f"{' '.join(argv)} failed: {done.stderr.strip()}")
    return done.stdout


def ensure_pause(repo: Path) -> str:
    """The sandbox image in podman's store, built once from pause.c (static, gcc)."""
    env = podman_env(repo)
    if subprocess.run(["podman", "image", "exists", components.PAUSE_IMAGE], env=env,
                      capture_output=True, check=False).returncode == 0:
        return components.PAUSE_IMAGE
    source = GO_MODULES / PAUSE_SOURCE
    with tempfile.TemporaryDirectory(prefix="simnode-pause-") as work:
        _run(["gcc", "-Os", "-static", "-Wall", "-Werror",
              f'-DVERSION="{components.PAUSE_IMAGE.rsplit(":", 1)[1]}"',
              "-o", f"{work}/pause", str(source)])
        Path(work, "Containerfile").write_text(
            'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n')
        _run(["podman", "build", "-q", "-t", components.PAUSE_IMAGE, work], env=env)
    return components.PAUSE_IMAGE


def _podman_ids(repo: Path, refs: Iterable[str]) -> dict[str, str]:
    out = {}
    for ref in refs:
        try:
            out[ref] = _run(["podman", "image", "inspect", "--format", "{{.Id}}", ref],
                            env=podman_env(repo)).strip()
        except LocalClusterError as exc:
            raise LocalClusterError(f"{ref} is not built: run {repo / IMAGES_BUILD} first"
                                    ) from exc
    return out


def _containerd_ids(paths: Paths) -> dict[str, str]:
    """ref -> config digest (hex) of every image containerd's CRI knows."""
    listing = json.loads(_run([paths.exe("crictl"), "--runtime-endpoint",
                               f"unix://{components.CONTAINERD_SOCKET}", "images", "-o",
                               "json"]))
    out = {}
    for image in listing.get("images", []):
        for tag in image.get("repoTags") or []:
            out[tag] = image["id"].removeprefix("sha256:")
    return out


def load(paths: Paths, repo: Path, refs: Mapping[str, str]) -> list[str]:
    """Each `name -> source` of `refs` into containerd as `name`, where it differs; the names
    imported. `source` is an image in podman's store (build.sh's tag); the name is the one a
    manifest uses."""
    env = podman_env(repo)
    wanted = _podman_ids(repo, refs.values())
    have = _containerd_ids(paths)
    stale = [name for name, source in refs.items() if have.get(name) != wanted[source]]
    if not stale:
        return []
    with tempfile.TemporaryDirectory(prefix="simnode-images-", dir=paths.state) as work:
        archive = f"{work}/images.tar"
        for name in stale:
            if name != refs[name]:
                _run(["podman", "tag", refs[name], name], env=env)
        _run(["podman", "save", "-m", "--format", "docker-archive", "-o", archive, *stale],
             env=env)
        _run([paths.exe("ctr"), "--address", str(components.CONTAINERD_SOCKET), "-n",
              NAMESPACE, "images", "import", "--snapshotter", "native", "--platform",
              "linux/amd64", archive])
    log.info("local cluster: imported %s", ", ".join(stale))
    return stale
