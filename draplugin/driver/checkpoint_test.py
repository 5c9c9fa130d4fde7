from __future__ import annotations

import json
from pathlib import Path

import pytest

from draplugin.driver import checkpoint
from draplugin.driver.checkpoint import Checkpoint, CheckpointError
from draplugin.testing import ENTRY


def test_round_trip_and_state_changes(tmp_path: Path) -> None:
    path = checkpoint.path_in(tmp_path / "plugin")
    assert checkpoint.load(path) == checkpoint.EMPTY
    checkpoint.save(path, checkpoint.EMPTY.with_claim(ENTRY))
    assert checkpoint.load(path).claims == {ENTRY.uid: ENTRY}
    prepared = checkpoint.load(path).with_claim(ENTRY.with_state("prepared"))
    checkpoint.save(path, prepared)
    assert checkpoint.load(path).claims[ENTRY.uid].state == "prepared"
    checkpoint.save(path, prepared.without_claim(ENTRY.uid))
    assert checkpoint.load(path) == Checkpoint(claims={})
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in path.parent.iterdir()] == [path.name]


BROKEN = {
    "not-json": ("{", "is not valid"),
    "future-version": (json.dumps({"version": 2, "claims": {}}), "version 2 is not 1"),
    "bad-state": (
        checkpoint.render(checkpoint.EMPTY.with_claim(ENTRY)).replace('"started"', '"half"'),
        "state 'half' is not one of started, prepared, unpreparing",
    ),
    "missing-field": (json.dumps({"version": 1, "claims": {"u": {"uid": "u"}}}), "is not valid"),
}


@pytest.mark.parametrize("case", list(BROKEN), ids=list(BROKEN))
def test_unreadable_checkpoint_is_an_error_not_a_reset(tmp_path: Path, case: str) -> None:
    text, message = BROKEN[case]
    path = tmp_path / "checkpoint.json"
    path.write_text(text)
    with pytest.raises(CheckpointError, match=message):
        checkpoint.load(path)
