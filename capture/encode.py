"""ffmpeg for stills and clips: which encoder runs, its command line, and the encode itself.

Frames arrive as the layout module's raw pixels and go to one ffmpeg process per request on
stdin. Clips use VA-API (`h264_vaapi`) on the render node when the start-up probe could encode
a few frames there, otherwise libx264 `ultrafast` (the cheapest preset in memory, weston.md §6).
Which one ran is never silent: `EncoderChoice` carries the encoder and the reason, and the
server puts both in a header, a metric label and the log. Frames larger than 1080p are scaled
down to fit it; MP4 goes to a pipe fragmented (`frag_keyframe+empty_moov`) so it streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from libdisplay.layout import FrameHeader, PixelFormat

log = logging.getLogger(__name__)

Encoder = Literal["vaapi", "software"]
FFMPEG: Final = "ffmpeg"
MAX_SIDE: Final = (1920, 1080)
PROBE_TIMEOUT_S: Final = 15.0
STILL_TIMEOUT_S: Final = 20.0
_STDERR_KEEP: Final = 4096
_FFMPEG_PIX_FMT: Final[dict[PixelFormat, str]] = {
    "XRGB8888": "bgr0",
    "ARGB8888": "bgra",
    "XBGR8888": "rgb0",
    "ABGR8888": "rgba",
}


class EncodeError(Exception):
    """Base of every error this module raises."""


class FfmpegError(EncodeError):
    """ffmpeg exited non-zero or was killed; the message has the tail of its stderr."""


@dataclass(frozen=True, slots=True)
class EncoderChoice:
    """The clip encoder and why it is this one."""

    encoder: Encoder
    reason: str
    render_node: Path | None = None


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
        return EncoderChoice("software", "no render node (/dev/dri/renderD*) was delivered")
    proc = await asyncio.create_subprocess_exec(
        *probe_argv(render_node),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        _, stderr = await asyncio.wait_for(proc.communicate(), PROBE_TIMEOUT_S)
    except TimeoutError:
        await kill(proc)
        return EncoderChoice(
            "software", f"VA-API probe on {render_node} took over {PROBE_TIMEOUT_S:g} s"
        )
    if proc.returncode != 0:
        return EncoderChoice(
            "software",
            f"VA-API probe on {render_node} failed (rc={proc.returncode}): {last_line(stderr)}",
        )
    return EncoderChoice("vaapi", f"VA-API probe on {render_node} encoded", render_node)


def _scaled(width: int, height: int) -> bool:
    return width > MAX_SIDE[0] or height > MAX_SIDE[1]


def is_large(header: FrameHeader) -> bool:
    """Larger than 1080p: scaled down, and four times the bytes per frame."""
    return _scaled(header.width, header.height)


def output_size(header: FrameHeader) -> tuple[int, int]:
    """The size a clip or still comes out at: even sides, fitted into 1080p when larger."""
    width, height = header.width, header.height
    if _scaled(width, height):
        ratio = min(MAX_SIDE[0] / width, MAX_SIDE[1] / height)
        width, height = round(width * ratio), round(height * ratio)
    return width - width % 2, height - height % 2


def _filters(header: FrameHeader, *, even: bool) -> list[str]:
    """Crop the stride padding (and an odd row/column for 4:2:0), undo y-flip, fit 1080p."""
    width, height = header.width, header.height
    if even:
        width, height = width - width % 2, height - height % 2
    chain = []
    if (width, height) != (header.stride // 4, header.height):
        chain.append(f"crop={width}:{height}:0:0")
    if header.y_flip:
        chain.append("vflip")
    if _scaled(header.width, header.height):
        out_w, out_h = output_size(header)
        chain.append(f"scale={out_w}:{out_h}:flags=bilinear")
    return chain


def _input_args(header: FrameHeader, *, fps: int | None) -> list[str]:
    rate = ["-r", str(fps)] if fps else []
    return [
        "-f", "rawvideo", "-pix_fmt", _FFMPEG_PIX_FMT[header.pixel_format],
        "-s", f"{header.stride // 4}x{header.height}", *rate, "-i", "pipe:0",
    ]


def clip_argv(header: FrameHeader, choice: EncoderChoice, *, fps: int) -> list[str]:
    """Raw frames on stdin -> fragmented H.264 MP4 on stdout, a keyframe every second."""
    chain = _filters(header, even=True)
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
        *_input_args(header, fps=fps), *codec, "-g", str(fps),
        "-movflags", "frag_keyframe+empty_moov+default_base_moof", "-f", "mp4", "pipe:1",
    ]


def still_argv(header: FrameHeader) -> list[str]:
    """One raw frame on stdin -> PNG on stdout (fast compression: latency over bytes)."""
    chain = _filters(header, even=False)
    vf = ["-vf", ",".join(chain)] if chain else []
    return [
        FFMPEG, "-hide_banner", "-loglevel", "error", *_input_args(header, fps=None), *vf,
        "-frames:v", "1", "-c:v", "png", "-compression_level", "1", "-f", "image2pipe", "pipe:1",
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


async def start_fed(argv: Sequence[str]) -> tuple[asyncio.subprocess.Process, int]:
    """ffmpeg reading stdin from a pipe whose write end (returned) a thread writes with plain
    blocking writes: no copy of each frame into an asyncio transport buffer."""
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
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


def write_all(fd: int, data: bytes) -> None:
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


async def still_png(header: FrameHeader, pixels: bytes) -> bytes:
    """Encode one frame to PNG; FfmpegError on a non-zero exit or after STILL_TIMEOUT_S."""
    proc = await start(still_argv(header))
    try:
        png, stderr = await asyncio.wait_for(proc.communicate(pixels), STILL_TIMEOUT_S)
    except TimeoutError as exc:
        raise FfmpegError(f"PNG encode took over {STILL_TIMEOUT_S:g} s") from exc
    finally:
        await kill(proc)
    if proc.returncode != 0 or not png:
        raise FfmpegError(f"PNG encode failed (rc={proc.returncode}): {last_line(stderr)}")
    return png
