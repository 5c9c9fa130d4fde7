"""Fixtures every test package can use."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTDATA = Path(__file__).resolve().parent / "testdata"


def testdata_dir() -> Path:
    """The EDID and DDC/CI corpus in the repo (testdata/README.md)."""
    if not TESTDATA.is_dir():
        raise RuntimeError(f"the test corpus is missing: {TESTDATA} is not a directory")
    return TESTDATA


@pytest.fixture(scope="session")
def testdata() -> Path:
    return testdata_dir()
