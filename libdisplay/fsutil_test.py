from __future__ import annotations

import os
from pathlib import Path

import pytest

from libdisplay import fsutil


def test_atomic_write_replaces_content_and_sets_mode(tmp_path: Path) -> None:
    target = tmp_path / "weston.ini"
    target.write_text("old")
    fsutil.atomic_write(target, "new", mode=0o600)
    assert target.read_text() == "new"
    assert target.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["weston.ini"]


def test_failed_write_leaves_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "state.json"
    target.write_bytes(b"old")

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space"):
        fsutil.atomic_write(target, b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_remove_is_idempotent(tmp_path: Path) -> None:
    target = tmp_path / "spec.yaml"
    target.write_text("x")
    assert fsutil.remove(target) is True
    assert fsutil.remove(target) is False
    assert not target.exists()
