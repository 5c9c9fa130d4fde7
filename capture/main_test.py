"""The capture binary's start-up contract: --help stays light (heavy imports live in commands)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from capture.environment import ENVIRONMENT
from capture.main import cli
from libdisplay import __version__


def test_version_is_the_library_version() -> None:
    result = CliRunner().invoke(cli, ["--version"], prog_name="capture")
    assert result.exit_code == 0
    assert result.output.strip() == f"capture, version {__version__}"


# What only the server uses: the HTTP and TLS stack, the event loop, the API server's client.
SERVER_STACK = ("aiohttp", "grpc", "lightkube", "asyncio", "ssl", "capture.server",
                "capture.auth", "libdisplay.kube.access")


@pytest.mark.parametrize("argv", [["--help"], ["outputs", "--help"], ["shoot", "--help"]])
def test_help_loads_no_server_stack(argv: list[str]) -> None:
    probe = (
        "import contextlib, sys, capture.main\n"
        f"with contextlib.suppress(SystemExit): capture.main.cli({argv!r}, prog_name='capture')\n"
        f"print(','.join(m for m in {SERVER_STACK!r} if m in sys.modules), file=sys.stderr)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stderr.strip() == ""


def test_outputs_lists_the_ini_outputs(tmp_path: Path) -> None:
    ini = tmp_path / "weston.ini"
    ini.write_text("[core]\nshell=layout.so\n\n[output]\nname=HDMI-A-1\nmode=preferred\n\n"
                   "[output]\nname=DP-1\nmode=1920x1080\n")
    result = CliRunner().invoke(cli, ["outputs", "--config", str(ini)], prog_name="capture")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == ["HDMI-A-1", "DP-1"]


def test_outputs_names_an_unreadable_ini(tmp_path: Path) -> None:
    missing = tmp_path / "missing.ini"
    result = CliRunner().invoke(cli, ["outputs", "--config", str(missing)])
    assert result.exit_code == 1
    assert f"cannot read {missing}" in result.output


def test_capture_without_node_name_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    result = CliRunner().invoke(cli, ["capture"])
    assert result.exit_code == 2
    assert "NODE_NAME" in result.output


def test_capture_help_lists_every_setting_with_its_default() -> None:
    result = CliRunner().invoke(cli, ["capture", "--help"], prog_name="capture")
    assert result.exit_code == 0
    for name, default, _ in ENVIRONMENT:
        line = next((ln for ln in result.output.splitlines() if ln.split()[:1] == [name]), "")
        assert f"[default: {default}]" in line, name


def test_a_bad_capture_addr_is_named_and_points_to_the_settings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "n")
    monkeypatch.setenv("CAPTURE_ADDR", "9201")
    result = CliRunner().invoke(cli, ["capture"], prog_name="capture")
    assert result.exit_code == 2
    assert "CAPTURE_ADDR must be [HOST]:PORT, got '9201'" in result.output
    assert "capture capture --help" in result.output
