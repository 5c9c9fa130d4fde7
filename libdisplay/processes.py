"""Child processes for tests, benches and the simulated node: start, await readiness, reap.

Each child starts with its output to a log, is waited on for readiness, then stopped and reaped.

Every child runs in its own session so that `stop` can also kill what it left behind
(a shell's `sleep`, weston's helper clients). The child is reaped only after those
stragglers are killed: until then its pid stays a zombie and cannot be reused, so the
process-group id the straggler kill uses still names our group.

Every child also dies with the thread that started it (`setpriv --pdeathsig KILL`, which execs,
so the child keeps its pid): a test run killed with SIGKILL, which runs no cleanup, leaves no
weston, Xvfb or operator behind. A child meant to outlive its starter is started elsewhere.

Readiness is polled with short waits up to a bounded deadline; when it fails the error
carries the tail of the log, and `running` stops and reaps the child whatever happens.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

POLL_INTERVAL_S = 0.02
TAIL_LINES = 30
_TAIL_BYTES = 16384


class ProcessError(Exception):
    """Base of every error this module raises."""


class ReadinessError(ProcessError):
    """The process did not become ready in time, or exited first; the message has the log tail."""

    def __init__(self, message: str, *, log_tail: str, returncode: int | None) -> None:
        super().__init__(message)
        self.log_tail = log_tail
        self.returncode = returncode


class StopError(ProcessError):
    """The process survived SIGKILL for the whole wait (stuck in the kernel); it is not reaped."""


@dataclass(frozen=True, slots=True)
class Stopped:
    """How a stop ended: the return code (-N for signal N) and whether SIGKILL was needed."""

    returncode: int
    killed: bool


class Process:
    """A started child with its log file. Never polled through Popen: see the module docstring."""

    def __init__(self, popen: subprocess.Popen[bytes], *, name: str, log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self._popen = popen

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        """The exit status once reaped, else None."""
        return self._popen.returncode

    def exited(self) -> bool:
        """True once the child has exited (reaped or still a zombie); does not reap it."""
        if self._popen.returncode is not None:
            return True
        return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None

    def send_signal(self, sig: signal.Signals) -> None:
        """Signal the child; a no-op once reaped, when its pid may belong to someone else."""
        if self._popen.returncode is None:
            os.kill(self.pid, sig)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_contains(self, text: str) -> bool:
        return text in self.log_text()

    def log_tail(self, lines: int = TAIL_LINES) -> str:
        if not self.log_path.exists():
            return ""
        with self.log_path.open("rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - _TAIL_BYTES))
            text = log.read().decode(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def wait_until(self, ready: Callable[[], bool], *, timeout: float, what: str) -> None:
        """Poll `ready()` every POLL_INTERVAL_S until it holds; ReadinessError on timeout/exit."""
        deadline = time.monotonic() + timeout
        while not ready():
            if self.exited():
                raise self._readiness_error(f"exited before {what}")
            if time.monotonic() >= deadline:
                raise self._readiness_error(f"not ready after {timeout:g} s: {what}")
            time.sleep(POLL_INTERVAL_S)

    def wait(self, *, timeout: float) -> int:
        """Wait up to `timeout` for the child to exit by itself; reap it and return its status."""
        if not self._wait_exited(timeout):
            raise ProcessError(f"{self.name} (pid {self.pid}) still running after {timeout:g} s")
        return self._reap()

    def stop(self, *, grace: float = 5.0, kill_wait: float = 5.0) -> Stopped:
        """SIGTERM (with SIGCONT, so a stopped child can act on it), SIGKILL after `grace`; reap."""
        if self._popen.returncode is not None:
            return Stopped(self._popen.returncode, killed=False)
        if not self.exited():
            self.send_signal(signal.SIGTERM)
            self.send_signal(signal.SIGCONT)
        if self._wait_exited(grace):
            return Stopped(self._reap(), killed=False)
        self.send_signal(signal.SIGKILL)
        if not self._wait_exited(kill_wait):
            raise StopError(f"{self.name} (pid {self.pid}) survived SIGKILL for {kill_wait:g} s")
        return Stopped(self._reap(), killed=True)

    def _wait_exited(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.exited():
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_INTERVAL_S)
        return True

    def _reap(self) -> int:
        """Kill what is left of the child's group while its zombie pins the id, then reap it."""
        if self._popen.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        return self._popen.wait()

    def _readiness_error(self, reason: str) -> ReadinessError:
        tail = self.log_tail()
        returncode = self._popen.returncode
        if returncode is None and self.exited():
            returncode = self._reap()
        status = "" if returncode is None else f" (rc {returncode})"
        header = f"{self.name} (pid {self.pid}) {reason}{status}"
        message = f"{header}\n--- last lines of {self.log_path} ---\n{tail}"
        return ReadinessError(message, log_tail=tail, returncode=returncode)


def _dies_with_parent(argv: Sequence[str]) -> list[str]:
    """`argv` behind util-linux's setpriv, which sets PR_SET_PDEATHSIG and execs it.

    Not `preexec_fn`, which is unsafe in a process with threads (the tests have several).
    """
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise ProcessError("setpriv (util-linux) is not on PATH: a child could outlive its test")
    return [setpriv, "--pdeathsig", "KILL", "--", *argv]


def start(
    argv: Sequence[str],
    *,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    pass_fds: Sequence[int] = (),
) -> Process:
    """Start `argv` in a new session with stdout and stderr appended to `log_path`; it is
    SIGKILLed if the thread that started it ends first."""
    with log_path.open("ab") as log:
        popen = subprocess.Popen(
            _dies_with_parent(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=None if env is None else dict(env),
            cwd=cwd,
            pass_fds=tuple(pass_fds),
            start_new_session=True,
        )
    return Process(popen, name=Path(argv[0]).name, log_path=log_path)


@contextlib.contextmanager
def running(
    argv: Sequence[str],
    *,
    log_path: Path,
    ready: Callable[[Process], bool] | None = None,
    ready_timeout: float = 30.0,
    what: str = "ready",
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    pass_fds: Sequence[int] = (),
    grace: float = 5.0,
) -> Iterator[Process]:
    """Start `argv`, wait until `ready(process)` holds, yield it; always stop and reap it."""
    process = start(argv, log_path=log_path, env=env, cwd=cwd, pass_fds=pass_fds)
    try:
        if ready is not None:
            process.wait_until(lambda: ready(process), timeout=ready_timeout, what=what)
        yield process
    finally:
        process.stop(grace=grace)


def unix_socket_accepts(path: Path) -> bool:
    """True when something listens on the Unix socket `path` and takes a connection now."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK) as sock:
        return sock.connect_ex(os.fspath(path)) == 0
