"""ffmpeg command lines for each frame shape, and the VA-API probe failing for real here."""

from __future__ import annotations

import asyncio
import fcntl
import os
from pathlib import Path

import pytest

from capture import encode
from capture.encode import EncoderChoice
from libdisplay.compositor.layout import FrameHeader, PixelFormat


def header(
    width: int, height: int, *, stride: int | None = None, y_flip: bool = False,
    pixel_format: PixelFormat = "XRGB8888",
) -> FrameHeader:
    stride = stride or width * 4
    return FrameHeader(width=width, height=height, stride=stride, pixel_format=pixel_format,
                       y_flip=y_flip, size=stride * height)


def _vf(argv: list[str]) -> str:
    return argv[argv.index("-vf") + 1] if "-vf" in argv else ""


@pytest.mark.parametrize(
    ("frame", "vf"),
    [
        (header(1920, 1080), "format=yuv420p"),
        # The module sends frames within 1080p; a larger one would be encoded as it is.
        (header(3840, 2160), "format=yuv420p"),
        (header(1920, 1080, y_flip=True), "vflip,format=yuv420p"),
        (header(1918, 1080, stride=1920 * 4), "crop=1918:1080:0:0,format=yuv420p"),
        (header(321, 240), "crop=320:240:0:0,format=yuv420p"),
    ],
    ids=["plain", "never-scaled", "y-flipped", "stride-padding", "odd-width"],
)
def test_clip_filters(frame: FrameHeader, vf: str) -> None:
    argv = encode.clip_argv(frame, EncoderChoice("software", "test"), fps=30)
    assert _vf(argv) == vf
    assert argv[argv.index("-movflags") + 1].startswith("frag_keyframe+empty_moov")
    assert argv[argv.index("-c:v") + 1] == "libx264"


@pytest.mark.parametrize(
    ("pixel_format", "ffmpeg_format"),
    [("XRGB8888", "bgr0"), ("ARGB8888", "bgra"), ("XBGR8888", "rgb0"), ("ABGR8888", "rgba")],
    ids=["xrgb", "argb", "xbgr", "abgr"],
)
def test_pixel_formats_map_to_ffmpeg(pixel_format: PixelFormat, ffmpeg_format: str) -> None:
    argv = encode.clip_argv(header(64, 48, pixel_format=pixel_format),
                            EncoderChoice("software", "test"), fps=30)
    assert argv[argv.index("-pix_fmt") + 1] == ffmpeg_format
    assert argv[argv.index("-s") + 1] == "64x48"


def test_an_i420_frame_goes_to_x264_as_it_is_tagged_bt601() -> None:
    frame = FrameHeader(width=1920, height=1080, stride=1920, pixel_format="I420",
                        y_flip=False, size=1920 * 1080 * 3 // 2)
    argv = encode.clip_argv(frame, EncoderChoice("software", "test"), fps=30)
    assert argv[argv.index("-pix_fmt") + 1] == "yuv420p"
    assert argv[argv.index("-s") + 1] == "1920x1080"
    assert _vf(argv) == "format=yuv420p"
    assert argv[argv.index("-colorspace") + 1] == "smpte170m"
    assert argv[argv.index("-color_range") + 1] == "tv"


def test_vaapi_clip_uploads_to_the_render_node() -> None:
    choice = EncoderChoice("vaapi", "probe encoded", Path("/dev/dri/renderD129"))
    argv = encode.clip_argv(header(1920, 1080), choice, fps=30)
    assert argv[argv.index("-vaapi_device") + 1] == "/dev/dri/renderD129"
    assert _vf(argv).endswith("format=nv12,hwupload")
    assert argv[argv.index("-c:v") + 1] == "h264_vaapi"


def test_probe_without_render_node_is_software_with_reason() -> None:
    choice = asyncio.run(encode.probe(None))
    assert choice.encoder == "software"
    assert "no render node" in choice.reason


def test_probe_failing_here_is_software_with_ffmpegs_reason(tmp_path: Path) -> None:
    # No VA-API on this machine: ffmpeg's device creation fails fast (docs/capture.md §6).
    node = tmp_path / "renderD128"
    node.touch()
    choice = asyncio.run(encode.probe(node))
    assert choice.encoder == "software"
    assert choice.reason.startswith(f"VA-API probe on {node} failed (rc=")


def test_probe_with_no_ffmpeg_on_the_node_is_software_with_the_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = tmp_path / "renderD128"
    node.touch()
    monkeypatch.setenv("PATH", str(tmp_path))
    choice = asyncio.run(encode.probe(node))
    assert (choice.encoder, choice.cause) == ("software", "probe-failed")
    assert choice.reason.startswith("cannot start ffmpeg for the VA-API probe: ")


def test_find_render_node_prefers_the_configured_one(tmp_path: Path) -> None:
    (tmp_path / "renderD129").touch()
    (tmp_path / "renderD128").touch()
    assert encode.find_render_node(None, dri=tmp_path) == tmp_path / "renderD128"
    assert encode.find_render_node(Path("/x"), dri=tmp_path) == Path("/x")
    assert encode.find_render_node(None, dri=tmp_path / "missing") is None


@pytest.mark.parametrize(
    ("stderr", "line"),
    [(b"", "(no message)"), (b"a\nb\n\n", "b"), (b"caf\xc3\xa9 \x1b[0m\n", "caf?? [0m")],
    ids=["empty", "last-non-empty", "non-ascii-and-control"],
)
def test_last_line_is_header_safe(stderr: bytes, line: str) -> None:
    assert encode.last_line(stderr) == line


def test_frames_go_through_a_pipe_of_the_largest_size_allowed() -> None:
    read_fd, write_fd = encode.frame_pipe()
    try:
        limit = int(Path("/proc/sys/fs/pipe-max-size").read_text())
        want = min(limit, encode.FEED_PIPE_BYTES)
        assert fcntl.fcntl(write_fd, fcntl.F_GETPIPE_SZ) == want
        assert fcntl.fcntl(read_fd, fcntl.F_GETPIPE_SZ) == want
    finally:
        os.close(read_fd)
        os.close(write_fd)
