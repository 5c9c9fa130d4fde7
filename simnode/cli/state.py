"""Where a simulated node lives: its state dir's layout and the state file `up` writes.

`up` writes `state.json` as it starts each child and removes it when it has stopped them all;
the other subcommands read it to find the cluster (the embedded fake's URL, or the kubeconfig
and context of a real one), the sockets and the weston pid. A
state file whose `up` pid is gone was left by a killed run, and `up --clean` stops the
processes it records and empties the dir.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
from dataclasses import asdict, dataclass
from pathlib import Path

from libdisplay import fsutil
from libdisplay.pod import DRIVER

STATE_FILE = "state.json"
MARKER = ".simnode"
NODE_NAME = "sim-node-1"
# On the Node `up` publishes, as a label ("true") and as a NoSchedule taint's key.


class StateError(Exception):
    """No state file, an unreadable one, or one a killed run left."""


@dataclass(frozen=True, slots=True)
class Layout:
    """The paths of one node under its state dir, as the pod's hostPaths would be."""

    root: Path

    @property
    def state_file(self) -> Path:
        return self.root / STATE_FILE

    @property
    def marker(self) -> Path:
        """Says the dir is a simnode state dir, which `up` may empty."""
        return self.root / MARKER

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def etc(self) -> Path:
        return self.root / "etc-weston"

    @property
    def weston_ini(self) -> Path:
        return self.etc / "weston.ini"

    @property
    def weston_pid(self) -> Path:
        return self.etc / "weston.pid"

    @property
    def capture_socket(self) -> Path:
        return self.etc / "capture.sock"

    @property
    def runtime_dir(self) -> Path:
        return self.root / "run"

    @property
    def wayland_socket(self) -> Path:
        return self.runtime_dir / "wayland-0"

    @property
    def plugin_dir(self) -> Path:
        return self.root / "plugins" / DRIVER

    @property
    def registry_dir(self) -> Path:
        return self.root / "plugins_registry"

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir / f"{DRIVER}-reg.sock"

    @property
    def cdi_dir(self) -> Path:
        return self.root / "cdi"

    @property
    def clients(self) -> Path:
        """One JSON file per claim made by `simnode claim`: uid, name, device, client pid."""
        return self.root / "clients"

    @property
    def layout_shell(self) -> Path:
        return self.root / "layout-shell.so"

    @property
    def pod_file(self) -> Path:
        """With the pod runner: the pod's containers (state, restarts, memory) and the API's
        denials, as `up` last saw them."""
        return self.root / "pod.json"

    @property
    def identities(self) -> Path:
        """With the pod runner: a kubeconfig per actor (admin, scheduler, node, alice)."""
        return self.root / "identities"


@dataclass(frozen=True, slots=True)
class State:
    """What `up` started: the pids to check, the URLs and the monitors (by device name).
    `api_url` is the API server; with `kubeconfig` (and `context`) it is a real cluster's,
    reached with that kubeconfig's credentials, else the embedded fake's."""

    pid: int
    node_name: str
    api_url: str
    metrics_url: str
    monitors: int
    xvfb_display: str
    pids: dict[str, int]
    kubeconfig: str | None = None
    context: str | None = None
    host_root: str | None = None
    """With the pod runner: the simulated host's root, under which the pod's hostPaths are
    (the plugin's endpoint and the CDI specs name paths on the host). With the local cluster:
    the simulated card's root (its sysfs tree and DDC/CI sockets)."""
    cluster: str = "embedded"
    """`local` for `up --cluster local`'s real cluster, whose subcommands act through the
    real API, kubelet and runtime (`local_commands`)."""
    bin_dir: str | None = None
    """With the local cluster: its built kubectl, crictl and ctr."""


def save(layout: Layout, state: State) -> None:
    fsutil.atomic_write(layout.state_file, json.dumps(asdict(state), indent=2) + "\n")


def load(layout: Layout) -> State:
    """The running node's state; StateError when none runs there."""
    try:
        data = json.loads(layout.state_file.read_text())
        state = State(**data)
    except FileNotFoundError as exc:
        raise StateError(
            f"no simulated node at {layout.root}: start one with `simnode up`"
            f" (--state-dir {layout.root})"
        ) from exc
    except (ValueError, TypeError) as exc:
        raise StateError(f"{layout.state_file} is not a simnode state file: {exc}") from exc
    if not alive(state.pid):
        raise StateError(
            f"the node in {layout.root} is not running (its `up`, pid {state.pid}, is gone):"
            f" start it again with `simnode up --clean --state-dir {layout.root}`"
        )
    return state


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def check_free(layout: Layout, *, clean: bool) -> None:
    """Make sure the state dir can take a new node: a cleanly stopped run's is emptied, a
    killed run's only with `clean` (its recorded processes are killed first)."""
    if not layout.root.exists() or not any(layout.root.iterdir()):
        return
    if not layout.marker.exists():
        raise StateError(
            f"{layout.root} is not empty and not a simnode state dir: use another --state-dir"
        )
    recorded = _recorded(layout)
    if recorded is not None and alive(recorded.pid):
        raise StateError(
            f"a simulated node already runs in {layout.root} (pid {recorded.pid}):"
            " stop it with Ctrl-C, or use another --state-dir"
        )
    if recorded is not None and not clean:
        raise StateError(
            f"{layout.root} holds a killed run (its `up`, pid {recorded.pid}, is gone):"
            " rerun with --clean to stop what it left and remove it, or use another --state-dir"
        )
    if recorded is not None:
        for pid in recorded.pids.values():
            _kill_group(pid)
    shutil.rmtree(layout.root)


def _recorded(layout: Layout) -> State | None:
    try:
        return State(**json.loads(layout.state_file.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _kill_group(pid: int) -> None:
    """SIGKILL the session a killed run's child led (each child was started in its own)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if alive(pid) and os.getsid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
