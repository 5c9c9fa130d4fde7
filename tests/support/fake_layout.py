"""The compositor side for tests that need no real weston: the layout module's control socket,
and a process named weston.

- `FakeModule` and `serving`: a line server speaking the control protocol (`LAYOUT 1`, then
  `OUTPUTS` and `CONFIGURE`) from each output's state line, to as many clients as come, for the
  code that drives a running compositor.
- `scripted` and `control_script`: one connection played byte for byte by a script, for a
  client's own edge cases (wrong greetings, silence, replies in pieces).
- `stand_in_weston`: `sleep` exec'd through a symlink named `weston` (the kernel names a process
  after the file it exec'd), which takes the SIGTERM a restart sends and never comes back, so a
  restart's wait runs to its bound.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

WAIT_S = 10.0
_ACCEPT_POLL_S = 0.05  # how soon `serving` notices it is to stop while no client comes
GREETING = "LAYOUT 1"


def state_line(mode: str = "1920x1080@60000", transform: str = "normal", scale: int = 1) -> str:
    """An output's state as `OUTPUTS` and `CONFIGURE` answer it (after the output's name)."""
    return f"mode={mode} transform={transform} scale={scale} x=0 y=0 width=1920 height=1080"


@dataclass
class FakeModule:
    """The control socket's answers: each output's state line, and what CONFIGURE answers."""

    outputs: dict[str, str]
    refuse: str | None = None  # an `ERR ...` line CONFIGURE answers with
    refuse_power: str | None = None  # an `ERR ...` line a CONFIGURE with power=off answers
    requests: list[str] = field(default_factory=list)
    probes: bool = False  # PROBE answers (a DRM backend) rather than being unknown

    def answer(self, line: str) -> list[str]:
        self.requests.append(line)
        if line == "PROBE" and self.probes:
            return ["OK 0"]
        if line == "OUTPUTS":
            return [f"OK {len(self.outputs)}",
                    *(f"{name} {state}" for name, state in self.outputs.items())]
        words = line.split()
        if words[0] == "CONFIGURE":
            if self.refuse is not None:
                return [self.refuse]
            name, fields = words[1], dict(w.split("=", 1) for w in words[2:])
            if self.refuse_power is not None and "power" in fields:
                return [self.refuse_power]
            state = dict(w.split("=", 1) for w in self.outputs[name].split())
            if "mode" in fields:
                w, _, hz = fields["mode"].partition("@")
                state["mode"] = f"{w}@{round(float(hz or 60) * 1000)}"
            state.update({k: v for k, v in fields.items() if k in ("transform", "scale", "power")})
            if "modeset" in fields:
                state["power"] = "on"
            self.outputs[name] = " ".join(f"{k}={v}" for k, v in state.items())
            return [f"OK {name} {self.outputs[name]}"]
        return ["ERR bad-request request unknown"]


@contextlib.contextmanager
def serving(path: Path, module: FakeModule) -> Iterator[FakeModule]:
    """`module` answering on a unix socket at `path`, one client after another."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(8)
    server.settimeout(_ACCEPT_POLL_S)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn, conn.makefile("rw", encoding="ascii", newline="\n") as stream:
                stream.write(f"{GREETING}\n")
                stream.flush()
                for line in stream:
                    stream.write("".join(f"{a}\n" for a in module.answer(line.strip())))
                    stream.flush()

    with _thread(serve, stop, server):
        yield module


Script = Callable[[socket.socket], None]


@contextlib.contextmanager
def _thread(serve: Callable[[], None], stop: threading.Event,
            listener: socket.socket) -> Iterator[None]:
    """`serve` on its own thread for the block; then `stop` set, the thread joined (bounded)
    and the listening socket closed."""
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(WAIT_S)
        listener.close()


@contextlib.contextmanager
def scripted(path: Path, script: Script) -> Iterator[Path]:
    """A unix socket at `path` whose first client `script` plays; the connection stays open
    until the block ends, so a client's timeout is its own and not a close."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)
    done = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            script(conn)
            done.wait(WAIT_S)

    with _thread(serve, done, listener):
        yield path


def reads(conn: socket.socket, line: bytes) -> None:
    """Assert the client's next line is `line`."""
    data = b""
    while not data.endswith(b"\n"):
        data += conn.recv(1024)
    assert data == line


def control_script(*steps: tuple[bytes, bytes]) -> Script:
    """The greeting, then for each step: the request expected and the reply sent."""

    def script(conn: socket.socket) -> None:
        conn.sendall(f"{GREETING}\n".encode())
        for expect, reply in steps:
            reads(conn, expect)
            conn.sendall(reply)

    return script


@contextlib.contextmanager
def stand_in_weston(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process named weston (its link in `tmp_path/bin`) that SIGTERM ends for good."""
    sleep = shutil.which("sleep")
    assert sleep is not None
    link = tmp_path / "bin" / "weston"
    link.parent.mkdir()
    link.symlink_to(sleep)
    child = subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "--", str(link), "60"])
    try:
        deadline = time.monotonic() + WAIT_S
        while Path(f"/proc/{child.pid}/comm").read_text().strip() != "weston":
            assert time.monotonic() < deadline, "the stand-in never became weston"
            time.sleep(0.01)
        yield child
    finally:
        child.kill()
        child.wait(timeout=WAIT_S)
