"""The built PEXes as tests run them: found in the Pants sandbox, unpacked into a given PEX_ROOT."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

BINARIES = ("declare", "westonctl", "draplugin", "capture")


def pex_path(name: str) -> Path:
    """The PEX Pants built for this test (runtime_package_dependencies: <dir>/<name>.pex)."""
    path = Path(name) / f"{name}.pex"
    if not path.is_file():
        pytest.fail(f"{path} was not built: run under ./pants test, which packages it")
    return path.resolve()


def pex_env(pex_root: Path, **extra: str) -> dict[str, str]:
    """The environment for a PEX: HOME is unset in the sandbox, so PEX needs a root to unpack."""
    return {**os.environ, "PEX_ROOT": str(pex_root), **extra}
