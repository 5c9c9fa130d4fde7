"""Tests only: a stand-in compositor whose main loop can be made busy or hung on demand, to
tell the watchdog's two verdicts apart without SIGSTOP.

Run as `python -m tests.support.busy_compositor SOCKET`; it prints `ready` once it listens.
It speaks as much Wayland as a liveness probe needs: `wl_display.get_registry` (no globals)
and `wl_display.sync` (answered with `wl_callback.done` and `wl_display.delete_id`).

- SIGUSR1: busy for BUSY_S seconds: every answer goes out LAG_S after its request arrived,
  and the loop burns CPU meanwhile (a weston repainting 16 outputs on a loaded node).
- SIGUSR2: hung: the loop spins on the CPU and never answers again.
- SIGHUP: working for WORK_S seconds: the main thread waits, asleep, on a thread of its own
  that burns CPU, and answers nothing meanwhile (weston waiting on llvmpipe's rasterizer
  threads to finish a frame), then answers again.

`BusyCompositor` starts it from a test and reaps it.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

BUSY_S: Final = 5.0
LAG_S: Final = 1.5
WORK_S: Final = 9.0
"""Longer than the default budget's kill line (7.5 s), shorter than its give-up (30 s)."""
START_TIMEOUT_S: Final = 30.0

_HEADER = struct.Struct("<II")
_WORD = struct.Struct("<I")


@dataclass(slots=True)
class _Client:
    sock: socket.socket
    data: bytearray = field(default_factory=bytearray)


class _Loop:
    def __init__(self, path: Path) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(os.fspath(path))
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.busy_until = 0.0
        self.hung = False
        self.work = False
        self.due: list[tuple[float, socket.socket, bytes]] = []
        self.serial = 0

    def run(self) -> None:
        while True:
            if self.hung:
                continue  # a main loop that spins without answering
            if self.work:
                self.work = False
                worker = threading.Thread(target=_burn, args=(WORK_S,))
                worker.start()
                worker.join()
            now = time.monotonic()
            self._send_due(now)
            if now < self.busy_until:
                _burn(0.01)
                events = self.selector.select(0)
            else:
                events = self.selector.select(0.05)
            for key, _ in events:
                if key.fileobj is self.listener:
                    self._accept()
                else:
                    self._read(key.data)

    def _accept(self) -> None:
        with contextlib.suppress(BlockingIOError):
            sock, _ = self.listener.accept()
            sock.setblocking(False)
            self.selector.register(sock, selectors.EVENT_READ, _Client(sock))

    def _read(self, client: _Client) -> None:
        try:
            chunk = client.sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.selector.unregister(client.sock)
            client.sock.close()
            self.due = [d for d in self.due if d[1] is not client.sock]
            return
        client.data += chunk
        lag = LAG_S if time.monotonic() < self.busy_until else 0.0
        while len(client.data) >= _HEADER.size:
            object_id, word = _HEADER.unpack_from(client.data)
            size, opcode = word >> 16, word & 0xFFFF
            if len(client.data) < size:
                return
            body = bytes(client.data[_HEADER.size:size])
            del client.data[:size]
            if object_id == 1 and opcode == 0:  # wl_display.sync
                (callback,) = _WORD.unpack_from(body)
                self.serial += 1
                reply = (_HEADER.pack(callback, 12 << 16) + _WORD.pack(self.serial)
                         + _HEADER.pack(1, 12 << 16 | 1) + _WORD.pack(callback))
                self.due.append((time.monotonic() + lag, client.sock, reply))

    def _send_due(self, now: float) -> None:
        keep = []
        for due in self.due:
            if due[0] > now:
                keep.append(due)
                continue
            with contextlib.suppress(OSError):
                due[1].sendall(due[2])
        self.due = keep


def _burn(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def main() -> None:
    loop = _Loop(Path(sys.argv[1]))

    def busy(_signum: int, _frame: object) -> None:
        loop.busy_until = time.monotonic() + BUSY_S

    def hang(_signum: int, _frame: object) -> None:
        loop.hung = True

    def work(_signum: int, _frame: object) -> None:
        loop.work = True

    signal.signal(signal.SIGUSR1, busy)
    signal.signal(signal.SIGUSR2, hang)
    signal.signal(signal.SIGHUP, work)
    print("ready", flush=True)
    loop.run()


@dataclass(frozen=True, slots=True)
class BusyCompositor:
    """A running stand-in: its socket and process."""

    socket: Path
    process: subprocess.Popen[str]

    def busy(self) -> None:
        """Busy for BUSY_S seconds from now, every answer LAG_S late."""
        self.process.send_signal(signal.SIGUSR1)

    def work(self) -> None:
        """Wait on a working thread of its own for WORK_S seconds, answering nothing."""
        self.process.send_signal(signal.SIGHUP)

    def hang(self) -> None:
        """Spin without answering, until killed."""
        self.process.send_signal(signal.SIGUSR2)


@contextlib.contextmanager
def running(directory: Path) -> Iterator[BusyCompositor]:
    """Start the stand-in on `directory`/wayland-busy; wait until it listens; kill and reap
    it at the end."""
    path = directory / "wayland-busy"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    process = subprocess.Popen([sys.executable, "-m", "tests.support.busy_compositor",
                                os.fspath(path)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stdout is not None
        line = _readline(process, START_TIMEOUT_S)
        if line.strip() != "ready":
            raise AssertionError(f"the stand-in compositor did not start: {line!r}")
        yield BusyCompositor(path, process)
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait(timeout=START_TIMEOUT_S)
        if process.stdout is not None:
            process.stdout.close()


def _readline(process: subprocess.Popen[str], timeout: float) -> str:
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    if not selector.select(timeout):
        raise AssertionError(f"the stand-in compositor said nothing within {timeout:g} s")
    return process.stdout.readline()


if __name__ == "__main__":
    main()
