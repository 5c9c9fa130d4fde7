"""A full-screen Wayland client that redraws every frame, in shm or in dmabufs (python3.13,
stdlib only): the tenant of `bench/vm-dmabuf`, the same client for every case so that only the
buffer's kind and weston's renderer differ.

    dmabuf_client.py --socket PATH --buffers shm|dumb|udmabuf [--weston-pid PID]
                     [--warmup S] [--window S] [--windows N] [--colour R,G,B]
                     [--modifier auto|linear|implicit]

It shows one xdg_toplevel at the size the shell configures (the whole output, with the
layout shell), filled with `--colour`, and from then on answers every frame callback with the
next of its buffers, attached and damaged whole: each frame weston composites is a full-screen
frame of this client. Content is drawn once per buffer, so the client's own cost per frame is
a few protocol messages, and what varies is how weston gets the pixels:
- `shm`: wl_shm buffers (memfd), which weston copies (pixman: into its framebuffer; GL: into a
  texture, then draws);
- `dumb`: KMS dumb buffers of /dev/dri/card0 exported as dmabufs (PRIME), given to weston
  through zwp_linux_dmabuf_v1 (linux_buffer_params.create): the buffer a GPU client would
  render into, here one the card's driver made;
- `udmabuf`: dmabufs made from memfds by /dev/udmabuf, given the same way.

One JSON line when shown ({"shown", "configured", "buffers", "protocol"}: the dmabuf requests
and weston's answers as WAYLAND_DEBUG would print them), then, with --weston-pid, after
--warmup seconds, --windows windows of --window seconds, each as {"frames", "seconds",
"weston_ticks"} measured at frame callbacks (weston's utime+stime from /proc/PID/stat), in
one JSON line {"windows", "clk_tck"}; it keeps drawing until SIGTERM. On failure one JSON line
{"error"} and exit 1.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import mmap
import os
import select
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HEADER = struct.Struct("<II")
DRM_FORMAT_XRGB8888 = 0x34325258
WL_SHM_FORMAT_XRGB8888 = 1
MOD_LINEAR = 0
MOD_INVALID = (1 << 56) - 1
"""DRM_FORMAT_MOD_INVALID: the buffer's layout is implicit (the driver's own)."""
BUFFERS = 3
"""Weston holds one buffer on screen and may hold the one it is about to show."""
CARD = "/dev/dri/card0"
UDMABUF = "/dev/udmabuf"
SETUP_TIMEOUT_S = 120.0


def _iowr(nr: int, size: int, kind: int = 0x64, direction: int = 3) -> int:
    return (direction << 30) | (size << 16) | (kind << 8) | nr


DRM_IOCTL_MODE_CREATE_DUMB = _iowr(0xB2, 32)
DRM_IOCTL_MODE_MAP_DUMB = _iowr(0xB3, 16)
DRM_IOCTL_PRIME_HANDLE_TO_FD = _iowr(0x2D, 12)
UDMABUF_CREATE = _iowr(0x42, 24, kind=ord("u"), direction=1)
DRM_RDWR_CLOEXEC = os.O_RDWR | os.O_CLOEXEC
F_SEAL_SHRINK = 0x0002


class ClientError(Exception):
    """Setup failed or the compositor refused something; names what."""


def encode(*args: int | str | bytes) -> bytes:
    out = bytearray()
    for arg in args:
        if isinstance(arg, str):
            raw = arg.encode() + b"\0"
            out += struct.pack("<I", len(raw)) + raw + b"\0" * (-len(raw) % 4)
        elif isinstance(arg, bytes):
            out += arg
        else:
            out += struct.pack("<I", arg & 0xFFFFFFFF)
    return bytes(out)


class Reader:
    """An event's arguments, read in order."""

    def __init__(self, payload: bytes) -> None:
        self.data, self.at = payload, 0

    def uint(self) -> int:
        value: int = struct.unpack_from("<I", self.data, self.at)[0]
        self.at += 4
        return value

    def sint(self) -> int:
        value: int = struct.unpack_from("<i", self.data, self.at)[0]
        self.at += 4
        return value

    def string(self) -> str:
        length = self.uint()
        raw = self.data[self.at:self.at + length - 1]
        self.at += length + (-length % 4)
        return raw.decode(errors="replace")


# -- buffers -----------------------------------------------------------------------------------

def fill(view: mmap.mmap, size: int, colour: tuple[int, int, int]) -> None:
    red, green, blue = colour
    pixel = bytes((blue, green, red, 0xFF))
    view[:size] = pixel * (size // 4)


def shm_fd(size: int, colour: tuple[int, int, int]) -> int:
    fd = os.memfd_create("frame", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    with mmap.mmap(fd, size) as view:
        fill(view, size, colour)
    return fd


def dumb_dmabuf(card: int, width: int, height: int,
                colour: tuple[int, int, int]) -> tuple[int, int]:
    """A dumb buffer of the card, filled, as a dmabuf fd; (fd, stride)."""
    create = bytearray(struct.pack("<IIIIIIQ", height, width, 32, 0, 0, 0, 0))
    fcntl.ioctl(card, DRM_IOCTL_MODE_CREATE_DUMB, create)
    _, _, _, _, handle, pitch, size = struct.unpack("<IIIIIIQ", create)
    mapping = bytearray(struct.pack("<IIQ", handle, 0, 0))
    fcntl.ioctl(card, DRM_IOCTL_MODE_MAP_DUMB, mapping)
    offset = struct.unpack("<IIQ", mapping)[2]
    with mmap.mmap(card, size, offset=offset) as view:
        fill(view, pitch * height, colour)
    prime = bytearray(struct.pack("<IIi", handle, DRM_RDWR_CLOEXEC, -1))
    fcntl.ioctl(card, DRM_IOCTL_PRIME_HANDLE_TO_FD, prime)
    return struct.unpack("<IIi", prime)[2], pitch


def udmabuf(device: int, size: int, colour: tuple[int, int, int]) -> int:
    memfd = shm_fd(size, colour)
    try:
        fcntl.fcntl(memfd, fcntl.F_ADD_SEALS, F_SEAL_SHRINK)
        create = bytearray(struct.pack("<IIQQ", memfd, 1, 0, size))  # UDMABUF_FLAGS_CLOEXEC
        dmabuf: int = fcntl.ioctl(device, UDMABUF_CREATE, create)
        return dmabuf
    finally:
        os.close(memfd)


# -- the client --------------------------------------------------------------------------------

Handler = Callable[[int, Reader], None]


class Client:
    def __init__(self, path: Path, buffers: str, colour: tuple[int, int, int],
                 modifier: str = "auto") -> None:
        self.kind = buffers
        self.modifier = modifier
        self.colour = colour
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(os.fspath(path))
        self.inbox = bytearray()
        self.handlers: dict[int, Handler] = {1: self.on_display}
        self.next_id = 2
        self.globals: dict[str, tuple[int, int]] = {}
        self.modifiers: list[int] = []
        self.size: tuple[int, int] | None = None
        self.configured: list[list[int]] = []
        self.ids: dict[str, int] = {}
        self.free: list[int] = []
        self.buffer_ids: list[int] = []
        self.protocol: list[str] = []
        self.frames = 0
        self.frame_pending = False
        self.configure_serial: int | None = None
        self.unacked: int | None = None
        self.on_frame: Callable[[], None] = lambda: None

    # wire
    def new(self, handler: Handler | None = None) -> int:
        object_id = self.next_id
        self.next_id += 1
        if handler is not None:
            self.handlers[object_id] = handler
        return object_id

    def send(self, object_id: int, opcode: int, *args: int | str | bytes,
             fd: int | None = None) -> None:
        body = encode(*args)
        data = HEADER.pack(object_id, (len(body) + HEADER.size) << 16 | opcode) + body
        if fd is None:
            self.sock.sendall(data)
        else:
            socket.send_fds(self.sock, [data], [fd])

    def pump(self, timeout: float) -> None:
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            return
        data = self.sock.recv(1 << 16)
        if not data:
            raise ClientError("the compositor closed the connection")
        self.inbox += data
        while len(self.inbox) >= HEADER.size:
            object_id, word = HEADER.unpack_from(self.inbox)
            size = word >> 16
            if len(self.inbox) < size:
                break
            payload = bytes(self.inbox[HEADER.size:size])
            del self.inbox[:size]
            handler = self.handlers.get(object_id)
            if handler is not None:
                handler(word & 0xFFFF, Reader(payload))

    def until(self, check: Callable[[], Any], what: str,
              timeout: float = SETUP_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise ClientError(f"not within {timeout:g} s: {what}")
            self.pump(0.1)

    def roundtrip(self) -> None:
        done: list[bool] = []
        self.send(1, 0, self.new(lambda _op, _r: done.append(True)))
        self.until(lambda: done, "a wl_display.sync answered")

    # events
    def on_display(self, opcode: int, args: Reader) -> None:
        if opcode == 0:
            raise ClientError(f"protocol error on object {args.uint()} code {args.uint()}: "
                              f"{args.string()}")

    def on_registry(self, opcode: int, args: Reader) -> None:
        if opcode == 0:
            name, interface, version = args.uint(), args.string(), args.uint()
            self.globals[interface] = (name, version)

    def bind(self, interface: str, version: int, handler: Handler | None = None) -> int:
        if interface not in self.globals:
            raise ClientError(f"the compositor offers no {interface} (it offers "
                              f"{sorted(self.globals)})")
        name, offered = self.globals[interface]
        object_id = self.new(handler)
        self.send(2, 0, name, interface, min(version, offered), object_id)
        return object_id

    def on_dmabuf(self, opcode: int, args: Reader) -> None:
        if opcode == 1:  # modifier(format, hi, lo)
            fmt, high, low = args.uint(), args.uint(), args.uint()
            if fmt == DRM_FORMAT_XRGB8888:
                self.modifiers.append(high << 32 | low)

    def on_toplevel(self, opcode: int, args: Reader) -> None:
        if opcode == 0:
            self.size = (args.sint(), args.sint())
            self.configured.append(list(self.size))

    def on_xdg_surface(self, opcode: int, args: Reader) -> None:
        if opcode == 0:
            self.configure_serial = self.unacked = args.uint()

    def on_wm_base(self, opcode: int, args: Reader) -> None:
        if opcode == 0:
            self.send(self.ids["wm_base"], 3, args.uint())  # pong

    def buffer_handler(self, buffer: int) -> Handler:
        def on_event(opcode: int, _args: Reader) -> None:
            if opcode == 0:  # release
                self.free.append(buffer)
        return on_event

    # setup
    def setup(self) -> dict[str, Any]:
        self.send(1, 1, self.new(self.on_registry))  # get_registry: object 2
        self.roundtrip()
        self.ids["compositor"] = self.bind("wl_compositor", 4)
        self.ids["wm_base"] = self.bind("xdg_wm_base", 1, self.on_wm_base)
        if self.kind == "shm":
            self.ids["shm"] = self.bind("wl_shm", 1)
        else:
            self.ids["dmabuf"] = self.bind("zwp_linux_dmabuf_v1", 3, self.on_dmabuf)
        surface = self.ids["surface"] = self.new()
        self.send(self.ids["compositor"], 0, surface)
        xdg = self.ids["xdg_surface"] = self.new(self.on_xdg_surface)
        self.send(self.ids["wm_base"], 2, xdg, surface)
        self.ids["toplevel"] = self.new(self.on_toplevel)
        self.send(xdg, 1, self.ids["toplevel"])
        self.send(surface, 6)  # commit: ask for the first configure
        self.until(lambda: self.configure_serial is not None, "the first configure")
        width, height = self.size if self.size and min(self.size) > 0 else (1920, 1080)
        for index in range(BUFFERS):
            self.buffer_ids.append(self.make_buffer(width, height, index))
        self.free = list(self.buffer_ids)
        self.draw(width, height)
        return {"size": [width, height], "modifiers": [hex(m) for m in self.modifiers]}

    def make_buffer(self, width: int, height: int, index: int) -> int:
        stride = width * 4
        size = stride * height
        if self.kind == "shm":
            fd = shm_fd(size, self.colour)
            try:
                pool = self.new()
                self.send(self.ids["shm"], 0, pool, size, fd=fd)
            finally:
                os.close(fd)
            buffer = self.new(None)
            self.handlers[buffer] = self.buffer_handler(buffer)
            self.send(pool, 0, buffer, 0, width, height, stride, WL_SHM_FORMAT_XRGB8888)
            return buffer
        if self.kind == "dumb":
            card = os.open(CARD, os.O_RDWR | os.O_CLOEXEC)
            try:
                fd, stride = dumb_dmabuf(card, width, height, self.colour)
            finally:
                os.close(card)  # the dmabuf keeps the buffer
        else:
            device = os.open(UDMABUF, os.O_RDWR | os.O_CLOEXEC)
            try:
                fd = udmabuf(device, size, self.colour)
            finally:
                os.close(device)
        modifier = {"linear": MOD_LINEAR, "implicit": MOD_INVALID}.get(
            self.modifier, MOD_LINEAR if MOD_LINEAR in self.modifiers else MOD_INVALID)
        params = self.new()
        answer: list[int] = []

        def on_params(opcode: int, args: Reader) -> None:
            answer.append(args.uint() if opcode == 0 else 0)  # created(new id) or failed

        self.handlers[params] = on_params
        self.send(self.ids["dmabuf"], 1, params)  # create_params
        try:
            self.send(params, 1, 0, 0, stride, modifier >> 32, modifier, fd=fd)  # add plane 0
        finally:
            os.close(fd)
        self.send(params, 2, width, height, DRM_FORMAT_XRGB8888, 0)  # create
        self.log(f"-> zwp_linux_buffer_params_v1@{params}.add(fd, 0, 0, {stride}, "
                 f"{modifier >> 32:#x}, {modifier & 0xFFFFFFFF:#x}) [{self.kind}]")
        self.log(f"-> zwp_linux_buffer_params_v1@{params}.create({width}, {height}, "
                 f"XR24, 0)")
        self.until(lambda: answer, f"weston's answer to dmabuf params {params}")
        if not answer[0]:
            self.log(f"<- zwp_linux_buffer_params_v1@{params}.failed()")
            raise ClientError(f"weston could not import the {self.kind} dmabuf ({width}x{height}"
                              f" XR24, modifier {modifier:#x}): linux_buffer_params.failed")
        self.log(f"<- zwp_linux_buffer_params_v1@{params}.created(wl_buffer@{answer[0]:#x})")
        self.handlers[answer[0]] = self.buffer_handler(answer[0])
        self.send(params, 0)  # destroy
        return answer[0]

    def log(self, line: str) -> None:
        self.protocol.append(line)

    def draw(self, width: int, height: int) -> None:
        """Attach a free buffer, damage it whole, ask for a frame callback, commit."""
        buffer = self.free.pop(0)
        surface = self.ids["surface"]
        if self.unacked is not None:  # a configure since the last commit (the size stays)
            self.send(self.ids["xdg_surface"], 4, self.unacked)
            self.unacked = None
        self.send(surface, 1, buffer, 0, 0)
        self.send(surface, 9, 0, 0, width, height)  # damage_buffer
        callback = self.new(lambda _op, _args: self.frame_done(width, height, callback))
        self.send(surface, 3, callback)
        self.send(surface, 6)
        self.frame_pending = True

    def frame_done(self, width: int, height: int, callback: int) -> None:
        del self.handlers[callback]
        self.frames += 1
        self.frame_pending = False
        self.on_frame()
        if self.free:
            self.draw(width, height)

    def run(self, stop: Callable[[], bool]) -> None:
        width, height = self.configured[-1] if self.configured and min(
            self.configured[-1]) > 0 else (1920, 1080)
        while not stop():
            self.pump(0.1)
            if not self.frame_pending and self.free:  # a release came after the callback
                self.draw(width, height)


def weston_ticks(pid: int) -> int:
    """utime + stime of every thread of `pid` (llvmpipe's too), in clock ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


class Windows:
    """At frame callbacks: after the warm-up, `count` windows of `length` seconds of frames
    and weston's CPU ticks."""

    def __init__(self, pid: int, warmup: float, length: float, count: int) -> None:
        self.pid, self.length, self.count = pid, length, count
        self.start_at = time.monotonic() + warmup
        self.mark: tuple[float, int, int] | None = None
        self.done: list[dict[str, Any]] = []

    def frame(self, frames: int) -> None:
        now = time.monotonic()
        if now < self.start_at or len(self.done) >= self.count:
            return
        if self.mark is None:
            self.mark = (now, frames, weston_ticks(self.pid))
        elif now - self.mark[0] >= self.length:
            ticks = weston_ticks(self.pid)
            self.done.append({"frames": frames - self.mark[1],
                              "seconds": round(now - self.mark[0], 3),
                              "weston_ticks": ticks - self.mark[2]})
            self.mark = (now, frames, ticks)


def colour(text: str) -> tuple[int, int, int]:
    red, green, blue = (int(p) for p in text.split(","))
    return red, green, blue


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--socket", type=Path, required=True)
    parser.add_argument("--buffers", choices=("shm", "dumb", "udmabuf"), required=True)
    parser.add_argument("--colour", type=colour, default=(200, 60, 20))
    parser.add_argument("--weston-pid", type=int)
    parser.add_argument("--modifier", choices=("auto", "linear", "implicit"), default="auto")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--windows", type=int, default=3)
    args = parser.parse_args()
    stopped: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
    try:
        client = Client(args.socket, args.buffers, args.colour, args.modifier)
        found = client.setup()
        client.until(lambda: client.frames >= 1, "the first frame callback")
        print(json.dumps({"shown": True, "buffers": args.buffers, **found,
                          "configured": client.configured, "protocol": client.protocol}),
              flush=True)
        if args.weston_pid:
            windows = Windows(args.weston_pid, args.warmup, args.window, args.windows)
            client.on_frame = lambda: windows.frame(client.frames)
            bound = time.monotonic() + args.warmup + args.window * args.windows * 20 + 60
            client.run(lambda: bool(stopped) or len(windows.done) >= args.windows
                       or time.monotonic() > bound)
            print(json.dumps({"windows": windows.done, "clk_tck": os.sysconf("SC_CLK_TCK")}),
                  flush=True)
        client.run(lambda: bool(stopped))
    except (ClientError, OSError) as err:
        print(json.dumps({"error": f"{type(err).__name__}: {err}"}), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
