"""Fixtures every test package can use."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

TESTDATA = Path(__file__).resolve().parent / "testdata"
_OWN_BASETEMP = pytest.StashKey[Path]()


def testdata_dir() -> Path:
    """The EDID and DDC/CI corpus in the repo (testdata/README.md)."""
    if not TESTDATA.is_dir():
        raise RuntimeError(f"the test corpus is missing: {TESTDATA} is not a directory")
    return TESTDATA


@pytest.fixture(scope="session")
def testdata() -> Path:
    return testdata_dir()


def pytest_configure(config: pytest.Config) -> None:
    # Tests bind unix sockets under tmp_path, and AF_UNIX paths stop at 107
    # bytes: pytest's default /tmp/pytest-of-USER/pytest-NNNN/ grows with every
    # run on a machine, so each session gets a short directory of its own.
    if config.option.basetemp is None:
        config.option.basetemp = tempfile.mkdtemp(prefix="pt-", dir="/tmp")
        config.stash[_OWN_BASETEMP] = Path(config.option.basetemp)


def pytest_unconfigure(config: pytest.Config) -> None:
    own = config.stash.get(_OWN_BASETEMP, None)
    if own is not None:
        shutil.rmtree(own, ignore_errors=True)
