"""What the node runs from: the checkout the binaries were built in (its `dist/` PEXes, the
rendered `deploy/base`, the trixie root), weston 14 from that root first on PATH, and the host's
tools `up` checks before it starts anything.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Final

# The repo's root in a source checkout, or the PEX's site-packages.
_ROOT: Final = Path(__file__).resolve().parents[2]
# What a node needs on PATH, and where it comes from. weston 14 and its clients run from the
# trixie root (build-support/trixie-root) through the checkout's dispatchers, which `up` puts
# first on PATH; `./pants` makes the root on first use.
TOOLS: Final = {"Xvfb": "the Debian package xvfb",
                "weston": "build-support/trixie/bin (run ./pants once to make the trixie root)",
                "weston-simple-shm": "build-support/trixie/bin",
                "trixie-run": "build-support/trixie/bin"}
TRIXIE_BIN: Final = Path("build-support") / "trixie" / "bin"


class UpError(Exception):
    """Something the node needs is missing or did not start; the message says what to do."""


def default_dist() -> Path:
    """`dist/` beside this PEX (`dist/simnode/simnode.pex`), else `./dist`."""
    pex = os.environ.get("PEX")
    if pex:
        return Path(pex).resolve().parents[1]
    return Path("dist")


def pex(dist: Path, name: str) -> Path:
    """The built PEX `name` under `dist` (`dist/name/name.pex`, or `name/name.pex` in a sandbox)."""
    path = dist / name / f"{name}.pex"
    if not path.is_file():
        raise UpError(f"{path} is missing: build the binaries with `./pants package ::`")
    return path.resolve()


def use_trixie_compositor(dist: Path) -> None:
    """Put the checkout's weston 14 dispatchers first on PATH, for this process and its children.

    The checkout is the one the PEXes were built in (`dist/..`), or the source tree this runs
    from; a PATH that already has them is left as it is.
    """
    for repo in (dist.resolve().parent, _ROOT):
        bin_dir = repo / TRIXIE_BIN
        if (bin_dir / "weston").is_file():
            path = os.environ.get("PATH", os.defpath).split(os.pathsep)
            if str(bin_dir) not in path:
                os.environ["PATH"] = os.pathsep.join([str(bin_dir), *path])
            return


def check_tools() -> None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        raise UpError("not found on PATH: " + "; ".join(f"{t} (from {TOOLS[t]})" for t in missing))


def child_env(**extra: str) -> dict[str, str]:
    """Our environment for the PEXes, without this PEX's own PEX_* settings (PEX_ROOT stays)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PEX") or k == "PEX_ROOT"}
    return {**env, **extra}


def repo_of(dist: Path) -> Path:
    """The checkout the PEXes were built in (`dist/..`, or a Pants sandbox, which holds the
    PEXes beside deploy/): deploy/ and westonctl/layout come from it."""
    repo = dist.resolve()
    if not (repo / "deploy" / "images" / "build.sh").is_file():
        repo = repo.parent
    if not (repo / "deploy" / "images" / "build.sh").is_file():
        raise UpError(f"{repo} is not a display-operator checkout (no deploy/images/build.sh):"
                      " run the simnode PEX from the checkout's dist/")
    return repo


def trixie_root(repo: Path) -> Path:
    given = os.environ.get("TRIXIE_ROOT")
    if given:
        return Path(given)
    done = subprocess.run([str(repo / "build-support" / "trixie-root")], capture_output=True,
                          text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise UpError(f"build-support/trixie-root failed: {done.stderr.strip()}")
    return Path(done.stdout.strip())


def render(repo: Path) -> str:
    done = subprocess.run(["kubectl", "kustomize", str(repo / "deploy" / "base")],
                          capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise UpError(f"kubectl kustomize deploy/base failed: {done.stderr.strip()}")
    return done.stdout
