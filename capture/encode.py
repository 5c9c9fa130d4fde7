"""ffmpeg for clips: which encoder runs, its command line, and the encode itself.

Frames arrive as the layout module's raw frames and go to one ffmpeg process per request on
stdin: a clip's as I420 (4:2:0, BT.601 limited range, made by the module while it filters the
frame), which x264 takes as it is, so neither this process nor ffmpeg converts pixels. Clips
use VA-API (`h264_vaapi`) on the render node when the start-up probe could encode a few frames
there, otherwise libx264 `ultrafast` (the cheapest preset in memory, docs/capture.md §6).
Which one ran is never silent: `EncoderChoice` carries the encoder and the reason, and the
server puts both in a header, a metric label and the log. The server asks the module for
frames within MAX_SIDE, which it shrinks by an integer factor, so clips are encoded at the size
they arrive, and stills are PNG-encoded in-process (`capture.png`). MP4 goes to a pipe
fragmented (`frag_keyframe+empty_moov`) so it streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from libdisplay.compositor.layout import FrameHeader, PixelFormat

log = logging.getLogger(__name__)

Encoder = Literal["vaapi", "software"]
# Why this encoder, in words fit for a metric label anyone may scrape (the reason's text can
# carry ffmpeg's stderr and device paths, so it goes only to the log and to authorized callers).
Cause = Literal["no-render-node", "probe-timeout", "probe-failed", "probe-encoded",
                "encode-failed", "unspecified"]
FFMPEG: Final = "ffmpeg"
# The bound of every frame the server asks the layout module for.
MAX_SIDE: Final = (1920, 1080)
PROBE_TIMEOUT_S: Final = 15.0
# The largest pipe to ffmpeg's stdin asked for (pipe-max-size's default, 1 MiB, is the most an
# unprivileged process may ask).
FEED_PIPE_BYTES: Final = 1 << 20
_STDERR_KEEP: Final = 4096
_FFMPEG_PIX_FMT: Final[dict[PixelFormat, str]] = {
    "XRGB8888": "bgr0",
    "ARGB8888": "bgra",
    "XBGR8888": "rgb0",
    "ABGR8888": "rgba",
    "I420": "yuv420p",
}
# What the frames hold, written into the stream (H.264's VUI) so that a player does not guess:
# BT.601's matrix in limited range, which the module's I420 and ffmpeg's own conversion of RGB
# both use. Untagged HD video is often decoded as BT.709, with shifted colours.
_COLOUR_TAGS: Final = ("-colorspace", "smpte170m", "-color_range", "tv")


@dataclass(frozen=True, slots=True)
class EncoderChoice:
    """The clip encoder and why it is this one."""

    encoder: Encoder
    reason: str
    render_node: Path | None = None
    cause: Cause = "unspecified"


def find_render_node(configured: Path | None, *, dri: Path = Path("/dev/dri")) -> Path | None:
    """The configured render node, else the first `renderD*` the claim delivered, else None."""
    if configured is not None:
        return configured
    nodes = sorted(dri.glob("renderD*")) if dri.is_dir() else []
    return nodes[0] if nodes else None


def probe_argv(render_node: Path) -> list[str]:
    """A tiny real VA-API encode: device creation alone succeeds on drivers that cannot encode."""
    return [
        FFMPEG, "-hide_banner", "-nostdin", "-loglevel", "error",
        "-vaapi_device", os.fspath(render_node),
        "-f", "lavfi", "-i", "color=c=black:s=64x64:r=30:d=0.2",
        "-vf", "format=nv12,hwupload", "-c:v", "h264_vaapi", "-f", "null", "-",
    ]


def last_line(stderr: bytes) -> str:
    """ffmpeg's last message, as printable ASCII: it goes into a response header."""
    text = stderr.decode("ascii", errors="replace").replace("\ufffd", "?")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return "".join(c for c in lines[-1] if c.isprintable()) if lines else "(no message)"


async def probe(render_node: Path | None) -> EncoderChoice:
    """VA-API when a test encode on the render node works, else software with the reason."""
    if render_node is None:
        return EncoderChoice("software", "no render node (/dev/dri/renderD*) was delivered",
                             cause="no-render-node")
    try:
        proc = await asyncio.create_subprocess_exec(
            *probe_argv(render_node),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
    except FileNotFoundError as err:
        # No ffmpeg on this node is an answer, not a crash: stills need no encoder, and a clip
        # reports its own failure. Any other failure to start it (a broken image) ends the
        # server through its task group.
        return EncoderChoice("software", f"cannot start {FFMPEG} for the VA-API probe: {err}",
                             cause="probe-failed")
    try:
        _, stderr = await asyncio.wait_for(proc.communicate(), PROBE_TIMEOUT_S)
    except TimeoutError:
        await kill(proc)
        return EncoderChoice(
            "software", f"VA-API probe on {render_node} took over {PROBE_TIMEOUT_S:g} s",
            cause="probe-timeout",
        )
    if proc.returncode != 0:
        return EncoderChoice(
            "software",
            f"VA-API probe on {render_node} failed (rc={proc.returncode}): {last_line(stderr)}",
            cause="probe-failed",
        )
    return EncoderChoice("vaapi", f"VA-API probe on {render_node} encoded", render_node,
                         cause="probe-encoded")


def _filters(header: FrameHeader) -> list[str]:
    """Crop the stride padding and an odd row or column (4:2:0 needs even sides), undo y-flip.
    An I420 frame needs neither."""
    width, height = header.width - header.width % 2, header.height - header.height % 2
    chain = []
    if (width, height) != (_row_pixels(header), header.height):
        chain.append(f"crop={width}:{height}:0:0")
    if header.y_flip:
        chain.append("vflip")
    return chain


def _row_pixels(header: FrameHeader) -> int:
    """The pixels in a row of memory, stride padding included."""
    return header.width if header.pixel_format == "I420" else header.stride // 4


def _input_args(header: FrameHeader, *, fps: int) -> list[str]:
    return [
        "-f", "rawvideo", "-pix_fmt", _FFMPEG_PIX_FMT[header.pixel_format],
        "-s", f"{_row_pixels(header)}x{header.height}", "-r", str(fps), "-i", "pipe:0",
    ]


def clip_argv(header: FrameHeader, choice: EncoderChoice, *, fps: int) -> list[str]:
    """Raw frames on stdin -> fragmented H.264 MP4 on stdout, a keyframe every second."""
    chain = _filters(header)
    if choice.encoder == "vaapi" and choice.render_node is not None:
        device = ["-vaapi_device", os.fspath(choice.render_node)]
        codec = ["-vf", ",".join([*chain, "format=nv12", "hwupload"]), "-c:v", "h264_vaapi"]
    else:
        device = []
        # zerolatency: no lookahead or B-frames, so x264 holds few frames (memory) and
        # fragments leave as soon as a second is encoded.
        codec = [
            "-vf", ",".join([*chain, "format=yuv420p"]),
            "-c:v", "libx264", "-preset", "ultrafast", "-tune", "zerolatency",
        ]
    return [
        FFMPEG, "-hide_banner", "-loglevel", "error", *device,
        *_input_args(header, fps=fps), *codec, *_COLOUR_TAGS, "-g", str(fps),
        "-movflags", "frag_keyframe+empty_moov+default_base_moof", "-f", "mp4", "pipe:1",
    ]


async def kill(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL (when still running) and reap."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    await proc.wait()


async def start(argv: Sequence[str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


def frame_pipe() -> tuple[int, int]:
    """A pipe for raw frames (read end, write end), as large as an unprivileged process may make
    one (FEED_PIPE_BYTES at most): a 1080p frame is 8 MB, which the default 64 KiB pipe passes
    in some 128 writes, each waking ffmpeg. Where the limits refuse it, the default pipe."""
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
    try:
        limit = int(Path("/proc/sys/fs/pipe-max-size").read_text())
    except (OSError, ValueError):
        limit = FEED_PIPE_BYTES
    # EPERM: the user's pipes already hold pipe-user-pages-soft pages.
    with contextlib.suppress(OSError):
        fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, min(limit, FEED_PIPE_BYTES))
    return read_fd, write_fd


async def start_fed(argv: Sequence[str]) -> tuple[asyncio.subprocess.Process, int]:
    """ffmpeg reading stdin from a pipe whose write end (returned) a thread writes with plain
    blocking writes: no copy of each frame into an asyncio transport buffer."""
    read_fd, write_fd = frame_pipe()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=read_fd,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except BaseException:
        os.close(write_fd)
        raise
    finally:
        os.close(read_fd)
    return proc, write_fd


def write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


async def read_stderr(proc: asyncio.subprocess.Process) -> bytes:
    """All of stderr, keeping the tail: ffmpeg must never block on a full pipe."""
    assert proc.stderr is not None
    kept = b""
    while chunk := await proc.stderr.read(4096):
        kept = (kept + chunk)[-_STDERR_KEEP:]
    return kept
