"""`simnode up`: what it is asked for, what it checks before starting anything, and the parts
the node is made of besides the pod (`simnode.pod.node`): the simulated DDC/CI monitor served
on a unix socket at each connector's `dev/i2c-N` (silent while its connector's sysfs `status`
says it is unplugged), signal handling while it starts and runs, and weston 14 on PATH.

The node itself, in the embedded cluster or a real one, is `simnode.pod.up`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TextIO

from libdisplay.hardware.ddc_socket import MonitorServer, SocketBusError
from simnode import card
from simnode.state import Layout

# The repo's root in a source checkout, or the PEX's site-packages.
_ROOT: Final = Path(__file__).resolve().parents[1]
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


@dataclass(frozen=True, slots=True)
class Options:
    """What `up` was asked for; without `kubeconfig` the cluster is an embedded fake."""

    layout: Layout
    dist: Path
    monitors: int
    clean: bool
    node_name: str
    kubeconfig: Path | None = None
    context: str | None = None
    images: bool = False  # containers from the built images (podman), not the PEXes
    prometheus: bool = False  # Prometheus with the shipped alerts (simnode.prometheus)


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


def plugged_in(status: Path) -> Callable[[], bool]:
    """Whether the connector whose sysfs `status` file this is has its monitor plugged in."""
    def present() -> bool:
        try:
            return status.read_text().strip() == "connected"
        except OSError:
            return False
    return present


def serve_monitors(root: Path, chosen: tuple[card.Monitor, ...]) -> dict[str, MonitorServer]:
    """Each monitor's DDC/CI served on a socket at its connector's `<root>/dev/i2c-N`, by
    device name, answering only while the connector says the monitor is plugged in (as
    `simnode hotplug` sets it); when one cannot be served, those already started are stopped."""
    servers: dict[str, MonitorServer] = {}
    try:
        for monitor in chosen:
            server = servers[monitor.device] = MonitorServer(
                monitor.i2c_node(root), monitor.ddc(),
                present=plugged_in(monitor.status_file(root)))
            server.start()
    except SocketBusError as exc:
        stop_monitors(servers)
        raise UpError(f"cannot serve the DDC/CI of {monitor.device}: {exc}") from exc
    return servers


def stop_monitors(servers: dict[str, MonitorServer]) -> None:
    for server in servers.values():
        server.stop()
    servers.clear()


class StartInterruptedError(UpError):
    """SIGINT or SIGTERM came while the node was starting."""


class Signals:
    """SIGINT/SIGTERM set `stop`; while `interrupting` (start-up) they also raise, to stop it."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.interrupting = True

    def handle(self, signum: int, _frame: object) -> None:
        self.stop.set()
        if self.interrupting:
            self.interrupting = False
            raise StartInterruptedError(signal.Signals(signum).name)


@contextlib.contextmanager
def _signals() -> Iterator[Signals]:
    signals = Signals()
    previous = {
        sig: signal.signal(sig, signals.handle) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield signals
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run(options: Options, out: TextIO) -> None:
    """Start the node and its pod (`simnode.pod.up`), print it, serve until SIGINT/SIGTERM,
    stop everything."""
    from simnode.pod import up as pod_up  # the pod runner's imports only for `up`

    use_trixie_compositor(options.dist)
    pod_up.run(options, out)
