"""The capture binary's start-up contract: --help stays light (heavy imports live in commands)."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

from capture.main import cli
from libdisplay import __version__


def test_version_is_the_library_version() -> None:
    result = CliRunner().invoke(cli, ["--version"], prog_name="capture")
    assert result.exit_code == 0
    assert result.output.strip() == f"capture, version {__version__}"


def test_importing_the_command_loads_no_server_stack() -> None:
    probe = (
        "import sys, capture.main; "
        "print(','.join(m for m in ('aiohttp', 'grpc', 'lightkube') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == ""
