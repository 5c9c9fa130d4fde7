from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from westonctl.supervisor import ConfigTimeoutError, WestonCommand, exit_status, wait_for_config


def _status_of(code: int | None = None, sig: signal.Signals | None = None) -> int:
    """A real wait status from a real child."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        if sig is not None:
            os.kill(os.getpid(), sig)
        os._exit(code or 0)
    _, status = os.waitpid(pid, 0)
    return status


@pytest.mark.parametrize(
    ("code", "sig", "expected"),
    [(3, None, 3), (0, None, 1), (None, signal.SIGKILL, 137), (None, signal.SIGSEGV, 139)],
    ids=["exit-3", "exit-0-is-still-a-crash", "sigkill", "sigsegv"],
)
def test_unordered_exits_map_to_non_zero_codes(
    code: int | None, sig: signal.Signals | None, expected: int
) -> None:
    assert exit_status(_status_of(code, sig)) == expected


def test_weston_argv_keeps_log_scope_and_passes_extra_args(tmp_path: Path) -> None:
    command = WestonCommand(
        config=tmp_path / "weston.ini",
        runtime_dir=tmp_path,
        backend="headless",
        log_scopes=" drm-backend,log ,",
        extra_args=("--renderer=pixman",),
    )
    assert command.argv() == [
        "weston",
        f"--config={tmp_path / 'weston.ini'}",
        "--backend=headless",
        "--socket=wayland-0",
        "--logger-scopes=log,drm-backend",
        "--renderer=pixman",
    ]
    assert command.environ()["XDG_RUNTIME_DIR"] == str(tmp_path)


def test_empty_log_scopes_leave_weston_default(tmp_path: Path) -> None:
    command = WestonCommand(config=tmp_path / "w.ini", runtime_dir=tmp_path, log_scopes="")
    assert not any(arg.startswith("--logger-scopes") for arg in command.argv())


def test_config_wait_times_out_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigTimeoutError, match=r"weston\.ini did not appear within 0\.2 s"):
        wait_for_config(tmp_path / "weston.ini", timeout_s=0.2, poll_s=0.05)
