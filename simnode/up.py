"""`simnode up`: start the whole node, print what it published, run until Ctrl-C or SIGTERM.

Order: the cluster first (`simnode.cluster`: the embedded fake apiserver, or with
`--kubeconfig` a real cluster checked before anything starts), with the Node that owns the
slice; then, as in the pod, the simulated card, with a simulated DDC/CI monitor served on a unix
socket at each connector's `dev/i2c-N` (in this process, until it stops; silent while its
connector's sysfs `status` says it is unplugged); the layout module built into the state dir;
Xvfb; `declare` (run to completion); `westonctl` with weston's x11 outputs X1..Xn aliased to the
connectors; the `draplugin` operator with its node publisher; then the kubelet's registration
handshake. Every child runs in its own session and is stopped and reaped by pid on the way out,
and then the Node and this node's slice are deleted. westonctl and the operator are restarted
when they exit, as the kubelet restarts a pod's containers: a compositor the watchdog killed
makes westonctl exit, and the node must carry on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TextIO

from fakekube.kubelet import Kubelet
from libdisplay import fsutil
from libdisplay.cdi import DRIVER
from libdisplay.ddc_socket import MonitorServer, SocketBusError
from libdisplay.processes import Process, start, unix_socket_accepts
from libdisplay.wayland import Liveness, probe
from simnode import card, clients, cluster, report
from simnode.api import Access, Api, ClusterError
from simnode.state import Layout, State, check_free, save

log = logging.getLogger(__name__)

START_TIMEOUT_S: Final = 90.0
RESTART_PAUSE_S: Final = 1.0
SUPERVISE_POLL_S: Final = 0.2
XVFB_SCREEN: Final = "4096x2160x24"
BINARIES: Final = ("declare", "westonctl", "draplugin")
# The repo's root in a source checkout, or the PEX's site-packages: both hold westonctl/layout/
# (the PEX carries it as a resource).
_ROOT: Final = Path(__file__).resolve().parents[1]
LAYOUT_BUILD: Final = _ROOT / "westonctl" / "layout" / "build.sh"
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


class Node:
    """The children of one `up`, in start order; `stop` stops them in reverse."""

    def __init__(self, options: Options, out: TextIO) -> None:
        self.options = options
        self.layout = options.layout
        self.out = out
        self.chosen = card.monitors(options.monitors)
        self.cluster: cluster.Cluster = (
            cluster.Embedded() if options.kubeconfig is None else
            cluster.Remote(options.kubeconfig, context=options.context,
                           pinned=options.layout.kubeconfig))
        self.access: Access | None = None
        self._api: Api | None = None
        self.node_object: cluster.NodeObject | None = None
        self.metrics_port = free_port()
        self.xvfb_display = ""
        self.monitors: dict[str, MonitorServer] = {}
        self.children: dict[str, Process] = {}
        self._argv: dict[str, tuple[list[str], dict[str, str]]] = {}

    # --- start ---------------------------------------------------------------------------

    def start(self) -> None:
        layout = self.layout
        layout.logs.mkdir(parents=True, exist_ok=True)
        fsutil.atomic_write(layout.marker, "")
        layout.clients.mkdir(parents=True, exist_ok=True)
        layout.runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._start_cluster()
        card.write_card(layout.root, self.chosen)
        # Before the operator starts: it probes the monitors as soon as it has read the card.
        self.monitors = serve_monitors(layout.root, self.chosen)
        self._build_layout()
        self._start_xvfb()
        self._declare()
        self._start("westonctl", self._westonctl_argv(), ready=self._weston_answers,
                    what=f"weston answering on {layout.wayland_socket}",
                    env=child_env(DISPLAY=self.xvfb_display))
        self._start("draplugin", self._operator_argv(),
                    ready=lambda: unix_socket_accepts(layout.registration_socket),
                    what="registration socket accepts", env=child_env())
        with Kubelet(layout.registration_socket, driver=DRIVER) as kubelet:
            log.info("kubelet: registered %s, DRA service %s", DRIVER, kubelet.service)
        self._wait_for_slice()

    @property
    def api(self) -> Api:
        if self._api is None:
            raise UpError("the cluster is not started")
        return self._api

    def _start_cluster(self) -> None:
        """Before any child: a cluster that cannot take the node fails `up` here."""
        self.access = self.cluster.start()
        self._api = Api(self.access)
        # The slice is owned by the Node object, as in a cluster.
        self.node_object = cluster.NodeObject(self.api, self.options.node_name)
        self.node_object.publish()

    def _build_layout(self) -> None:
        out = self.layout.layout_shell
        with (self.layout.logs / "layout-build.log").open("wb") as log_file:
            done = subprocess.run(["sh", str(LAYOUT_BUILD), str(out)], stdout=log_file,
                                  stderr=subprocess.STDOUT, timeout=300, check=False)
        if done.returncode != 0:
            raise UpError(
                f"building the layout module failed (rc {done.returncode}): see"
                f" {self.layout.logs / 'layout-build.log'} (it builds in the trixie root,"
                " against libweston-14)"
            )

    def _start_xvfb(self) -> None:
        read_fd, write_fd = os.pipe()
        try:
            argv = ["Xvfb", "-displayfd", str(write_fd), "-screen", "0", XVFB_SCREEN,
                    "-nolisten", "tcp", "-noreset"]
            process = start(argv, log_path=self.layout.logs / "xvfb.log",
                            env=child_env(), pass_fds=(write_fd,))
            self._started("xvfb", process)
        finally:
            os.close(write_fd)
        with os.fdopen(read_fd) as numbers:
            # Xvfb writes its display number once it listens; EOF if it dies first.
            readable, _, _ = select.select([numbers], [], [], START_TIMEOUT_S)
            line = numbers.readline() if readable else ""
        if not line.strip().isdecimal():
            raise UpError(f"Xvfb did not report its display: see {process.log_path}")
        number = int(line)
        self.xvfb_display = f":{number}"
        process.wait_until(lambda: unix_socket_accepts(Path(f"/tmp/.X11-unix/X{number}")),
                           timeout=START_TIMEOUT_S, what="Xvfb socket accepts")

    def _aliases(self) -> list[str]:
        return [f"--output-alias={m.connector}={m.output}" for m in self.chosen]

    def _declare(self) -> None:
        layout = self.layout
        argv = [
            str(pex(self.options.dist, "declare")), "declare",
            f"--sysfs-root={layout.root / 'sys'}", f"--dev-root={layout.root / 'dev'}",
            f"--config={layout.weston_ini}", f"--node-name={self.options.node_name}",
            *self.cluster.child_args(), f"--shell={layout.layout_shell}", *self._aliases(),
            f"--runtime-dir={layout.runtime_dir}",
        ]
        with (layout.logs / "declare.log").open("wb") as log_file:
            done = subprocess.run(argv, env=child_env(), stdout=log_file,
                                  stderr=subprocess.STDOUT, timeout=START_TIMEOUT_S, check=False)
        if done.returncode != 0:
            raise UpError(f"declare failed (rc {done.returncode}): see {layout.logs}/declare.log")

    def _westonctl_argv(self) -> list[str]:
        layout = self.layout
        return [
            str(pex(self.options.dist, "westonctl")), "weston",
            f"--config={layout.weston_ini}", f"--runtime-dir={layout.runtime_dir}",
            f"--restarts-dir={layout.etc / 'restarts'}", f"--pid-file={layout.weston_pid}",
            "--backend=x11-backend.so", "--",
            f"--output-count={len(self.chosen)}", "--renderer=pixman",
        ]

    def _operator_argv(self) -> list[str]:
        layout = self.layout
        return [
            str(pex(self.options.dist, "draplugin")), "operator",
            f"--node-name={self.options.node_name}", f"--plugin-dir={layout.plugin_dir}",
            f"--registry-dir={layout.registry_dir}", f"--cdi-root={layout.cdi_dir}",
            f"--weston-config={layout.weston_ini}",
            f"--restarts-dir={layout.etc / 'restarts'}", f"--pid-file={layout.weston_pid}",
            f"--runtime-dir={layout.runtime_dir}",
            f"--container-runtime-dir={layout.runtime_dir}",
            f"--sysfs-root={layout.root / 'sys'}", f"--dev-root={layout.root / 'dev'}",
            *self.cluster.child_args(), f"--shell={layout.layout_shell}",
            f"--metrics-addr=127.0.0.1:{self.metrics_port}", *self._aliases(),
        ]

    def _weston_answers(self) -> bool:
        return probe(self.layout.wayland_socket, timeout=1.0).state is Liveness.ANSWERING

    def _start(self, name: str, argv: list[str], *, ready: Callable[[], bool], what: str,
               env: dict[str, str]) -> None:
        self._argv[name] = (argv, env)
        process = start(argv, log_path=self.layout.logs / f"{name}.log", env=env)
        self._started(name, process)
        process.wait_until(ready, timeout=START_TIMEOUT_S, what=what)

    def _started(self, name: str, process: Process) -> None:
        """Record a started child, in the state file too: a killed `up` leaves it for --clean."""
        self.children[name] = process
        save(self.layout, self.state())

    def _wait_for_slice(self) -> None:
        expected = {m.device for m in self.chosen}
        deadline = time.monotonic() + START_TIMEOUT_S
        while set(report.slice_devices(self.api.objects, self.options.node_name)) != expected:
            if time.monotonic() >= deadline:
                raise UpError(
                    f"the operator did not publish {sorted(expected)} in"
                    f" {START_TIMEOUT_S:g} s: see {self.layout.logs}/draplugin.log"
                )
            time.sleep(0.1)

    def state(self) -> State:
        access = self.access or Access(server="")
        return State(
            pid=os.getpid(), node_name=self.options.node_name, api_url=access.server,
            metrics_url=f"http://127.0.0.1:{self.metrics_port}/metrics",
            monitors=len(self.chosen), xvfb_display=self.xvfb_display,
            pids={name: p.pid for name, p in self.children.items()},
            kubeconfig=str(access.kubeconfig) if access.kubeconfig else None,
            context=access.context,
        )

    # --- run and stop --------------------------------------------------------------------

    def supervise(self, stop: threading.Event) -> None:
        """Restart westonctl and the operator when they exit, until `stop` is set."""
        while not stop.wait(SUPERVISE_POLL_S):
            for name, (argv, env) in self._argv.items():
                process = self.children[name]
                if not process.exited():
                    continue
                status = process.stop()
                print(f"simnode: {name} exited (rc {status.returncode}); restarting it",
                      file=self.out, flush=True)
                stop.wait(RESTART_PAUSE_S)
                if stop.is_set():
                    return
                self._started(name, start(argv, log_path=process.log_path, env=env))

    def stop(self) -> None:
        for name in reversed(list(self.children)):
            status = self.children[name].stop()
            log.info("%s stopped: rc %s%s", name, status.returncode,
                     " (SIGKILL)" if status.killed else "")
        self.children.clear()
        stop_monitors(self.monitors)
        _stop_clients(self.layout)
        self._withdraw_node()
        self.cluster.stop()

    def _withdraw_node(self) -> None:
        """Once the operator is gone (it would publish the slice again)."""
        if self.node_object is None:
            return
        try:
            deleted = self.node_object.withdraw()
        except ClusterError as exc:
            print(f"simnode: could not remove Node {self.options.node_name} and its slice:"
                  f" {exc}", file=self.out, flush=True)
            return
        if deleted:
            print(f"simnode: deleted {', '.join(deleted)}", file=self.out, flush=True)


def _stop_clients(layout: Layout) -> None:
    """SIGTERM the demo clients `simnode claim` left (not our children: only signalled)."""
    for record in clients.records(layout):
        clients.stop_client(record)


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
    """Start the node, print it, serve until SIGINT/SIGTERM, stop everything. With the
    embedded cluster the pod runs as the rendered manifest states it (`simnode.pod.up`); a
    real cluster's node runs the binaries with flags, as before."""
    if options.kubeconfig is None:
        from simnode.pod import up as pod_up

        use_trixie_compositor(options.dist)
        pod_up.run(options, out)
        return
    use_trixie_compositor(options.dist)
    check_tools()
    for name in BINARIES:
        pex(options.dist, name)
    check_free(options.layout, clean=options.clean)
    node = Node(options, out)
    with _signals() as signals:
        try:
            node.start()
            state = node.state()
            save(options.layout, state)
            report.print_up(node.api.objects, options.layout, state, out)
            print(report.READY_LINE, file=out, flush=True)
            signals.interrupting = False
            node.supervise(signals.stop)
        except StartInterruptedError as exc:
            print(f"simnode: {exc} while starting", file=out, flush=True)
        finally:
            signals.interrupting = False
            print("simnode: stopping", file=out, flush=True)
            node.stop()
            fsutil.remove(options.layout.state_file)
    print("simnode: stopped, no process left", file=out, flush=True)
