"""deploy/images/pex_to_venv.py: a PEX's locked sources installed as a venv of another
interpreter, as the trixie images install westonctl (their python3.13 cannot run the PEX)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from deploy.images import pex_to_venv


def _pex(name: str) -> Path:
    path = Path(name) / f"{name}.pex"
    assert path.is_file(), f"{path} is a runtime package of this test"
    return path.resolve()


def test_westonctl_runs_from_the_venv_it_installs_as(tmp_path: Path) -> None:
    launcher = pex_to_venv.install(_pex("westonctl"), tmp_path / "westonctl")
    assert launcher == tmp_path / "westonctl" / "bin" / "westonctl"
    installed = subprocess.run([str(launcher), "--version"], capture_output=True, text=True,
                               timeout=60, check=True)
    from_pex = subprocess.run([sys.executable, str(_pex("westonctl")), "--version"],
                              capture_output=True, text=True, timeout=120, check=True)
    assert installed.stdout == from_pex.stdout and "westonctl" in installed.stdout
    site = next((tmp_path / "westonctl" / "lib").glob("python3.*/site-packages"))
    assert (site / "click" / "__init__.py").is_file()
    assert not (site / ".bootstrap").exists() and not (site / "PEX-INFO").exists()
    assert list((site / "westonctl" / "__pycache__").glob("main.*.pyc"))


def test_a_pex_with_a_compiled_wheel_is_refused_naming_it(tmp_path: Path) -> None:
    # The operator's compiled wheels (msgspec, ...): the error names one by its file name.
    with pytest.raises(pex_to_venv.PexToVenvError,
                       match=r"-cp3\d+-cp3\d+-\S+\.whl is not a pure-Python wheel"):
        pex_to_venv.install(_pex("draplugin"), tmp_path / "draplugin")


def test_an_existing_destination_is_never_written_over(tmp_path: Path) -> None:
    (tmp_path / "westonctl").mkdir()
    with pytest.raises(pex_to_venv.PexToVenvError, match="exists"):
        pex_to_venv.install(_pex("westonctl"), tmp_path / "westonctl")
