"""A video wall's node: `simnode up --monitors 16`, every output up and published.

The whole pod on a simulated card of 16 connectors: weston's x11 backend runs 16 outputs,
the operator publishes 16 devices and keeps 16 Displays, and a claim with a mode on the last
output is prepared and released like on three.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from simnode.node import card
from simnode.simnode_test import Sim, _running

MONITORS = 16


@pytest.fixture(scope="module")
def wall(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    with _running(tmp_path_factory.mktemp("wall"), f"--monitors={MONITORS}") as node:
        yield node


def test_sixteen_outputs_run_and_are_published(wall: Sim) -> None:
    chosen = card.monitors(MONITORS)
    assert sorted(wall.devices()) == sorted(m.device for m in chosen)
    modes = wall.modes()
    assert sorted(modes) == sorted(m.output for m in chosen)
    for monitor in chosen:
        preferred = monitor.modes[0]
        assert modes[monitor.output] == f"{preferred.width}x{preferred.height}@60"
    status = wall.run("status")
    for monitor in chosen:
        assert f"sim-node-1.{monitor.device}: connected=True" in status


def test_a_claim_with_a_mode_on_the_sixteenth_output(wall: Sim, tmp_path: Path) -> None:
    last = card.monitors(MONITORS)[-1]
    uid = wall.run("claim", last.device, "--mode=1024x768@60").split()[-1]
    assert wall.modes()[last.output] == "1024x768@60"
    wall.run("release", uid)
    preferred = last.modes[0]
    assert wall.modes()[last.output] == f"{preferred.width}x{preferred.height}@60"
