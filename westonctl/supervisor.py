"""Run weston as a child and keep it running exactly as long as the pod wants it.

The contract (DESIGN.md, "Supervision"): an exit of the weston whose pid a restart order
names starts weston again at once and consumes the order; any other exit ends the
supervisor with a non-zero status, so the kubelet's restart count of the container is
the crash count. SIGTERM/SIGINT are forwarded to weston, which gets a bounded grace
before SIGKILL, so the container stops inside the pod's 5 s.

Signals are handled synchronously: SIGCHLD, SIGTERM and SIGINT are blocked and taken
with `sigtimedwait`, so there is no handler racing the main loop. The supervisor makes
itself a child subreaper and reaps every child, so weston's helper clients that outlive
a killed weston do not linger as zombies.

GL renderer fallback: a weston asked for the GL renderer that exits, unordered, before it made
its socket (weston makes it after the backend and renderer are up) is started again once with
pixman. We fall back rather than exit because a card with no usable GL driver in the image
would otherwise leave its screens dark in a crash loop, while pixman shows them; the one
warning names the overlay that states pixman from the start, and the renderer file (read by
the operator's metrics) counts it. Should pixman fail too, that exit is unordered as before.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import os
import shutil
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from libdisplay import fsutil
from libdisplay.compositor.renderer import RendererState, write_renderer_state
from libdisplay.compositor.weston import consume_restart_order, list_restart_orders

log = logging.getLogger(__name__)

_PR_SET_CHILD_SUBREAPER = 36
_HANDLED = (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT)
# An unordered exit always ends the supervisor non-zero, even when weston said 0.
_UNORDERED_CLEAN_EXIT = 1
# After SIGKILL the kernel reaps at once; this only bounds a process stuck in the kernel.
_KILL_WAIT_S = 2.0
_FALLBACK_FROM = "gl"
_FALLBACK_TO = "pixman"
_PIXMAN_OVERLAY = "deploy/overlays/pixman-renderer"


class SupervisorError(Exception):
    """Base of the supervisor's errors."""


class ConfigTimeoutError(SupervisorError):
    """weston.ini did not appear within the wait."""


class WestonStartError(SupervisorError):
    """weston could not be started at all (binary missing, not executable)."""


@dataclass(frozen=True, slots=True)
class WestonCommand:
    """How to start weston. Production uses the DRM backend; tests pass headless or x11."""

    config: Path
    """weston.ini, written by the declare container."""
    runtime_dir: Path
    """XDG_RUNTIME_DIR for weston: the hostPath consumers mount, /var/run/display.liken.sh."""
    socket: str = "wayland-0"
    """The public socket's name inside runtime_dir."""
    backend: str = "drm-backend.so"
    renderer: str | None = None
    output_count: int | None = None
    log_scopes: str = ""
    """WESTON_LOG_SCOPES: extra debug scopes written to the log ("" = weston's default)."""
    extra_args: tuple[str, ...] = ()
    binary: str = "weston"
    env: Mapping[str, str] = field(default_factory=dict)

    def argv(self) -> list[str]:
        args = [
            self.binary,
            f"--config={self.config}",
            f"--backend={self.backend}",
            f"--socket={self.socket}",
        ]
        if self.renderer:
            args.append(f"--renderer={self.renderer}")
        if self.output_count:
            args.append(f"--output-count={self.output_count}")
        scopes = [s.strip() for s in self.log_scopes.split(",") if s.strip()]
        if scopes:
            # The flag replaces weston's default scope list, which is just "log".
            args.append("--logger-scopes=" + ",".join(dict.fromkeys(["log", *scopes])))
        return [*args, *self.extra_args]

    def environ(self) -> dict[str, str]:
        return {
            # libseat never picks its noop backend by itself. The pod has no logind session,
            # no seatd and no VT; noop opens the card with a plain open(), and the kernel makes
            # the first opener DRM master without a capability check. An environment that sets
            # LIBSEAT_BACKEND (a person on a desktop with logind) keeps its own.
            "LIBSEAT_BACKEND": "noop",
            **os.environ,
            **self.env,
            "XDG_RUNTIME_DIR": str(self.runtime_dir),
        }


@dataclass(frozen=True, slots=True)
class Supervision:
    """Where the supervisor reads orders and writes weston's pid, and its time limits."""

    restarts_dir: Path
    pid_file: Path | None = None
    """weston's current pid, for the operator (shared process namespace) and for diagnosis."""
    renderer_file: Path | None = None
    """The renderer asked for and the one weston runs, and the fallbacks so far (JSON), for
    the operator's metrics."""
    stop_grace_s: float = 4.0
    """SIGTERM to SIGKILL; under the pod's terminationGracePeriodSeconds of 5."""


def wait_for_config(path: Path, *, timeout_s: float, poll_s: float = 0.1) -> None:
    """Return once `path` exists; ConfigTimeoutError after `timeout_s`. No wait for a monitor."""
    deadline = time.monotonic() + timeout_s
    if not path.is_file():
        log.info("waiting up to %g s for %s", timeout_s, path)
    while not path.is_file():
        if time.monotonic() >= deadline:
            raise ConfigTimeoutError(
                f"{path} did not appear within {timeout_s:g} s: the declare container writes it;"
                " check that container's log"
            )
        time.sleep(poll_s)
    log.info("config %s is present", path)


def _become_subreaper() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            log.warning("cannot become a child subreaper: errno %s", ctypes.get_errno())
    except OSError as err:  # no libc prctl: not Linux
        log.warning("cannot become a child subreaper: %s", err)


def exit_status(wait_status: int) -> int:
    """The supervisor's exit code for an unordered weston exit: never 0."""
    if os.WIFSIGNALED(wait_status):
        return 128 + os.WTERMSIG(wait_status)
    code = os.waitstatus_to_exitcode(wait_status)
    return code if code > 0 else _UNORDERED_CLEAN_EXIT


def _describe(wait_status: int) -> str:
    if os.WIFSIGNALED(wait_status):
        return f"killed by {signal.Signals(os.WTERMSIG(wait_status)).name}"
    return f"exited with status {os.waitstatus_to_exitcode(wait_status)}"


class Supervisor:
    """One weston at a time; see the module docstring for the contract."""

    def __init__(self, command: WestonCommand, supervision: Supervision) -> None:
        self._command = command
        self._supervision = supervision
        self._weston: int | None = None
        self._restarts = 0
        self._renderer = command.renderer
        self._fallbacks = 0
        # The socket as it was when this weston was spawned (a killed weston leaves its
        # socket behind), and whether this weston has made its own since.
        self._socket_before: tuple[int, int] | None = None
        self._made_socket = False

    @property
    def restarts(self) -> int:
        """Ordered restarts so far."""
        return self._restarts

    def run(self) -> int:
        """Supervise until an unordered exit or a stop signal; returns the exit code."""
        _become_subreaper()
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _HANDLED)
        try:
            self._start()
            return self._loop()
        finally:
            if self._weston is not None:
                self._stop_weston()
            self._reap_all()
            self._write_pid(None)
            if self._supervision.renderer_file is not None:
                fsutil.remove(self._supervision.renderer_file)
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)

    def _loop(self) -> int:
        while True:
            info = signal.sigtimedwait(_HANDLED, 1.0)
            if self._weston is not None:
                self._note_socket()
            if info is None:
                continue
            if info.si_signo in (signal.SIGTERM, signal.SIGINT):
                log.info("received %s: stopping weston", signal.Signals(info.si_signo).name)
                return self._stop_weston()
            exited = self._reap_all()
            if self._weston is not None and self._weston in exited:
                status = exited[self._weston]
                code = self._on_weston_exit(self._weston, status)
                if code is not None:
                    return code

    def _on_weston_exit(self, pid: int, status: int) -> int | None:
        """Restart on an order (None); otherwise the exit code to leave with."""
        self._weston = None
        order = consume_restart_order(pid, directory=self._supervision.restarts_dir)
        if order is None and self._falls_back():
            self._fallbacks += 1
            log.warning(
                "weston pid %s %s before its socket was up with the GL renderer (its log above"
                " says why): starting it with pixman; to run pixman from the start, apply %s",
                pid, _describe(status), _PIXMAN_OVERLAY)
            self._renderer = _FALLBACK_TO
            self._start()
            return None
        if order is None:
            log.error("weston pid %s %s with no restart order: exiting", pid, _describe(status))
            return exit_status(status)
        self._restarts += 1
        log.info(
            "weston pid %s %s on order (%s): starting it again (restart %s)",
            pid,
            _describe(status),
            order.reason,
            self._restarts,
        )
        self._start()
        return None

    def _falls_back(self) -> bool:
        self._note_socket()
        return self._renderer == _FALLBACK_FROM and not self._made_socket

    def _socket_identity(self) -> tuple[int, int] | None:
        try:
            st = (self._command.runtime_dir / self._command.socket).lstat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_ctime_ns)

    def _note_socket(self) -> None:
        if not self._made_socket:
            now = self._socket_identity()
            self._made_socket = now is not None and now != self._socket_before

    def _start(self) -> None:
        argv = dataclasses.replace(self._command, renderer=self._renderer).argv()
        binary = shutil.which(argv[0])
        if binary is None:
            raise WestonStartError(f"{argv[0]!r} not found on PATH (install the weston package)")
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            raise WestonStartError("setpriv not found on PATH (install util-linux)")
        self._command.runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        # weston ends when westonctl does: in a pod that shares one process namespace an
        # orphaned weston would live on beside the next westonctl and keep DRM master. setpriv
        # execs weston, so the pid spawned is weston's. The child must not inherit the blocked
        # signals, or weston would ignore SIGTERM.
        spawned = [setpriv, "--pdeathsig", "TERM", "--", binary, *argv[1:]]
        self._socket_before = self._socket_identity()
        self._made_socket = False
        pid = os.posix_spawn(setpriv, spawned, self._command.environ(), setsigmask=())
        self._weston = pid
        self._write_pid(pid)
        self._write_renderer()
        self._drop_stale_orders(pid)
        log.info("started weston pid %s: %s", pid, " ".join(argv))

    def _drop_stale_orders(self, current: int) -> None:
        """Orders naming any pid but the current weston's can never apply again."""
        for order in list_restart_orders(directory=self._supervision.restarts_dir):
            if order.pid != current:
                log.warning("removing restart order for pid %s: not weston's pid", order.pid)
                fsutil.remove(self._supervision.restarts_dir / str(order.pid))

    def _write_renderer(self) -> None:
        path = self._supervision.renderer_file
        if path is not None:
            write_renderer_state(path, RendererState(
                requested=self._command.renderer or "auto", running=self._renderer or "auto",
                fallbacks=self._fallbacks))

    def _write_pid(self, pid: int | None) -> None:
        path = self._supervision.pid_file
        if path is None:
            return
        if pid is None:
            fsutil.remove(path)
        else:
            fsutil.atomic_write(path, f"{pid}\n")

    def _stop_weston(self) -> int:
        """SIGTERM weston, then SIGKILL after the grace (a stopped weston takes no SIGTERM)."""
        pid = self._weston
        if pid is None:
            return 0
        os.kill(pid, signal.SIGTERM)
        killed = False
        deadline = time.monotonic() + self._supervision.stop_grace_s
        while True:
            exited = self._reap_all()
            if pid in exited:
                self._weston = None
                status = exited[pid]
                log.info("weston pid %s %s", pid, _describe(status))
                return 0
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if killed:
                    log.error("weston pid %s survived SIGKILL: leaving it", pid)
                    return 1
                log.warning(
                    "weston pid %s ignored SIGTERM for %.1f s (stopped?): SIGKILL",
                    pid,
                    self._supervision.stop_grace_s,
                )
                os.kill(pid, signal.SIGKILL)
                killed = True
                deadline = time.monotonic() + _KILL_WAIT_S
                continue
            signal.sigtimedwait([signal.SIGCHLD], min(remaining, 0.5))

    @staticmethod
    def _reap_all() -> dict[int, int]:
        """Reap every exited child (weston and orphans we adopted); pid -> wait status."""
        exited: dict[int, int] = {}
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return exited
            if pid == 0:
                return exited
            exited[pid] = status


def supervise(command: WestonCommand, supervision: Supervision, *, config_wait_s: float) -> int:
    """The container's main mode: wait for the config, then supervise weston."""
    wait_for_config(command.config, timeout_s=config_wait_s)
    return Supervisor(command, supervision).run()
