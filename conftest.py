"""Fixtures every test package can use."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def shared_data_dir() -> Path:
    """The shared EDID and DDC/CI corpus, kept beside the checkout and never copied in.

    ./pants exports its absolute path as DISPLAY_SHARED_DATA; a plain pytest run from
    the repo root finds it at ../shared/data.
    """
    env = os.environ.get("DISPLAY_SHARED_DATA")
    path = Path(env) if env else Path(__file__).resolve().parent.parent / "shared" / "data"
    if not path.is_dir():
        raise RuntimeError(f"shared data not found at {path}; set DISPLAY_SHARED_DATA")
    return path


@pytest.fixture(scope="session")
def shared_data() -> Path:
    return shared_data_dir()
