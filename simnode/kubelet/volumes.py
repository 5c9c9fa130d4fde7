"""The pod's volumes on the simulated host, and the files the kubelet projects into them.

hostPaths live under the simulated host root (`<host>/var/run/cdi` for `/var/run/cdi`), made
when `DirectoryOrCreate` says so and kept across pods; an emptyDir is the pod's own and goes
with it; a Secret volume is a directory the kubelet fills as its AtomicWriter does: the files in
a timestamped directory, `..data` a symlink to it swapped by rename, and each key a symlink
through `..data`, so a reader sees the old set or the new one, never a mix. An optional Secret
that does not exist yet is an empty directory until it does. Each Secret is followed by a
watch (`SecretVolumes`), as the kubelet's default change detection does.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Secret

from libdisplay.kube import lightkube_client as kubelightkube
from libdisplay.kube.access import Endpoint
from libdisplay.kube.watch import Informer, LightkubeSource
from simnode.kubelet.launcher import Bind
from simnode.kubelet.manifest import Container, PodTemplate, Volume

log = logging.getLogger(__name__)

DATA: Final = "..data"
JsonObject = dict[str, Any]


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


class SecretVolumes:
    """The pod's Secret volumes kept equal to their Secrets, each Secret followed by a watch
    (the kubelet's default change detection, `configMapAndSecretChangeDetectionStrategy:
    Watch`): an idle pod costs the API server one open watch per Secret, not a GET a second.
    The watches run on an event loop of their own thread until `stop`."""

    def __init__(self, endpoint: Endpoint, namespace: str,
                 volumes: Mapping[str, Path]) -> None:
        """`volumes`: Secret name -> the volume directory it is projected into."""
        self.endpoint = endpoint
        self.namespace = namespace
        self.volumes = dict(volumes)
        self.informers: list[Informer] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._synced = threading.Event()
        self._failure: BaseException | None = None

    def start(self, *, timeout_s: float) -> None:
        """Project each Secret as it is now (VolumeError if that cannot be done within
        `timeout_s`), then keep following them."""
        if not self.volumes:
            return
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()),
                                        name="secret volumes", daemon=True)
        self._thread.start()
        if not self._synced.wait(timeout_s) or self._failure is not None:
            self.stop()
            raise VolumeError(f"Secrets {', '.join(self.volumes)} could not be read within"
                              f" {timeout_s:g} s: {self._failure or 'no answer'}")

    def stop(self) -> None:
        if self._loop is not None and self._task is not None:
            with contextlib.suppress(RuntimeError):  # the loop ended already
                self._loop.call_soon_threadsafe(self._task.cancel)
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        client = kubelightkube.async_client(self.endpoint)
        try:
            self.informers = [self._informer(client, self.namespace, name, directory)
                              for name, directory in self.volumes.items()]
            runs: list[asyncio.Future[Any]] = [asyncio.create_task(i.run())
                                               for i in self.informers]
            synced: asyncio.Future[Any] = asyncio.gather(
                *(i.synced.wait() for i in self.informers))
            done, _ = await asyncio.wait([synced, *runs], return_when=asyncio.FIRST_COMPLETED)
            if synced not in done:  # a watch failed for good before its first list
                synced.cancel()
                self._failure = next(iter(done)).exception() or RuntimeError("ended")
                self._synced.set()
                return
            for informer, directory in zip(self.informers, self.volumes.values(), strict=True):
                if not informer.cache:
                    clear(directory)  # an optional Secret that does not exist (yet)
            self._synced.set()
            await asyncio.gather(*runs)
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # the last projections stay, as the kubelet keeps them
            log.exception("following the Secret volumes failed")
            self._failure = exc
            self._synced.set()
        finally:
            await client.close()

    @staticmethod
    def _informer(client: AsyncClient, namespace: str, name: str,
                  directory: Path) -> Informer:
        def changed(kind: str, obj: JsonObject) -> None:
            if kind == "DELETED":
                clear(directory)
            elif project(directory, secret_files(obj)):
                log.info("projected Secret %s into %s", name, directory.name)

        return Informer(LightkubeSource(client, Secret, namespace=namespace, name=name),
                        on_change=changed)


def secret_files(secret: JsonObject) -> dict[str, bytes]:
    """A Secret's keys and decoded values."""
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
