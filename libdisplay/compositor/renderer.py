"""The renderer weston runs, as westonctl writes it beside weston's pid file for the operator.

westonctl starts weston with the renderer the DaemonSet names and, when GL cannot start, again
with pixman (westonctl.supervisor); the operator's metrics report what this file says. One JSON
object: {"requested": "gl", "running": "pixman", "fallbacks": 1}.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

from libdisplay import fsutil

RENDERER_FILE: Final = "renderer"
"""Its name, in the directory of weston's pid file (the pod's /etc/weston)."""


class RendererFileError(ValueError):
    """The renderer file holds something other than what westonctl writes."""


@dataclass(frozen=True, slots=True)
class RendererState:
    requested: str
    """The renderer westonctl was asked for ("auto" when none was named)."""
    running: str
    """The one the current weston was started with."""
    fallbacks: int
    """Starts with pixman after GL failed, since westonctl started."""


def write_renderer_state(path: Path, state: RendererState) -> None:
    fsutil.atomic_write(path, json.dumps(asdict(state)) + "\n")


def read_renderer_state(path: Path) -> RendererState | None:
    """What `path` says; None when there is no file (no westonctl, or an older one)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        fields = json.loads(text)
        state = RendererState(requested=fields["requested"], running=fields["running"],
                              fallbacks=fields["fallbacks"])
        if not (isinstance(state.requested, str) and isinstance(state.running, str)
                and isinstance(state.fallbacks, int) and state.fallbacks >= 0):
            raise TypeError("a field of the wrong type")
    except (ValueError, KeyError, TypeError) as err:
        raise RendererFileError(f"{path} is not a renderer file: {text[:80]!r}") from err
    return state
