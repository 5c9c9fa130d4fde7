"""Atomic file writes: every piece of state the binaries write goes through here.

A reader sees either the old file or the new one, never a half-written one, and a
crash at any point leaves no stray temporary file that looks like real state (the
temporary name starts with a dot and ends in `.tmp`). The temporary name is random and
created with O_EXCL|O_NOFOLLOW, so another writer of the directory cannot plant a file or a
symlink there for the write to land in.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import Final

_CREATE_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# A random 64-bit name collides only when something else is creating names there too.
_CREATE_ATTEMPTS: Final = 8


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _create_temp(target: Path, mode: int) -> tuple[Path, int]:
    """A new, unpredictable temp file beside `target` and its fd; never an existing path."""
    for _ in range(_CREATE_ATTEMPTS):
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(8)}.tmp")
        try:
            return tmp, os.open(tmp, _CREATE_FLAGS, mode)
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {target} in {_CREATE_ATTEMPTS} tries")


def atomic_write(path: str | os.PathLike[str], data: bytes | str, *, mode: int = 0o644) -> None:
    """Replace `path` with `data`: temp file in the same directory, fsync, rename, fsync dir."""
    target = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    tmp, fd = _create_temp(target, mode)
    try:
        try:
            os.fchmod(fd, mode)  # the umask must not narrow what the caller asked for
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
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
