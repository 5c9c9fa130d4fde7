"""podman as the smoke checks run it: build.sh's settings for these machines, bounded calls."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

IMAGES = Path(__file__).resolve().parent
REPO = IMAGES.parents[1]


class SmokeError(Exception):
    """A check failed; the message says which and what was seen."""


def podman(*args: str, timeout: float = 120.0,
           check: bool = True) -> subprocess.CompletedProcess[str]:
    """podman with build.sh's settings (unless the caller names its own)."""
    env = {
        "CONTAINERS_CONF": str(IMAGES / "podman" / "containers.conf"),
        "CONTAINERS_STORAGE_CONF": str(IMAGES / "podman" / "storage.conf"),
        **os.environ,
    }
    done = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout,
                          env=env, check=False)
    if check and done.returncode != 0:
        raise SmokeError(f"podman {' '.join(args)}: rc {done.returncode}: {done.stderr.strip()}")
    return done


def image_name(registry: str, repository: str, tag: str) -> str:
    return f"{registry}/{repository}:{tag}"
