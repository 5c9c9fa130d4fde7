"""The capture image's own ffmpeg encodes a clip as the capture server runs it: raw frames on
stdin (capture/encode.clip_argv's software path, with the crop and flip a padded, y-flipped
frame needs) to fragmented H.264 MP4 on stdout, which the host's ffprobe reads back.

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


def frames() -> bytes:
    """FRAMES XRGB frames of a gradient moving sideways, each row padded to STRIDE bytes."""
    out = bytearray()
    for n in range(FRAMES):
        row = b"".join(bytes(((x + 8 * n) % 256, 128, 255 - (x + 8 * n) % 256, 0))
                       for x in range(WIDTH))
        out += (row + bytes(STRIDE - WIDTH * 4)) * HEIGHT
    return bytes(out)


def check_clip(image: str) -> list[str]:
    header = FrameHeader(width=WIDTH, height=HEIGHT, stride=STRIDE, pixel_format="XRGB8888",
                         y_flip=True, size=STRIDE * HEIGHT)
    argv = clip_argv(header, EncoderChoice("software", "smoke"), fps=FPS)
    done = podman_bytes("run", "--rm", "-i", "--cap-drop=ALL", "--entrypoint", argv[0], image,
                        *argv[1:], stdin=frames(), timeout=300)
    clip = done.stdout
    if done.returncode != 0 or not clip:
        raise SmokeError(f"{image}: ffmpeg rc {done.returncode}, {len(clip)} bytes of clip: "
                         f"{done.stderr.decode(errors='replace').strip()}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "clip.mp4"
        path.write_bytes(clip)
        probe = subprocess.run(
            ["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
             "-show_entries", "stream=codec_name,width,height,nb_read_frames", "-of", "json",
             str(path)], capture_output=True, text=True, timeout=60, check=False)
    if probe.returncode != 0:
        raise SmokeError(f"{image}: the clip does not decode: {probe.stderr.strip()}")
    stream = json.loads(probe.stdout)["streams"][0]
    seen = (stream["codec_name"], stream["width"], stream["height"], int(stream["nb_read_frames"]))
    want = ("h264", WIDTH - 1, HEIGHT, FRAMES)
    if seen != want:
        raise SmokeError(f"{image}: clip is (codec, width, height, frames) {seen}, not {want}")
    return [f"ffmpeg encoded {FRAMES} raw {WIDTH}x{HEIGHT} frames from stdin to a "
            f"{len(clip)}-byte {seen[0]} MP4 of {seen[1]}x{seen[2]} (read back by ffprobe)"]
