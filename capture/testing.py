"""Real pieces for the capture tests and bench: weston with the layout module (optionally with a
solid-colour client on each output), or a stand-in capture socket that serves solid frames
(`FakeCompositor`, for tests of the server's bounds that need no compositor); the server as a
subprocess, and an HTTPS client that pins (or ignores) the server's certificate.

The server runs as `python -m capture.main capture` with its settings in the environment and
`CAPTURE_ADDR=127.0.0.1:0`; it is ready when its log says where it listens. It is stopped and
reaped by pid whatever happens (libdisplay.processes).
"""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import socket
import ssl
import struct
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from libdisplay.compositor.layout import CAPTURE_GREETING, LayoutCapture, LayoutControl
from libdisplay.processes import Process, running
from tests.support import i420
from tests.support import weston as weston_support
from tests.support.layout import SolidClient
from tests.support.layout_build import layout_ini

REPO = Path(__file__).resolve().parent.parent
READY_TIMEOUT_S = 60.0
HTTP_TIMEOUT_S = 60.0
WAIT_S = 30.0
_LISTENING_RE = re.compile(rb"listening on https://([0-9.]+):(\d+)")


@dataclass(frozen=True, slots=True)
class Compositor:
    """weston with the layout module; its weston.ini names the outputs."""

    weston: weston_support.Weston
    sockets: Path

    @property
    def control(self) -> Path:
        return self.sockets / "control.sock"

    @property
    def capture(self) -> Path:
        return self.sockets / "capture.sock"

    @property
    def ini(self) -> Path:
        return self.weston.runtime_dir / "weston.ini"


@contextlib.contextmanager
def compositor(layout_so: Path, sizes: Sequence[tuple[int, int]]) -> Iterator[Compositor]:
    """weston's x11 backend on Xvfb with outputs X1..Xn of these sizes, pixman-rendered."""
    with tempfile.TemporaryDirectory(prefix="cap-") as tmp:
        sockets = Path(tmp)
        with weston_support.x11(
            sizes, config=layout_ini(sockets), args=[f"--shell={layout_so}"]
        ) as weston:
            yield Compositor(weston=weston, sockets=sockets)


class Screens(Protocol):
    """What the server is started against: a weston.ini naming outputs and a capture socket."""

    @property
    def ini(self) -> Path: ...

    @property
    def capture(self) -> Path: ...


class FakeCompositor:
    """A capture socket answering `FRAME <output> [<bound>] [I420]` with a solid `size` frame of
    `colour` (packed, or I420 when asked) for the outputs its weston.ini names (X1..Xn),
    `ERR no-output` otherwise; one thread a connection."""

    def __init__(self, directory: Path, outputs: Sequence[str] = ("X1",), *,
                 size: tuple[int, int] = (64, 48), colour: tuple[int, int, int] = (255, 0, 0)):
        self.ini = directory / "weston.ini"
        self.capture = directory / "capture.sock"
        self.outputs = tuple(outputs)
        self.ini.write_text("".join(f"[output]\nname={name}\nmode=preferred\n\n"
                                    for name in outputs))
        width, height = size
        red, green, blue = colour
        self._packed = (f"FRAME {width} {height} {width * 4} XRGB8888 0 {width * height * 4}\n"
                        .encode() + bytes([blue, green, red, 0]) * (width * height))
        planes = i420.solid(width - width % 2, height - height % 2, colour)
        self._i420 = (f"FRAME {width - width % 2} {height - height % 2} {width - width % 2} "
                      f"I420 0 {len(planes)}\n".encode() + planes)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(os.fspath(self.capture))
        self._listener.listen(64)
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def __enter__(self) -> FakeCompositor:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._acceptor.join(WAIT_S)
        for thread in self._threads:
            thread.join(WAIT_S)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            conn.settimeout(WAIT_S)
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError), conn.makefile("rb") as lines:
            conn.sendall(f"{CAPTURE_GREETING}\n".encode())
            for line in lines:
                words = line.decode(errors="replace").split()
                if len(words) >= 2 and words[0] == "FRAME" and words[1] in self.outputs:
                    conn.sendall(self._i420 if words[-1] == "I420" else self._packed)
                else:
                    conn.sendall(b"ERR no-output no such output\n")


def claim_socket(comp: Compositor, output: str) -> Path:
    """Where the clients of `output`'s claim connect (made by `showing`)."""
    return comp.sockets / f"{output}.sock"


@contextlib.contextmanager
def showing(
    layout_so: Path, screens: Sequence[tuple[tuple[int, int], tuple[int, int, int]]]
) -> Iterator[Compositor]:
    """`compositor` with one (size, colour) per output X1..Xn: each output has a claim
    (`claim_socket`) whose client fills it with the colour; yields once every output shows it."""
    outputs = [(f"X{index}", colour) for index, (_size, colour) in enumerate(screens, start=1)]
    with compositor(layout_so, [size for size, _colour in screens]) as comp:
        with LayoutControl(comp.control) as control:
            for output, _colour in outputs:
                control.create_claim_socket(claim_socket(comp, output), output, f"claim-{output}")
        with contextlib.ExitStack() as clients:
            for output, colour in outputs:
                client = clients.enter_context(
                    SolidClient(claim_socket(comp, output), colour=colour)
                )
                assert client.shown.wait(WAIT_S), f"the client on {output} was never shown"
            for output, colour in outputs:
                wait_colour(comp, output, colour)
            yield comp


def wait_colour(comp: Compositor, output: str, colour: tuple[int, int, int]) -> None:
    """Return once `output` shows `colour` at (10, 10); AssertionError after WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    with LayoutCapture(comp.capture, timeout=WAIT_S) as capture:
        while capture.frame(output).rgb(10, 10) != colour:
            assert time.monotonic() < deadline, f"{output} never showed {colour}"


@dataclass(frozen=True, slots=True)
class Server:
    process: Process
    port: int
    tls_dir: Path

    def connection(
        self, *, ca: Path | None = None, source: str | None = None
    ) -> http.client.HTTPSConnection:
        """A connection that pins `ca`, or that accepts any certificate (like the kubelet);
        from the loopback address `source` when given (the server bounds each address)."""
        if ca is None:
            # No CA store to load (create_default_context reads the system's, ~30 ms a call,
            # which the bench would count as the server's latency).
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            context = ssl.create_default_context(cafile=os.fspath(ca))
        return http.client.HTTPSConnection(
            "127.0.0.1", self.port, context=context, timeout=HTTP_TIMEOUT_S,
            source_address=(source, 0) if source else None,
        )

    def get(
        self, path: str, *, token: str | None = None, ca: Path | None = None,
        source: str | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        connection = self.connection(ca=ca, source=source)
        try:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            connection.request("GET", path, headers=headers)
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()


def _listening_port(log_path: Path) -> int | None:
    try:
        match = _LISTENING_RE.search(log_path.read_bytes())
    except FileNotFoundError:
        return None
    return int(match.group(2)) if match else None


def server_env(
    comp: Screens,
    *,
    kube_url: str,
    tls_dir: Path,
    node: str = "node-a",
    devices: str = "",
    extra_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The server's environment against this compositor and apiserver."""
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "PYTHONPATH": os.fspath(REPO),
        "NODE_NAME": node,
        "CAPTURE_ADDR": "127.0.0.1:0",
        "CAPTURE_WESTON_INI": os.fspath(comp.ini),
        "CAPTURE_SOCKET": os.fspath(comp.capture),
        "CAPTURE_TLS_DIR": os.fspath(tls_dir),
        "CAPTURE_DEVICES": devices,
        "CAPTURE_KUBE_URL": kube_url,
        # No /dev/dri here: ffmpeg's VA-API device creation fails, as on a node whose
        # driver cannot encode.
        "CAPTURE_RENDER_NODE": "/dev/dri/renderD128",
        **(extra_env or {}),
    }


SERVER_ARGV = (sys.executable, "-m", "capture.main", "capture")


@contextlib.contextmanager
def server(
    comp: Screens,
    *,
    kube_url: str,
    node: str = "node-a",
    devices: str = "",
    extra_env: Mapping[str, str] | None = None,
) -> Iterator[Server]:
    """The capture server against this compositor and apiserver, TLS dir empty at start."""
    with tempfile.TemporaryDirectory(prefix="capture-srv-") as tmp:
        tls_dir = Path(tmp) / "tls"
        tls_dir.mkdir()
        env = server_env(comp, kube_url=kube_url, tls_dir=tls_dir, node=node, devices=devices,
                         extra_env=extra_env)
        log_path = Path(tmp) / "capture.log"
        with running(
            SERVER_ARGV,
            log_path=log_path,
            env=env,
            cwd=REPO,
            ready=lambda _p: _listening_port(log_path) is not None,
            ready_timeout=READY_TIMEOUT_S,
            what="the capture server logs where it listens",
        ) as process:
            port = _listening_port(log_path)
            assert port is not None
            yield Server(process=process, port=port, tls_dir=tls_dir)


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdecimal():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces: the ppid follows the last ')'.
        ppid = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def _rss_kib(pid: int) -> int:
    try:
        for line in (Path("/proc") / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_rss_mib(pid: int) -> float:
    """Resident memory of `pid` and all its descendants now, in MiB (what a cgroup limit sees,
    less page cache and shared pages counted once per process)."""
    children = _children()
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        total += _rss_kib(current)
        todo.extend(children.get(current, ()))
    return total / 1024


def png_rgb(data: bytes, x: int, y: int) -> tuple[tuple[int, int], tuple[int, int, int]]:
    """(size, colour at (x, y)) of an 8-bit RGB or RGBA PNG, in the standard library."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour_type = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and colour_type in (2, 6), (depth, colour_type)
    bpp = 3 if colour_type == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytes(stride)
    for row in range(y + 1):
        line = raw[row * (stride + 1) : (row + 1) * (stride + 1)]
        prev = _unfilter(line[0], line[1:], prev, bpp)
    red, green, blue = prev[x * bpp : x * bpp + 3]
    return (width, height), (red, green, blue)


def png_rgb_pixels(data: bytes) -> bytes:
    """The RGB bytes, row after row, of an 8-bit RGB or RGBA non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, bytearray(), b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        if kind == b"IHDR":
            header = data[pos + 8 : pos + 8 + length]
        elif kind == b"IDAT":
            idat += data[pos + 8 : pos + 8 + length]
        pos += 12 + length
    width, height, depth, colour_type, _comp, _filter, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour_type in (2, 6) and interlace == 0, header
    bpp = 3 if colour_type == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytes(stride)
    for row in range(height):
        start = row * (stride + 1)
        prev = _unfilter(raw[start], raw[start + 1 : start + 1 + stride], prev, bpp)
        rows.append(prev)
    pixels = b"".join(rows)
    if bpp == 3:
        return pixels
    rgb = bytearray(width * height * 3)
    for channel in range(3):
        rgb[channel::3] = pixels[channel::4]
    return bytes(rgb)


def _unfilter(kind: int, line: bytes, prev: bytes, bpp: int) -> bytes:
    # None and Up are the filters Chromium's fast PNG encoding uses: they get no per-byte loop.
    if kind == 0:
        return line
    if kind == 2:
        return bytes((a + b) & 0xFF for a, b in zip(line, prev, strict=True))
    out = bytearray(line)
    for i in range(len(out)):
        left = out[i - bpp] if i >= bpp else 0
        up = prev[i]
        up_left = prev[i - bpp] if i >= bpp else 0
        if kind == 1:
            predicted = left
        elif kind == 3:
            predicted = (left + up) // 2
        else:
            p = left + up - up_left
            pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
            predicted = left if pa <= pb and pa <= pc else up if pb <= pc else up_left
        out[i] = (out[i] + predicted) & 0xFF
    return bytes(out)


