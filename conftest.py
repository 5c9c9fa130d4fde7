"""Fixtures every test package can use."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from pathlib import Path

import pytest

# In CI a skipped test fails, but for a tier not asked for (tests/support/ci.py).
from tests.support.ci import pytest_runtest_makereport  # noqa: F401

TESTDATA = Path(__file__).resolve().parent / "testdata"
_OWN_BASETEMP = pytest.StashKey[Path]()
_PREFIX = "pt-"
_ABANDONED_AFTER_S = 6 * 3600


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
        _remove_abandoned(Path("/tmp"))
        config.option.basetemp = tempfile.mkdtemp(prefix=_PREFIX, dir="/tmp")
        config.stash[_OWN_BASETEMP] = Path(config.option.basetemp)


def _remove_abandoned(parent: Path) -> None:
    """What sessions killed before their unconfigure left: no session lives this long."""
    cutoff = time.time() - _ABANDONED_AFTER_S
    for old in parent.glob(f"{_PREFIX}*"):
        with contextlib.suppress(OSError):
            if old.stat().st_mtime < cutoff:
                shutil.rmtree(old, ignore_errors=True)


def pytest_unconfigure(config: pytest.Config) -> None:
    own = config.stash.get(_OWN_BASETEMP, None)
    if own is not None:
        shutil.rmtree(own, ignore_errors=True)
