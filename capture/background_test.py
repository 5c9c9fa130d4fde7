"""The server's background tasks: one that fails ends the server (exit 1, the failure in the
log), so the kubelet restarts it, rather than leaving clips waiting on it forever."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Final

from capture import testing
from capture.testing import FakeCompositor
from libdisplay import processes

WAIT_S: Final = 30.0


def test_an_encoder_probe_that_cannot_start_ffmpeg_ends_the_server(tmp_path: Path) -> None:
    # A PATH with openssl (the start-up certificate) and an `ffmpeg` that cannot be executed
    # (a directory: EACCES), so the probe's exec fails with something other than "not found"
    # (which is an answer: software encoding, see encode_test).
    bin_dir = tmp_path / "bin"
    (bin_dir / "ffmpeg").mkdir(parents=True)
    openssl = shutil.which("openssl")
    assert openssl is not None
    (bin_dir / "openssl").symlink_to(openssl)
    tls_dir = tmp_path / "tls"
    tls_dir.mkdir()
    with FakeCompositor(tmp_path) as screens:
        env = testing.server_env(screens, kube_url="https://127.0.0.1:9", tls_dir=tls_dir,
                                 extra_env={"PATH": os.fspath(bin_dir)})
        process = processes.start(testing.SERVER_ARGV, log_path=tmp_path / "capture.log",
                                  env=env, cwd=testing.REPO)
        try:
            returncode = process.wait(timeout=WAIT_S)
        finally:
            process.stop()
    log = process.log_text()
    assert returncode == 1, log
    assert "choosing the clip encoder failed: the server stops" in log
    assert "ffmpeg" in log
