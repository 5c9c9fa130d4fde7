"""`simnode up` run as a person runs it, for the end-to-end tests: started until it prints
its ready line, its subcommands run against it, stopped and reaped on the way out."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from libdisplay.compositor.wayland import list_outputs
from libdisplay.processes import Process, start
from simnode.cli.report import READY_LINE, JsonObject, slice_devices
from simnode.cli.state import Layout
from simnode.cluster.api import Access, Api
from tests.binaries import pex_env

START_TIMEOUT_S = 600.0  # up waits for another pod-runner node (its ports) first
COMMAND_TIMEOUT_S = 120.0
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, slots=True)
class Sim:
    process: Process
    layout: Layout
    env: dict[str, str]
    command: tuple[str, ...]

    def run(self, *args: str, timeout: float = COMMAND_TIMEOUT_S) -> str:
        """Run a subcommand against this node; its stdout, or a failure with its stderr."""
        done = subprocess.run(
            [*self.command, *args, f"--state-dir={self.layout.root}"], env=self.env,
            capture_output=True, text=True, timeout=timeout, check=False,
        )
        assert done.returncode == 0, (f"simnode {' '.join(args)}: {done.stderr}\n"
                                      f"{self.log_tails()}")
        return done.stdout

    def log_tails(self, lines: int = 25) -> str:
        """The last lines of each of the node's logs (the pod's containers, its actors): what a
        failed command's cause is looked for in, as CI keeps no state dir."""
        tails = []
        for log in sorted(self.layout.logs.rglob("*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            tails.append("\n".join([f"-- {log.relative_to(self.layout.logs)}:", *text]))
        return "\n".join(tails)

    def state(self) -> JsonObject:
        data: JsonObject = json.loads(self.layout.state_file.read_text())
        return data

    def devices(self) -> dict[str, JsonObject]:
        state = self.state()
        kubeconfig = state.get("kubeconfig")
        access = (Access.from_kubeconfig(Path(kubeconfig), context=state.get("context"))
                  if kubeconfig else Access(server=state["api_url"]))
        return slice_devices(Api(access).objects, state["node_name"])

    def modes(self) -> dict[str, str]:
        return {o.name: str(o.mode) for o in list_outputs(self.layout.wayland_socket)}

    def wait(self, ready: Callable[[], bool], *, timeout: float, what: str) -> None:
        self.process.wait_until(ready, timeout=timeout, what=what)

    def i2c(self, connector: str) -> Path:
        """The monitor socket at the bus the connector's sysfs `ddc` link names."""
        link = self.layout.root / "sys" / "class" / "drm" / connector / "ddc"
        return self.layout.root / "dev" / Path(os.readlink(link)).name


def dist() -> Path:
    """Under Pants the PEXes sit in the sandbox as <name>/<name>.pex; else the repo's dist/."""
    return Path(".") if Path("declare/declare.pex").is_file() else REPO / "dist"


def command() -> tuple[str, ...]:
    pex = dist() / "simnode" / "simnode.pex"
    if pex.is_file():
        return (str(pex.resolve()),)
    return (sys.executable, "-m", "simnode.cli.main")


def sim_env(work: Path) -> dict[str, str]:
    return pex_env(work / "pex-root", PYTHONPATH=os.pathsep.join(p for p in sys.path if p))


def up_argv(layout: Layout, *extra: str) -> list[str]:
    return [*command(), "up", f"--state-dir={layout.root}", "--monitors=3",
            f"--dist={dist().resolve()}", *extra]


@contextlib.contextmanager
def running(work: Path, *extra: str) -> Iterator[Sim]:
    """`simnode up` with `extra` options, until it printed READY_LINE; stopped on the way out."""
    env = sim_env(work)
    layout = Layout(work / "node")
    process = start(up_argv(layout, *extra), log_path=work / "up.log", env=env)
    try:
        process.wait_until(lambda: process.log_contains(READY_LINE), timeout=START_TIMEOUT_S,
                           what=f"{READY_LINE!r} printed")
        yield Sim(process=process, layout=layout, env=env, command=command())
    finally:
        process.stop(grace=30.0)
