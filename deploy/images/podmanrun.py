"""podman as the smoke checks run it: build.sh's settings for these machines, bounded calls."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

IMAGES = Path(__file__).resolve().parent
REPO = IMAGES.parents[1]


class SmokeError(Exception):
    """A check failed; the message says which and what was seen."""


def _env() -> dict[str, str]:
    """build.sh's podman settings, unless the caller names its own."""
    return {
        "CONTAINERS_CONF": str(IMAGES / "podman" / "containers.conf"),
        "CONTAINERS_STORAGE_CONF": str(IMAGES / "podman" / "storage.conf"),
        **os.environ,
    }


def podman(*args: str, timeout: float = 120.0,
           check: bool = True) -> subprocess.CompletedProcess[str]:
    """podman with build.sh's settings (unless the caller names its own)."""
    done = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout,
                          env=_env(), check=False)
    if check and done.returncode != 0:
        raise SmokeError(f"podman {' '.join(args)}: rc {done.returncode}: {done.stderr.strip()}")
    return done


def image_name(registry: str, repository: str, tag: str) -> str:
    return f"{registry}/{repository}:{tag}"


def podman_bytes(*args: str, stdin: bytes,
                 timeout: float = 120.0) -> subprocess.CompletedProcess[bytes]:
    """podman with build.sh's settings, `stdin` as its input, its output as bytes."""
    return subprocess.run(["podman", *args], input=stdin, capture_output=True, timeout=timeout,
                          env=_env(), check=False)
