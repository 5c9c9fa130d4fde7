"""Every built PEX starts and answers --help and --version: what the images run."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from libdisplay import __version__
from tests.binaries import BINARIES, pex_env, pex_path

PURPOSE = {
    "declare": "weston's config",
    "westonctl": "Weston compositor",
    "draplugin": "claiming pods",
    "capture": "screenshots and clips",
}


def _run(name: str, *args: str, pex_root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(pex_path(name)), *args],
        capture_output=True,
        text=True,
        env=pex_env(pex_root),
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize("name", BINARIES)
def test_pex_help_describes_the_binary(name: str, pex_root: Path) -> None:
    result = _run(name, "--help", pex_root=pex_root)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"Usage: {name} ")
    assert PURPOSE[name].lower() in result.stdout.lower()


@pytest.mark.parametrize("name", BINARIES)
def test_pex_version_is_the_library_version(name: str, pex_root: Path) -> None:
    result = _run(name, "--version", pex_root=pex_root)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{name}, version {__version__}"
