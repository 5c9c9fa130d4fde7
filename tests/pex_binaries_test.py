"""Every built PEX starts and answers --help and --version: what the images run."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from libdisplay import __version__

BINARIES = {
    "declare": "weston's config",
    "westonctl": "Weston compositor",
    "draplugin": "claiming pods",
    "capture": "screenshots and clips",
}


def _pex(name: str) -> Path:
    path = Path(name) / f"{name}.pex"
    if not path.is_file():
        pytest.fail(f"{path} was not built (run under ./pants test, which packages it)")
    return path


def _run(pex: Path, *args: str, pex_root: Path) -> subprocess.CompletedProcess[str]:
    # HOME is unset in the Pants sandbox, so PEX needs a root to unpack into.
    env = {**os.environ, "PEX_ROOT": str(pex_root)}
    return subprocess.run(
        [str(pex), *args], capture_output=True, text=True, env=env, timeout=300, check=False
    )


@pytest.mark.parametrize(("name", "purpose"), BINARIES.items(), ids=list(BINARIES))
def test_pex_help_describes_the_binary(name: str, purpose: str, tmp_path: Path) -> None:
    result = _run(_pex(name), "--help", pex_root=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"Usage: {name} ")
    assert purpose.lower() in result.stdout.lower()


@pytest.mark.parametrize("name", BINARIES, ids=list(BINARIES))
def test_pex_version_is_the_library_version(name: str, tmp_path: Path) -> None:
    result = _run(_pex(name), "--version", pex_root=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{name}, version {__version__}"
