"""publisher: the node publisher's runtime is built from the operator's settings, and its
compositor is the one `Settings.compositor` makes, so a flag reaches every restart."""

from __future__ import annotations

import time
from pathlib import Path
from unittest import mock

import pytest

from draplugin.compositor import CompositorTimeoutError
from draplugin.node import reprobe
from draplugin.publisher import node_runtime
from draplugin.testing import settings
from tests.support.fake_layout import stand_in_weston

RESTART_TIMEOUT_S = 0.5
# Far below the 30 s a hotplug restart once waited whatever --restart-timeout said, far above
# what a loaded machine adds to a 0.5 s bound.
BOUND_S = 8.0


def test_a_hotplug_restart_waits_the_operators_restart_timeout(tmp_path: Path) -> None:
    s = settings(tmp_path, restart_timeout_s=RESTART_TIMEOUT_S)
    runtime = node_runtime(s, mock.Mock())
    assert runtime.compositor.restart_timeout == RESTART_TIMEOUT_S
    restart = reprobe.restarter(runtime.compositor)
    s.pid_file.parent.mkdir(parents=True)
    with stand_in_weston(tmp_path) as weston:
        s.pid_file.write_text(f"{weston.pid}\n")
        began = time.monotonic()
        # The stand-in never comes back: the restart waits its whole bound.
        with pytest.raises(CompositorTimeoutError, match=f"within {RESTART_TIMEOUT_S:g} s"):
            restart("a monitor was plugged", lambda: False)
        waited = time.monotonic() - began
    assert RESTART_TIMEOUT_S <= waited < BOUND_S
