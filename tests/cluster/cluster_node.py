"""What the tier's tests read from a running `simnode up --cluster local`."""

from __future__ import annotations

import re
import struct
from pathlib import Path

from capture.testing import png_rgb_pixels
from tests.support.simnode_up import Sim


def printed(sim: Sim, key: str) -> Path:
    """The path `up` printed on its `key:` line."""
    return Path(re.findall(rf"^{key}: (\S+)", sim.process.log_text(), re.M)[-1])


def colours(png: Path) -> tuple[tuple[int, int], int]:
    """(size, how many distinct colours) of a PNG of an output."""
    data = png.read_bytes()
    width, height = struct.unpack(">II", data[16:24])
    rgb = png_rgb_pixels(data)
    return (width, height), len(set(zip(rgb[0::3], rgb[1::3], rgb[2::3], strict=True)))
