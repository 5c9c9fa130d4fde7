"""state: whether a state dir can take a new node, and reading a running node's state."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from simnode.cli import state


def _state(pid: int) -> state.State:
    return state.State(pid=pid, node_name="n", api_url="http://x", metrics_url="http://y",
                       monitors=2, xvfb_display=":9", pids={})


def _dead_pid() -> int:
    # Above the largest pid_max Linux allows (2**22): never a live process.
    return 2**22 + 1


def _stopped_run(layout: state.Layout) -> None:
    layout.root.mkdir()
    layout.marker.write_text("")
    (layout.root / "logs").mkdir()


def _killed_run(layout: state.Layout) -> None:
    _stopped_run(layout)
    state.save(layout, _state(_dead_pid()))


def _running(layout: state.Layout) -> None:
    _stopped_run(layout)
    state.save(layout, _state(os.getpid()))


def _foreign(layout: state.Layout) -> None:
    layout.root.mkdir()
    (layout.root / "notes.txt").write_text("mine")


CASES = {
    # id: (what the dir holds, clean, expected error text or None when it gets emptied)
    "stopped": (_stopped_run, False, None),
    "killed": (_killed_run, False, "holds a killed run"),
    "killed-clean": (_killed_run, True, None),
    "running": (_running, True, "already runs"),
    "foreign": (_foreign, True, "not a simnode state dir"),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_check_free(tmp_path: Path, case: str) -> None:
    make, clean, error = CASES[case]
    layout = state.Layout(tmp_path / "node")
    make(layout)
    if error is None:
        state.check_free(layout, clean=clean)
        assert not layout.root.exists()
    else:
        with pytest.raises(state.StateError, match=error):
            state.check_free(layout, clean=clean)
        assert layout.root.exists()


def test_load_says_how_to_start_when_nothing_runs(tmp_path: Path) -> None:
    layout = state.Layout(tmp_path)
    with pytest.raises(state.StateError, match="start one with `simnode up`"):
        state.load(layout)
    state.save(layout, _state(_dead_pid()))
    with pytest.raises(state.StateError, match="simnode up --clean"):
        state.load(layout)
    state.save(layout, _state(os.getpid()))
    assert state.load(layout).pid == os.getpid()
