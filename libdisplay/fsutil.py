"""Atomic file writes: every piece of state the binaries write goes through here.

A reader sees either the old file or the new one, never a half-written one, and a
crash at any point leaves no stray temporary file that looks like real state (the
temporary name starts with a dot and ends in `.tmp`).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike[str], data: bytes | str, *, mode: int = 0o644) -> None:
    """Replace `path` with `data`: temp file in the same directory, fsync, rename, fsync dir."""
    target = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, mode)  # the umask must not narrow what the caller asked for
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(target.parent)


def remove(path: str | os.PathLike[str]) -> bool:
    """Remove `path` durably; a file that is already gone is not an error. True if removed."""
    target = Path(path)
    try:
        target.unlink()
    except FileNotFoundError:
        return False
    _fsync_dir(target.parent)
    return True
