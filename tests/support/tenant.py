"""A tenant: a solid-colour Wayland client that can prove its connection is the one it opened.

`Tenant.roundtrip()` sends a `wl_display.sync` on the client's own connection and waits for its
`done`: a compositor that restarted would have closed that connection, so an answer means the
same compositor kept the same client. `wait_still(...)` captures the tenant's output through the
layout module's capture socket and says whether its pixels are the tenant's colour.
"""

from __future__ import annotations

import time
from pathlib import Path

from libdisplay.compositor.layout import LayoutCapture, LayoutError
from tests.support.layout import SolidClient

# Returns at the answer: a bound for a weston on a loaded machine, not a latency.
ROUNDTRIP_TIMEOUT_S = 30.0
STILL_TIMEOUT_S = 30.0


class Tenant(SolidClient):
    """A SolidClient that knows the output it fills."""

    def __init__(self, socket_path: Path, *, colour: tuple[int, int, int],
                 output: str) -> None:
        self.output = output
        super().__init__(socket_path, colour=colour)

    def roundtrip(self, timeout: float = ROUNDTRIP_TIMEOUT_S) -> bool:
        """Whether a wl_display.sync on this connection is answered within `timeout`."""
        return not self.closed.is_set() and super().roundtrip(timeout) \
            and not self.closed.is_set()


def wait_still(capture_socket: Path, output: str, colour: tuple[int, int, int], *,
               timeout: float = STILL_TIMEOUT_S) -> tuple[int, int]:
    """Capture `output` until its corners and centre are `colour`; its frame size.
    AssertionError naming what was seen when the bound passes."""
    deadline = time.monotonic() + timeout
    seen: object = None
    with LayoutCapture(capture_socket, timeout=timeout) as capture:
        while True:
            try:
                frame = capture.frame(output)
            except LayoutError as err:  # an output being re-moded may refuse a frame once
                seen = err
            else:
                w, h = frame.header.width, frame.header.height
                points = ((0, 0), (w - 1, h - 1), (w // 2, h // 2))
                seen = [frame.rgb(x, y) for x, y in points]
                if all(c == colour for c in seen):
                    return w, h
            if time.monotonic() > deadline:
                raise AssertionError(f"{output}: wanted {colour} everywhere, last saw {seen}")
            time.sleep(0.05)
