from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def pex_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One PEX_ROOT per test session, so each PEX unpacks its venv once."""
    return tmp_path_factory.mktemp("pex-root")
