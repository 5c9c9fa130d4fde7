"""The capture image's own ffmpeg encodes a clip as the capture server runs it: raw frames on
stdin to fragmented H.264 MP4 on stdout (capture/encode.clip_argv's software path), which the
host's ffprobe reads back. The frames are the server's, I420 from the layout module, tagged
BT.601; and packed XRGB with the crop and flip a padded, y-flipped frame needs.

The image's ffmpeg is compiled with only the components capture asks for
(images/capture/ffmpeg.sh), so this is where one left out would show before a clip fails.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from capture.encode import EncoderChoice, clip_argv
from deploy.images.podmanrun import SmokeError, podman_bytes
from libdisplay.compositor.layout import FrameHeader

WIDTH, HEIGHT, STRIDE, FRAMES, FPS = 321, 240, 1296, 30, 30


def packed_frames() -> tuple[FrameHeader, bytes]:
    """FRAMES XRGB frames of a gradient moving sideways, each row padded to STRIDE bytes, the
    bottom row first."""
    header = FrameHeader(width=WIDTH, height=HEIGHT, stride=STRIDE, pixel_format="XRGB8888",
                         y_flip=True, size=STRIDE * HEIGHT)
    out = bytearray()
    for n in range(FRAMES):
        row = b"".join(bytes(((x + 8 * n) % 256, 128, 255 - (x + 8 * n) % 256, 0))
                       for x in range(WIDTH))
        out += (row + bytes(STRIDE - WIDTH * 4)) * HEIGHT
    return header, bytes(out)


def i420_frames() -> tuple[FrameHeader, bytes]:
    """FRAMES I420 frames (the even part, as the module sends them) of a moving gradient."""
    width, height = WIDTH - 1, HEIGHT
    header = FrameHeader(width=width, height=height, stride=width, pixel_format="I420",
                         y_flip=False, size=width * height * 3 // 2)
    out = bytearray()
    for n in range(FRAMES):
        luma = bytes(16 + (x + 8 * n) % 220 for x in range(width)) * height
        chroma = bytes(range(64, 64 + width // 2)) * (height // 2)
        out += luma + chroma + chroma[::-1]
    return header, bytes(out)


def encode(image: str, header: FrameHeader, stdin: bytes) -> bytes:
    argv = clip_argv(header, EncoderChoice("software", "smoke"), fps=FPS)
    done = podman_bytes("run", "--rm", "-i", "--cap-drop=ALL", "--entrypoint", argv[0], image,
                        *argv[1:], stdin=stdin, timeout=300)
    if done.returncode != 0 or not done.stdout:
        raise SmokeError(f"{image}: ffmpeg rc {done.returncode}, {len(done.stdout)} bytes of "
                         f"{header.pixel_format} clip: "
                         f"{done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def probe(image: str, clip: bytes) -> tuple[str, int, int, int, str]:
    """(codec, width, height, frames, colour matrix) as ffprobe reads the clip."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "clip.mp4"
        path.write_bytes(clip)
        done = subprocess.run(
            ["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
             "-show_entries", "stream=codec_name,width,height,nb_read_frames,color_space",
             "-of", "json", str(path)], capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise SmokeError(f"{image}: the clip does not decode: {done.stderr.strip()}")
    stream = json.loads(done.stdout)["streams"][0]
    return (stream["codec_name"], stream["width"], stream["height"],
            int(stream["nb_read_frames"]), stream.get("color_space", "unknown"))


def check_clip(image: str) -> list[str]:
    lines = []
    for header, stdin in (i420_frames(), packed_frames()):
        clip = encode(image, header, stdin)
        seen = probe(image, clip)
        want = ("h264", WIDTH - 1, HEIGHT, FRAMES, "smpte170m")
        if seen != want:
            raise SmokeError(f"{image}: {header.pixel_format} clip is (codec, width, height, "
                             f"frames, matrix) {seen}, not {want}")
        lines.append(f"ffmpeg encoded {FRAMES} raw {header.pixel_format} {header.width}x"
                     f"{header.height} frames from stdin to a {len(clip)}-byte {seen[0]} MP4 of "
                     f"{seen[1]}x{seen[2]}, {seen[4]} (read back by ffprobe)")
    return lines
