"""Containers from the built images (`deploy/images/build.sh`), run by podman in a pod.

`PodmanLauncher` takes the same `LaunchSpec` as `BwrapLauncher`, but runs the spec's image with
its own ENTRYPOINT (the manifest's `command` replaces it, its `args` the CMD), rather than the
host's files with the PEX standing in for the entrypoint. One podman pod per `spec.pod`, made
with `--share pid,net` (the pod's `shareProcessNamespace: true`; catatonit is its pid 1 and
reaps orphans); each container joins it with `--cap-drop=ALL` (when the manifest drops ALL),
`--security-opt no-new-privileges`, no privilege, the spec's env and binds (readOnly kept),
and `--memory` (swap off) from its limit. The kernel is then the OOM killer; podman's
`State.OOMKilled` misses it on these hybrid-cgroup VMs, so `OomWatch` sees it happen (the
runner's RSS check still runs and rarely fires first).

Namespaces of the host: the network (`--network host` on the pod's infra), as the bwrap runner
has it: podman's bridge network makes a bridge and iptables chains on the host and is off in
deploy/images/podman (docs/images.md), and the fake API, the kubelet stand-in's probes
and the capture server's port are all on the host's loopback. And IPC, for Xvfb's MIT-SHM.

Image tags: the manifest says `:latest`, which a registry would serve; here the images are
the ones build.sh built, at its tag (libdisplay's version), in the repo's podman storage.

A container is created once per pod and started again on each restart: vfs (the only storage
driver these VMs run) copies the whole image for every container it creates (5-75 s for the
600 MB weston and capture images on a busy 2-core machine), which no restart backoff absorbs.

Clean-up. The containers are conmon's children, not the test's, so nothing dies with the test:
`close()` (also a finalizer, also at exit) removes every pod and container this launcher made.
A SIGKILLed test runs neither; for that, each pod has a reaper process in a session of its own
that waits for the launcher's end of a pipe to close (as it does when its process dies) and
then removes the pod. What a reaper itself cannot remove (the machine lost power, the reaper
was killed) carries the label `OWNER_LABEL` (the owner's pid and start time) and is removed
by the next launcher's `sweep()` at its start once that owner is gone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import shutil
import signal
import subprocess
import threading
import time
import uuid
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from simnode.kubelet.assemble import PEX_ROOT_IN_CONTAINER
from simnode.kubelet.images import ImageError, find, load
from simnode.kubelet.launcher import Bind, LaunchError, LaunchSpec

log = logging.getLogger(__name__)

REPO: Final = Path(__file__).resolve().parents[2]
OWNER_LABEL: Final = "display.liken.sh/simnode-owner"
CALL_TIMEOUT_S: Final = 120.0
CREATE_TIMEOUT_S: Final = 600.0
"""vfs copies the image on create; on a busy machine that has taken over a minute."""
REMOVE_TIMEOUT_S: Final = 600.0
EXIT_WAIT_S: Final = 60.0
"""From the main process's exit to podman recording it (conmon's exit file)."""


class PodmanError(LaunchError):
    """A podman call failed or timed out; the message has the command and podman's stderr."""


def podman_env(repo: Path = REPO) -> dict[str, str]:
    """The environment build.sh gives podman: the repo's settings unless the caller's own."""
    conf = repo / "deploy" / "images" / "podman"
    return {"CONTAINERS_CONF": str(conf / "containers.conf"),
            "CONTAINERS_STORAGE_CONF": str(conf / "storage.conf"), **os.environ}


def podman(*args: str, env: Mapping[str, str], timeout: float = CALL_TIMEOUT_S,
           check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(["podman", *args], capture_output=True, text=True, env=dict(env),
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise PodmanError(f"podman {' '.join(args[:3])}...: no answer in {timeout:g} s") from exc
    if check and done.returncode != 0:
        raise PodmanError(f"podman {' '.join(args)}: exit {done.returncode}:"
                          f" {done.stderr.strip()[-2000:]}")
    return done


def image_tag(repo: Path = REPO) -> str:
    """build.sh's default tag: libdisplay's `__version__`."""
    for line in (repo / "libdisplay" / "__init__.py").read_text().splitlines():
        if line.startswith("__version__ = "):
            return line.split("=", 1)[1].strip().strip('"')
    raise LaunchError(f"no __version__ in {repo / 'libdisplay' / '__init__.py'}")


def built_ref(image: str, tag: str) -> str:
    """`image` (with or without a tag) at the build's `tag`."""
    last = image.rsplit("/", 1)[-1]
    ref = image.rsplit(":", 1)[0] if ":" in last else image
    return f"{ref}:{tag}"


def missing_images(images: list[str], *, repo: Path = REPO) -> list[str]:
    """Which of `images` (at the build's tag) podman's storage lacks; all of them without
    podman."""
    if shutil.which("podman") is None:
        return images
    env, tag = podman_env(repo), image_tag(repo)
    return [i for i in images if podman("image", "exists", built_ref(i, tag), env=env,
                                        check=False).returncode != 0]


def owner_token(pid: int | None = None) -> str:
    """`<pid>:<start time>`: names this process and no later one that reuses its pid."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{_start_time(pid)}"


def _start_time(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def owner_alive(token: str) -> bool:
    pid, _, start = token.partition(":")
    return pid.isdecimal() and bool(start) and _start_time(int(pid)) == start


def mount_arg(bind: Bind) -> str:
    for path in (str(bind.source), bind.dest):
        if "," in path:
            raise LaunchError(f"bind {bind.source} -> {bind.dest}: podman's --mount cannot"
                              " take a path with a comma")
    return (f"type=bind,source={bind.source},destination={bind.dest}"
            + (",ro=true" if bind.read_only else ""))


def memory_cgroup() -> bool:
    """Whether the kernel limits a container's memory here: cgroup v1's memory controller
    (these VMs: hybrid), or v2's when it is the only hierarchy."""
    if Path("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists():
        return True
    controllers = Path("/sys/fs/cgroup/cgroup.controllers")
    return controllers.exists() and "memory" in controllers.read_text().split()


@dataclass(frozen=True, slots=True)
class _Created:
    name: str
    spec: LaunchSpec


class OomWatch:
    """Whether the kernel's OOM killer fired in a process's memory cgroup (v1), seen when it
    fires: podman's `State.OOMKilled` stays false on these hybrid-cgroup VMs (conmon watches
    the v2 hierarchy, which has no memory controller here), and the container's cgroup is
    removed soon after its process dies, taking its `oom_kill` count with it."""

    def __init__(self, pid: int, pidfd: int) -> None:
        self.fired = False
        self._pidfd = pidfd
        self._event = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        try:
            group = Path("/sys/fs/cgroup/memory") / _memory_cgroup(pid).lstrip("/")
            self._control = os.open(group / "memory.oom_control", os.O_RDONLY | os.O_CLOEXEC)
            (group / "cgroup.event_control").write_text(f"{self._event} {self._control}")
        except OSError:
            os.close(self._event)
            raise
        self._thread = threading.Thread(target=self._watch, name=f"oom watch {pid}",
                                        daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        # The event fires when the OOM killer does (before the process dies) and again when
        # the cgroup is removed (after): the count read at the first wake-up tells them apart.
        while True:
            readable, _, _ = select.select([self._event, self._pidfd], [], [])
            if self._event in readable:
                with contextlib.suppress(BlockingIOError):
                    os.eventfd_read(self._event)
                self.fired = self.fired or self._kills() > 0
            if self._pidfd in readable:
                self.fired = self.fired or self._kills() > 0
                return

    def _kills(self) -> int:
        try:
            text = os.pread(self._control, 4096, 0).decode()
        except OSError:  # the cgroup is gone
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def close(self, timeout: float) -> bool:
        """Once the process has died: whether the OOM killer ended it."""
        self._thread.join(timeout)
        if not self._thread.is_alive():
            os.close(self._event)
            os.close(self._control)
        return self.fired


def _memory_cgroup(pid: int) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return path
    raise OSError(f"pid {pid} is in no v1 memory cgroup")


class PodmanContainer:
    """One run of a podman container: its main process by host pid, watched through a pidfd
    (it is conmon's child, not ours)."""

    def __init__(self, launcher: PodmanLauncher, name: str, pid: int, *, remove: bool,
                 watch_oom: bool) -> None:
        self._launcher = launcher
        self.name = name
        self._pid = pid
        self._remove = remove
        self._fd: int | None = None
        self._code: int | None = None
        self._oom = False
        self._watch: OomWatch | None = None
        if pid > 0:
            with contextlib.suppress(ProcessLookupError):
                self._fd = os.pidfd_open(pid)
        if self._fd is not None and watch_oom:
            try:
                self._watch = OomWatch(pid, self._fd)
            except OSError as exc:
                log.warning("container %s: no OOM watch (%s): the runner's RSS check"
                            " stands in", name, exc)

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def oom_killed(self) -> bool:
        return self._oom

    def exited(self) -> bool:
        if self._code is not None or self._fd is None:
            return True
        readable, _, _ = select.select([self._fd], [], [], 0)
        return bool(readable)

    def reap(self) -> int:
        """The exit code podman recorded (128+N after signal N), and whether the kernel's
        OOM killer ended it; the pidfd closed; a container of no pod removed."""
        if self._code is not None:
            return self._code
        env = self._launcher.env
        if self._fd is not None:
            readable, _, _ = select.select([self._fd], [], [], EXIT_WAIT_S)
            if not readable:
                raise PodmanError(f"container {self.name}: still running after"
                                  f" {EXIT_WAIT_S:g} s")
        podman("wait", self.name, env=env, timeout=EXIT_WAIT_S)
        state = _inspect(self.name, env)["State"]
        self._code = int(state["ExitCode"])
        self._oom = bool(state.get("OOMKilled"))
        if self._watch is not None:
            self._oom = self._watch.close(EXIT_WAIT_S) or self._oom
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._remove:
            self._launcher.remove_container(self.name)
        return self._code

    def send_signal(self, sig: signal.Signals) -> None:
        # The host pid, signalled as the runtime would (`podman kill` is a process start
        # slower); the pidfd makes sure it is still our process.
        if self._fd is not None and not self.exited():
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._fd, sig)

    def kill_and_reap(self) -> int:
        self.send_signal(signal.SIGKILL)
        return self.reap()


class _Pod:
    """A podman pod and the reaper that removes it if this process dies unannounced."""

    def __init__(self, name: str, reaper: subprocess.Popen[bytes], pipe: int) -> None:
        self.name = name
        self.reaper = reaper
        self.pipe = pipe
        self.containers: dict[str, _Created] = {}


class PodmanLauncher:
    """Runs each LaunchSpec's image in a podman pod of its `pod`, one pod at a time (the
    node's DaemonSet pod): a spec of another pod removes the previous pod first, as the
    node's roll has stopped it by then."""

    def __init__(self, *, repo: Path = REPO, tag: str | None = None) -> None:
        missing = [t for t in ("podman", "runc", "catatonit") if shutil.which(t) is None]
        if missing:
            raise LaunchError(f"not found on PATH: {', '.join(missing)} (the Debian packages"
                              " podman, runc and catatonit: build-support/install-debs)")
        self.repo = repo
        self.env = podman_env(repo)
        self.tag = tag or image_tag(repo)
        self.builds = load(repo / "deploy" / "images")
        self.memory = memory_cgroup()
        self.owner = owner_token()
        self._prefix = f"simnode-{uuid.uuid4().hex[:8]}"
        self._pods: dict[str, _Pod] = {}
        self._loose: set[str] = set()
        self._images: set[str] = set()
        self._lock = threading.Lock()
        # Also at interpreter exit (a finalizer's default).
        self._closer = weakref.finalize(self, _close, self._pods, self._loose, self.env)
        sweep(self.env)

    def launch(self, spec: LaunchSpec) -> PodmanContainer:
        if not spec.image:
            raise LaunchError(f"container {spec.name}: the spec names no image")
        image = self._image(spec)
        with self._lock:
            pod = self._pod(spec.pod) if spec.pod else None
            created = pod.containers.get(spec.name) if pod else None
            if created is not None and created.spec != spec:
                self.remove_container(created.name)
                created = None
            if created is None:
                created = self._create(spec, image, pod)
                if pod is not None:
                    pod.containers[spec.name] = created
        podman("start", created.name, env=self.env)
        pid = int(_inspect(created.name, self.env)["State"]["Pid"])
        return PodmanContainer(self, created.name, pid, remove=pod is None,
                               watch_oom=self.memory and spec.memory_limit is not None)

    def close(self) -> None:
        """Remove every pod and container this launcher made (also run as a finalizer)."""
        self._closer()

    # --- the pieces ----------------------------------------------------------------------

    def _image(self, spec: LaunchSpec) -> str:
        ref = built_ref(spec.image, self.tag)
        if ref not in self._images:
            if podman("image", "exists", ref, env=self.env, check=False).returncode != 0:
                raise LaunchError(f"container {spec.name}: image {ref} is not in podman's"
                                  " storage: build it with deploy/images/build.sh")
            self._images.add(ref)
        return ref

    def _pod(self, key: str) -> _Pod:
        if key in self._pods:
            return self._pods[key]
        for old in list(self._pods):
            _remove_pod(self._pods.pop(old), self.env)
        name = f"{self._prefix}-{key}"[:60]
        # The infra container holds the pod's PID namespace and joins the host's network,
        # which the pod's containers then share (`--network host` alone is the infra's).
        podman("pod", "create", "--name", name, "--share", "pid,net", "--network", "host",
               "--label", f"{OWNER_LABEL}={self.owner}", env=self.env,
               timeout=CREATE_TIMEOUT_S)
        self._pods[key] = pod = _start_reaper(name, self.env)
        log.info("podman pod %s created for pod %s", name, key)
        return pod

    def _create(self, spec: LaunchSpec, image: str, pod: _Pod | None) -> _Created:
        name = f"{pod.name if pod else self._prefix}-{spec.name}"
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        podman("rm", "-f", "--ignore", name, env=self.env, timeout=REMOVE_TIMEOUT_S)
        if pod is None:
            self._loose.add(name)
        started = time.monotonic()
        podman(*create_args(spec, image, name=name, pod=pod.name if pod else None,
                            owner=self.owner, memory=self.memory,
                            stand_ins=self._stand_ins(spec)),
               env=self.env, timeout=CREATE_TIMEOUT_S)
        log.info("container %s created from %s in %.1f s", name, image,
                 time.monotonic() - started)
        return _Created(name, spec)

    def _stand_ins(self, spec: LaunchSpec) -> frozenset[str]:
        """The binds that stand in for the image's entrypoint under bwrap (its PEX and the
        PEX cache): the image has the entrypoint itself."""
        with contextlib.suppress(ImageError):
            return frozenset({str(find(self.builds, spec.image).pex_in_image),
                              PEX_ROOT_IN_CONTAINER})
        return frozenset({PEX_ROOT_IN_CONTAINER})

    def remove_container(self, name: str) -> None:
        podman("rm", "-f", "-t", "0", "--ignore", name, env=self.env, timeout=REMOVE_TIMEOUT_S)
        self._loose.discard(name)


def create_args(spec: LaunchSpec, image: str, *, name: str, pod: str | None, owner: str,
                memory: bool, stand_ins: frozenset[str]) -> list[str]:
    """`podman create`'s arguments for `spec`: the image's entrypoint unless the manifest
    names a command, the manifest's args, env and mounts, no privilege."""
    args = ["create", "--name", name, "--label", f"{OWNER_LABEL}={owner}", "--pull", "never",
            "--log-driver", "k8s-file", "--log-opt", f"path={spec.log_path}",
            "--security-opt", "no-new-privileges"]
    args += ["--pod", pod] if pod else ["--network", "host"]
    # The host's IPC namespace (a pod's containers share one): the simulated card's screens
    # are Xvfb's, whose MIT-SHM segments weston's x11 backend attaches.
    args += ["--ipc", "host"]
    if spec.drop_all_capabilities:
        args.append("--cap-drop=ALL")
    if memory and spec.memory_limit is not None:
        # Swap off, as the kubelet runs pods: over the limit is an OOM kill, not paging.
        args += ["--memory", str(spec.memory_limit), "--memory-swap", str(spec.memory_limit)]
    for key, value in sorted(spec.env.items()):
        args += ["--env", f"{key}={value}"]
    if any(b.dest.startswith("/sys/") for b in spec.binds):
        # A simulated card's sysfs (its CDI edits) over the runtime's read-only sysfs, which
        # on these VMs has no /sys/class/drm to mount on: a tmpfs gives the mount points,
        # as bwrap's root does.
        args += ["--mount", "type=tmpfs,destination=/sys"]
    for bind in sorted(spec.binds, key=lambda b: b.dest.count("/")):
        if bind.dest not in stand_ins:
            args += ["--mount", mount_arg(bind)]
    if spec.command is not None:
        args += ["--entrypoint", json.dumps(list(spec.command))]
    args.append(image)
    if spec.args is not None:
        args += list(spec.args)
    return args


def _inspect(name: str, env: Mapping[str, str]) -> dict[str, Any]:
    data = json.loads(podman("inspect", "--type", "container", name, env=env).stdout)
    if not data:
        raise PodmanError(f"podman inspect {name}: no such container")
    return dict(data[0])


_REAPER: Final = ('while read -r _; do :; done; '
                  'exec podman pod rm -f -t 0 --ignore "$1" >/dev/null 2>&1')


def _start_reaper(pod: str, env: Mapping[str, str]) -> _Pod:
    """A process of its own session that removes `pod` once our end of its pipe closes:
    at `close()`, or when this process dies however it dies."""
    read_fd, write_fd = os.pipe()
    try:
        reaper = subprocess.Popen(["sh", "-c", _REAPER, "reaper", pod], stdin=read_fd,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  env=dict(env), start_new_session=True)
    except OSError as exc:
        os.close(write_fd)
        raise LaunchError(f"cannot start the reaper of pod {pod}: {exc}") from exc
    finally:
        os.close(read_fd)
    return _Pod(pod, reaper, write_fd)


def _remove_pod(pod: _Pod, env: Mapping[str, str]) -> None:
    try:
        podman("pod", "rm", "-f", "-t", "0", "--ignore", pod.name, env=env,
               timeout=REMOVE_TIMEOUT_S)
    finally:
        os.close(pod.pipe)
        with contextlib.suppress(subprocess.TimeoutExpired):
            pod.reaper.wait(CALL_TIMEOUT_S)


def _close(pods: dict[str, _Pod], loose: set[str], env: Mapping[str, str]) -> None:
    for key in list(pods):
        try:
            _remove_pod(pods.pop(key), env)
        except LaunchError:
            log.exception("removing podman pod %s failed (its reaper retries)", key)
    for name in list(loose):
        podman("rm", "-f", "-t", "0", "--ignore", name, env=env, check=False,
               timeout=REMOVE_TIMEOUT_S)
        loose.discard(name)


def sweep(env: Mapping[str, str]) -> list[str]:
    """Remove the pods and containers of launchers whose process is gone (what neither
    `close()` nor a reaper removed); their names."""
    removed = []
    for kind in ("pod", "container"):
        listing = podman(kind, "ps", *(["-a"] if kind == "container" else []), "--filter",
                         f"label={OWNER_LABEL}", "--format", "json", env=env).stdout
        for entry in json.loads(listing or "[]") or []:
            owner = (entry.get("Labels") or {}).get(OWNER_LABEL, "")
            name = entry["Name"] if kind == "pod" else entry["Names"][0]
            if owner_alive(owner):
                continue
            log.warning("removing podman %s %s left by a dead owner (%s)", kind, name, owner)
            podman(kind, "rm", "-f", "-t", "0", "--ignore", name, env=env,
                   timeout=REMOVE_TIMEOUT_S, check=False)
            removed.append(name)
    return removed
