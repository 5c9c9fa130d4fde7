"""Starting one container: its own mount namespace, the image's filesystem, the pod's mounts.

`Launcher` is the seam between the runner and the container runtime: `BwrapLauncher` runs the
container with bubblewrap from the host's files (the images' bases are the host's bookworm
/usr, or the trixie root over it for the compositor's image); `simnode.kubelet.podman`'s
`PodmanLauncher` runs the same `LaunchSpec` from the built images.

Inside: the image's /usr and /etc read-only, /bin, /lib, /lib64 and /sbin as merged-usr links,
a fresh /proc, a minimal /dev, private /tmp and /run, and then each `Bind` at its path, parents
first. The process tree keeps the host's PID namespace (see `simnode.kubelet.runner`) and network
namespace. `capabilities: drop: ["ALL"]` is bwrap's `--cap-drop ALL` as root: the process runs
as uid 0 with empty effective, permitted and ambient sets, and no_new_privs (bwrap always sets
it; `allowPrivilegeEscalation: false`).

A trixie-based image has weston 14 and its libraries from the trixie root, over the host's /usr
for what trixie lacks (python3.11, which the PEXes are built for): an overlayfs mounted in a
private mount namespace of its own (`unshare --mount`, then exec bwrap, no extra process), so
nothing is mounted on the host and the mount goes with the container. bwrap 0.8 (bookworm)
has no overlay option of its own, and build-support/trixie-run cannot work inside the container
(its `unshare --mount` needs the CAP_SYS_ADMIN the container dropped).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from libdisplay.processes import Process, ProcessError, start

INFO_TIMEOUT_S: Final = 30.0
HOST_USR: Final = Path("/usr")
HOST_ETC: Final = Path("/etc")
_MERGED: Final = ("bin", "lib", "lib64", "sbin")


class LaunchError(Exception):
    """The container could not be started; the message names the container and why."""


@dataclass(frozen=True, slots=True)
class Bind:
    source: Path
    dest: str
    read_only: bool = True


@dataclass(frozen=True, slots=True)
class Rootfs:
    """The image's /usr: `usr_layers` (uppermost first) over the host's /usr, and its /etc."""

    usr_layers: tuple[Path, ...] = ()
    etc: Path = HOST_ETC


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    binds: tuple[Bind, ...]
    log_path: Path
    scratch: Path
    """A directory of the runner's for this container (the overlay's mount point)."""
    rootfs: Rootfs = field(default_factory=Rootfs)
    drop_all_capabilities: bool = True
    # What a launcher that runs the built images needs (simnode.kubelet.podman); bwrap lays out
    # the image's base and runs `argv` instead.
    image: str = ""
    """The image as the manifest names it."""
    command: tuple[str, ...] | None = None
    """The manifest's `command` (replaces the image's ENTRYPOINT), None to keep it."""
    args: tuple[str, ...] | None = None
    """The manifest's `args` (replace the image's CMD), None to keep it."""
    memory_limit: int | None = None
    pod: str = ""
    """The pod the container belongs to (its sandbox), "" for none."""


class Launched(Protocol):
    @property
    def pid(self) -> int:
        """The container's main process (what the runtime signals)."""
        ...

    def exited(self) -> bool: ...

    def reap(self) -> int:
        """The container's exit code once it has exited (128+N for signal N)."""
        ...

    def send_signal(self, sig: signal.Signals) -> None: ...

    def kill_and_reap(self) -> int: ...

    @property
    def oom_killed(self) -> bool:
        """After `reap`: the runtime's memory limit ended it (the runtime's OOMKilled)."""
        ...


class Launcher(Protocol):
    def launch(self, spec: LaunchSpec) -> Launched: ...


class BwrapContainer:
    """A container bwrap runs: bwrap's process (reaped here) and the main process inside."""

    def __init__(self, process: Process, child_pid: int) -> None:
        self.process = process
        self._child = child_pid

    @property
    def pid(self) -> int:
        return self._child

    @property
    def oom_killed(self) -> bool:
        # No cgroup per container: the runner's RSS check is bwrap's memory limit.
        return False

    def exited(self) -> bool:
        return self.process.exited()

    def reap(self) -> int:
        # bwrap exits with its child's status, 128+N when a signal ended it.
        return _exit_code(self.process.wait(timeout=INFO_TIMEOUT_S))

    def send_signal(self, sig: signal.Signals) -> None:
        if not self.process.exited():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._child, sig)

    def kill_and_reap(self) -> int:
        """SIGKILL the main process; bwrap then exits with its status."""
        self.send_signal(signal.SIGKILL)
        try:
            return self.reap()
        except ProcessError:
            return _exit_code(self.process.stop(grace=0.0).returncode)


def _exit_code(returncode: int) -> int:
    """As a runtime reports it: 128+N for a process that signal N ended."""
    return 128 - returncode if returncode < 0 else returncode


class BwrapLauncher:
    def __init__(self) -> None:
        missing = [t for t in ("bwrap", "unshare", "mount") if shutil.which(t) is None]
        if missing:
            raise LaunchError(f"not found on PATH: {', '.join(missing)} (bwrap is the Debian"
                              " package bubblewrap: build-support/install-debs)")

    def launch(self, spec: LaunchSpec) -> BwrapContainer:
        spec.scratch.mkdir(parents=True, exist_ok=True)
        read_fd, write_fd = os.pipe()
        try:
            argv = bwrap_argv(spec, info_fd=write_fd)
            process = start(argv, log_path=spec.log_path, env=dict(spec.env),
                            pass_fds=(write_fd,))
        except (OSError, ProcessError) as exc:
            os.close(read_fd)
            raise LaunchError(f"container {spec.name}: cannot start bwrap: {exc}") from exc
        finally:
            os.close(write_fd)
        try:
            child = _child_pid(read_fd)
        except LaunchError as exc:
            process.stop(grace=1.0)
            raise LaunchError(f"container {spec.name}: {exc}; see {spec.log_path}:\n"
                              f"{process.log_tail()}") from exc
        return BwrapContainer(process, child)


def bwrap_argv(spec: LaunchSpec, *, info_fd: int) -> list[str]:
    """The whole command line: bwrap's, behind the overlay's mount namespace when needed."""
    usr = HOST_USR
    if spec.rootfs.usr_layers:
        usr = spec.scratch / "usr"
        usr.mkdir(exist_ok=True)
    args = [_tool("bwrap"), "--die-with-parent", "--info-fd", str(info_fd),
            "--ro-bind", str(usr), "/usr"]
    for name in _MERGED:
        args += ["--symlink", f"usr/{name}", f"/{name}"]
    args += _etc(spec)
    args += ["--proc", "/proc", "--dev", "/dev",
             "--tmpfs", "/tmp", "--tmpfs", "/run", "--dir", "/var", "--symlink", "../run",
             "/var/run", "--dir", "/root"]
    for bind in sorted(spec.binds, key=lambda b: b.dest.count("/")):
        args += ["--ro-bind" if bind.read_only else "--bind", str(bind.source), bind.dest]
    if spec.drop_all_capabilities:
        args += ["--cap-drop", "ALL"]
    args += ["--chdir", "/", "--", *spec.argv]
    if not spec.rootfs.usr_layers:
        return args
    lower = ":".join(str(p) for p in (*spec.rootfs.usr_layers, HOST_USR))
    mount = f"{_tool('mount')} -t overlay overlay -o ro,lowerdir={lower} {usr}"
    return [_tool("unshare"), "--mount", "--propagation", "private", "--",
            "/bin/sh", "-c", f'{mount} && exec "$@"', "sh", *args]


def _etc(spec: LaunchSpec) -> list[str]:
    """The image's /etc, entry by entry on a tmpfs (read-only each), so that a mount under
    /etc (/etc/weston) has a mount point to be made on, as a runtime's writable layer gives."""
    taken = {b.dest.split("/")[2] for b in spec.binds if b.dest.startswith("/etc/")}
    args = ["--tmpfs", "/etc"]
    for entry in sorted(spec.rootfs.etc.iterdir()):
        if entry.name in taken:
            continue
        if entry.is_symlink():
            args += ["--symlink", os.readlink(entry), f"/etc/{entry.name}"]
        else:
            args += ["--ro-bind", str(entry), f"/etc/{entry.name}"]
    return args


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise LaunchError(f"{name} is not on PATH")
    return path


def _child_pid(read_fd: int) -> int:
    """The pid of bwrap's child, from the JSON bwrap writes on --info-fd once it has forked."""
    with os.fdopen(read_fd, "rb") as info:
        readable, _, _ = select.select([info], [], [], INFO_TIMEOUT_S)
        data = info.read() if readable else b""
    try:
        return int(json.loads(data)["child-pid"])
    except (ValueError, KeyError, TypeError) as exc:
        raise LaunchError(f"bwrap did not report its child ({data[:200]!r})") from exc
