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


def test_a_symlink_at_the_old_temp_name_is_not_followed(tmp_path: Path) -> None:
    """Another writer of the directory plants a symlink where the temp file used to go."""
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    target = tmp_path / "weston.ini"
    (tmp_path / f".weston.ini.{os.getpid()}.tmp").symlink_to(victim)
    fsutil.atomic_write(target, "new")
    assert (victim.read_text(), target.read_text()) == ("untouched", "new")
    assert not target.is_symlink()


def test_temp_names_are_unpredictable_and_exclusive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[tuple[str, int]] = []
    real_open = os.open

    def recording_open(path: str | os.PathLike[str], flags: int, *args: int) -> int:
        opened.append((os.fspath(path), flags))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", recording_open)
    for _ in range(2):
        fsutil.atomic_write(tmp_path / "state.json", b"x")
    temps = [(path, flags) for path, flags in opened if path.endswith(".tmp")]
    assert len(temps) == 2 and temps[0][0] != temps[1][0]
    assert all(str(os.getpid()) not in Path(path).name for path, _ in temps)
    assert all(flags & os.O_EXCL and flags & os.O_NOFOLLOW for _, flags in temps)
