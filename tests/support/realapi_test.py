"""realapi's switch fails, never skips, when the real components are missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import realapi


def _build_script(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "build"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return script


def test_a_bin_dir_without_the_api_server_is_an_error(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "etcd").write_text("")
    monkeypatch.setattr(realapi, "BUILD", _build_script(tmp_path, f"echo {tmp_path}/bin"))
    with pytest.raises(realapi.RealApiError, match="etcd is missing"):
        realapi.binaries()


def test_a_failed_build_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(realapi, "BUILD", _build_script(tmp_path, "exit 3"))
    with pytest.raises(realapi.RealApiError, match="needs the built components"):
        realapi.binaries()


def test_the_switch_is_exactly_one(monkeypatch: pytest.MonkeyPatch) -> None:
    for value, on in (("1", True), ("0", False), ("", False), ("yes", False)):
        monkeypatch.setenv(realapi.ENV, value)
        assert realapi.enabled() is on
