"""The seat path of the weston container: libseat's noop backend, as westonctl starts weston.

On this GPU-less machine the DRM backend must get past opening the seat and fail only for want
of a card ("no drm device found"). A real kernel DRM device is the VM tier's job.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from westonctl.supervisor import WestonCommand

DRM_START_TIMEOUT_S = 60.0


def _command(tmp_path: Path, **env: str) -> WestonCommand:
    config = tmp_path / "weston.ini"
    config.write_text("[core]\nrequire-outputs=none\nrequire-input=false\n")
    return WestonCommand(config=config, runtime_dir=tmp_path, env=env)


def test_weston_gets_libseats_noop_backend(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LIBSEAT_BACKEND", raising=False)
    assert _command(tmp_path).environ()["LIBSEAT_BACKEND"] == "noop"


def test_an_environment_that_names_a_seat_backend_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LIBSEAT_BACKEND", "logind")
    assert _command(tmp_path).environ()["LIBSEAT_BACKEND"] == "logind"


def test_drm_backend_opens_the_seat_and_fails_only_for_want_of_a_card(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LIBSEAT_BACKEND", raising=False)
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    command = _command(runtime)
    assert command.backend == "drm-backend.so"  # the container's default
    binary = shutil.which(command.binary)
    assert binary is not None, "weston is not on PATH (./pants puts the trixie launcher there)"
    result = subprocess.run(
        command.argv(), env=command.environ(), capture_output=True, text=True,
        timeout=DRM_START_TIMEOUT_S, check=False, cwd=os.fspath(tmp_path),
    )  # fmt: skip
    log = result.stdout + result.stderr
    assert "Build: 14.0." in log, log
    assert "Seat opened with backend 'noop'" in log, log
    assert "libseat: session control granted" in log, log
    assert "no drm device found" in log, log
    assert result.returncode != 0
