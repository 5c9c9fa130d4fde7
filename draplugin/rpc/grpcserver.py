"""grpcio's server on unix sockets, as the operator runs it for the kubelet.

What it adds to `grpc.server`: each socket file appears only once the server serves it (bound
under a hidden name beside it, which the kubelet's plugin watcher ignores, then renamed), so a
kubelet that sees the registration socket never dials a server that has not started; handlers
on daemon threads, so a handler that outlives the stop's grace (a prepare waiting for the API)
holds no one's exit, as ThreadPoolExecutor's workers, joined at exit, would; and a `wait` that
a signal's Python handler interrupts.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from pathlib import Path
from typing import Any, Final

import grpc

from libdisplay import fsutil

WAIT_SLICE_S: Final = 0.2
"""How long `Server.wait` blocks at once: a signal's Python handler runs at most this late."""


class DaemonPool(futures.Executor):
    """At most `workers` calls run at once, each on one of `workers` daemon threads; the
    other calls wait their turn in order."""

    def __init__(self, workers: int, *, name: str) -> None:
        self._work: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        for n in range(workers):
            threading.Thread(target=self._serve, name=f"{name}-{n}", daemon=True).start()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> futures.Future[Any]:
        future: futures.Future[Any] = futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as err:  # handed to whoever reads the future, as the pool does
                future.set_exception(err)

        self._work.put(run)
        return future

    def _serve(self) -> None:
        while True:
            self._work.get()()


class Server:
    """Serves `handlers` on unix sockets from `start` until `stop`."""

    def __init__(self, handlers: Sequence[grpc.GenericRpcHandler], *, workers: int) -> None:
        self._server = grpc.server(DaemonPool(workers, name="grpc-call"), handlers=handlers)
        self._sockets: list[tuple[Path, Path]] = []
        self._stopped = threading.Event()
        self._done = threading.Event()  # grpc's, once `stop` has begun

    def add_unix_socket(self, path: Path) -> None:
        """Serve on `path` from `start` (whatever is there then is replaced)."""
        hidden = path.with_name(f".{path.name}.binding")
        fsutil.remove(hidden)  # a crashed start's
        self._server.add_insecure_port(f"unix:{hidden}")
        self._sockets.append((hidden, path))

    def start(self) -> None:
        """Serve, then put each socket in place, in the order they were added."""
        self._server.start()
        for hidden, path in self._sockets:
            hidden.replace(path)

    def stop(self, grace_s: float) -> threading.Event:
        """Refuse new calls at once, give the calls running `grace_s` seconds, then cancel them
        (their clients get UNAVAILABLE); remove the socket files. Returns at once, with the
        event set once the calls have ended or been cancelled."""
        if not self._stopped.is_set():
            self._done = self._server.stop(grace_s)
            self._stopped.set()
            for hidden, path in self._sockets:
                fsutil.remove(hidden)
                fsutil.remove(path)
        return self._done

    def wait(self) -> None:
        """Until `stop` has begun and the calls running then have ended or been cut: a process
        that returned sooner would end them with its exit. In slices of WAIT_SLICE_S: the
        kernel hands a process's signal to any of its threads, and a main thread blocked in an
        untimed lock wait never wakes to run Python's handler for it (SIGHUP's re-read,
        SIGTERM's stop)."""
        while not self._stopped.wait(WAIT_SLICE_S):
            pass
        while not self._done.wait(WAIT_SLICE_S):
            pass
