"""The pod's volumes on the simulated host, and the files the kubelet projects into them.

hostPaths live under the simulated host root (`<host>/var/run/cdi` for `/var/run/cdi`), made
when `DirectoryOrCreate` says so and kept across pods; an emptyDir is the pod's own and goes
with it; a Secret volume is a directory the kubelet fills as its AtomicWriter does: the files in
a timestamped directory, `..data` a symlink to it swapped by rename, and each key a symlink
through `..data`, so a reader sees the old set or the new one, never a mix. An optional Secret
that does not exist yet is an empty directory until it does.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from simnode.pod.launcher import Bind
from simnode.pod.manifest import Container, PodTemplate, Volume

DATA: Final = "..data"


class VolumeError(Exception):
    """A volume the pod cannot start with (a missing `Directory` hostPath); names it."""


def host_path(host_root: Path, path: str) -> Path:
    return host_root / path.lstrip("/")


class PodVolumes:
    """The volumes of one pod: `pod_dir` holds its own (emptyDirs, projections)."""

    def __init__(self, template: PodTemplate, *, host_root: Path, pod_dir: Path) -> None:
        self.template = template
        self.host_root = host_root
        self.pod_dir = pod_dir
        self._sources: dict[str, Path] = {}

    def create(self) -> None:
        """Every volume's directory; VolumeError (and nothing made) when one cannot be."""
        for volume in self.template.volumes.values():
            if volume.kind == "hostPath" and volume.host_path_type == "Directory":
                path = host_path(self.host_root, volume.host_path)
                if not path.is_dir():
                    raise VolumeError(f"volume {volume.name}: hostPath {volume.host_path}"
                                      f" ({path}) is not a directory (type Directory)")
        for volume in self.template.volumes.values():
            self._sources[volume.name] = self._make(volume)

    def _make(self, volume: Volume) -> Path:
        if volume.kind == "hostPath":
            path = host_path(self.host_root, volume.host_path)
        else:
            path = self.pod_dir / "volumes" / volume.name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def source(self, name: str) -> Path:
        return self._sources[name]

    def binds(self, container: Container) -> list[Bind]:
        return [Bind(self._sources[m.volume], m.path, read_only=m.read_only)
                for m in container.mounts]

    def remove(self) -> None:
        """The pod's own volumes go; hostPaths stay."""
        shutil.rmtree(self.pod_dir / "volumes", ignore_errors=True)


def project(directory: Path, files: Mapping[str, bytes]) -> bool:
    """Make `directory` hold exactly `files`, atomically, as the kubelet's AtomicWriter does;
    False when it already did."""
    if current(directory) == dict(files):
        return False
    stamp = directory / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.monotonic_ns()}"
    stamp.mkdir()
    for key, data in files.items():
        (stamp / key).write_bytes(data)
    old = os.readlink(directory / DATA) if (directory / DATA).is_symlink() else None
    tmp = directory / "..data_tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(stamp.name)
    tmp.rename(directory / DATA)
    for key in files:
        link = directory / key
        if not link.is_symlink():
            link.symlink_to(f"{DATA}/{key}")
    for entry in directory.iterdir():
        if not entry.name.startswith("..") and entry.name not in files:
            entry.unlink()
    if old is not None:
        shutil.rmtree(directory / old, ignore_errors=True)
    return True


def current(directory: Path) -> dict[str, bytes] | None:
    """What `project` last put in `directory`, or None."""
    data = directory / DATA
    if not data.is_dir():
        return None
    return {p.name: p.read_bytes() for p in data.iterdir()}


def clear(directory: Path) -> None:
    """The Secret is gone: an optional volume empties (the kubelet keeps the last copy of a
    required one; this node only has optional ones)."""
    for entry in directory.iterdir():
        if entry.is_symlink() or entry.is_file():
            entry.unlink()
        else:
            shutil.rmtree(entry, ignore_errors=True)
