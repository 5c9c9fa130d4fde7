"""The operator's end on a background failure: stop serving, remove the sockets, exit non-zero.

A publisher that died must not leave the plugin registered: the kubelet would keep sending
prepares to a node whose slice, taints and watchdog stand still. `Supervisor.fail` (from any
thread, first call wins) logs the cause, stops the gRPC server (which removes both sockets),
and makes the main thread exit with EXIT_CODE; if that has not happened within `deadline`
seconds (a stuck thread), it ends the process itself.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Final

log = logging.getLogger(__name__)

EXIT_CODE: Final = 1
DEFAULT_DEADLINE_S: Final = 5.0


class Supervisor:
    def __init__(self, *, deadline: float = DEFAULT_DEADLINE_S,
                 exit_now: Callable[[int], None] = os._exit) -> None:
        self._deadline = deadline
        self._exit_now = exit_now
        self._lock = threading.Lock()
        self._stop: Callable[[], None] | None = None
        self.failure: BaseException | None = None

    @property
    def failed(self) -> bool:
        return self.failure is not None

    def attach(self, stop: Callable[[], None]) -> None:
        """What stops serving (the gRPC server's stop); called at once if a failure came first."""
        with self._lock:
            self._stop = stop
            failed = self.failed
        if failed:
            self._stop_serving()

    def fail(self, what: str, err: BaseException) -> None:
        with self._lock:
            if self.failed:
                return
            self.failure = err
        log.critical("%s failed: %s; stopping so the kubelet restarts the container", what, err)
        timer = threading.Timer(self._deadline, self._too_late)
        timer.daemon = True
        timer.start()
        threading.Thread(target=self._stop_serving, name="supervisor-stop", daemon=True).start()

    def _stop_serving(self) -> None:
        with self._lock:
            stop = self._stop
        if stop is None:
            return
        try:
            stop()
        except Exception:
            log.exception("stopping the server failed; exiting anyway")
            self._exit_now(EXIT_CODE)

    def _too_late(self) -> None:
        log.critical("the operator did not stop within %g s of the failure: exiting now",
                     self._deadline)
        self._exit_now(EXIT_CODE)
