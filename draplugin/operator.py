"""The operator as one program: the claim driver, the node publisher, the kubelet-facing gRPC
server and the supervisor that ends them together.

`Operator.start` builds and wires them in the order a restart needs (the publisher first, so
its watchdog and compositor exist before the driver recovers its checkpoint; the driver's
recovery before the server accepts a call), and `run` serves until SIGTERM or a background
failure; once the server serves, /healthz also dials it (`draplugin.liveness`). The
publisher's Display writes are held until the server serves: a kubelet registers a plugin as
soon as its socket answers, waiting for nothing else, so the registration must not queue
behind a video wall's 16 Displays (and their status) on the API server and in this process.
`draplugin.main` is only the command line around it.

The two sides meet here and nowhere else: the publisher (asyncio, `draplugin.publisher`)
tells the driver why prepares must fail now, feeds its health stream, hands it the DDC/CI hook
and the compositor, hears which claim holds which monitor, and asks it to follow a changed
connector or Display spec; the driver (sync, on gRPC threads) restores the claims' sockets when
the compositor comes back and writes each prepared claim's status.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Mapping

from draplugin.driver.checkpoint import CheckpointError, ClaimEntry
from draplugin.driver.claimstatus import AppliedOutput, ClaimStatusWriter, DeviceStatus
from draplugin.driver.state import Driver
from draplugin.kube import LightkubeKube
from draplugin.liveness import grpc_answers
from draplugin.node.runtime import NodeThreadError
from draplugin.node.watchdog import Availability, Listener
from draplugin.publisher import Publisher, start_publisher
from draplugin.service import PluginServer
from draplugin.settings import Settings
from draplugin.supervisor import EXIT_CODE, Supervisor
from libdisplay.compositor.layout import OutputState
from libdisplay.kube import lightkube_client as kubelightkube
from libdisplay.kube.access import Endpoint, NoEndpointError
from libdisplay.pod import FIELD_MANAGER

log = logging.getLogger("draplugin")

HOLD_TIMEOUT_S = 30.0  # for the publisher's loop to take the hold of its Display writes


class OperatorError(Exception):
    """The operator cannot start: no API endpoint, or a checkpoint it must not reset."""


class Operator:
    """A started operator; `run` serves until it stops and returns the exit code."""

    def __init__(self, settings: Settings, *, supervisor: Supervisor,
                 node: Publisher | None, driver: Driver, server: PluginServer) -> None:
        self.settings = settings
        self.supervisor = supervisor
        self.node = node
        self.driver = driver
        self.server = server

    @classmethod
    def start(cls, settings: Settings, *, publish: bool, metrics_addr: str) -> Operator:
        """Build, wire and recover; the gRPC server is made but not yet serving."""
        try:
            endpoint = settings.kube.endpoint()
        except NoEndpointError as err:
            raise OperatorError(str(err)) from err
        supervisor = Supervisor()
        node = (start_publisher(settings, metrics_addr=metrics_addr,
                                on_fatal=lambda err: supervisor.fail("the node publisher", err))
                if publish else None)
        if node is not None:
            # Its loop reads the card and writes the slice before its first Display pass, so
            # the hold is in place by then; a write already under way would only go first.
            node.thread.submit(node.runtime.hold_display_writes(True)).result(
                timeout=HOLD_TIMEOUT_S)
        driver = _driver(settings, endpoint, node)
        try:
            driver.recover()
        except CheckpointError as err:
            # Never reset it: prepared claims of running pods are only in there.
            raise OperatorError(f"{err}; fix or move it by hand") from err
        if node is not None:
            node.runtime.add_availability_listener(_restore_when_back(driver))
            node.runtime.follow_connectors_with(
                lambda plugged, cards: driver.follow_connectors(plugged=plugged, cards=cards))
        server = PluginServer(settings, driver, health=node.health if node else None)
        supervisor.attach(server.stop)
        return cls(settings, supervisor=supervisor, node=node, driver=driver, server=server)

    def run(self) -> int:
        """Serve the kubelet until SIGTERM/SIGINT or a background failure; the exit code."""
        if self.supervisor.failed:
            return EXIT_CODE
        self._install_signals()
        self.server.start()
        if self.node is not None:
            self.node.liveness.add(grpc_answers((self.settings.dra_socket,
                                                 self.settings.registration_socket)))
            self.node.thread.submit(self.node.runtime.hold_display_writes(False))
        log.info("operator ready on node %s", self.settings.node.name)
        try:
            self.server.wait()
        finally:
            self._stop_publisher()
        return EXIT_CODE if self.supervisor.failed else 0

    def _install_signals(self) -> None:
        def on_stop(signum: int, _frame: object) -> None:
            log.info("got %s: stopping", signal.Signals(signum).name)
            self.server.stop()

        signal.signal(signal.SIGTERM, on_stop)
        signal.signal(signal.SIGINT, on_stop)
        node = self.node
        if node is not None:
            # The conventional "re-read your inputs": a person who fixed a cable, or the
            # simulated node whose uevents never reach netlink, gets the slice updated now.
            signal.signal(signal.SIGHUP, lambda _signum, _frame: node.rescan())

    def _stop_publisher(self) -> None:
        if self.node is None:
            return
        try:
            self.node.stop()
        except NodeThreadError as err:  # a stuck loop: the process exit ends it
            log.error("%s", err)


def _driver(settings: Settings, endpoint: Endpoint, node: Publisher | None) -> Driver:
    """The claim driver, given the publisher's hooks when there is a publisher."""
    return Driver(
        settings,
        # The publisher's Displays informer spares each prepare a GET per monitor.
        LightkubeKube(endpoint, displays=node.runtime.displays if node else None),
        publisher=node,
        claim_status=ClaimStatus(settings, endpoint),
        ddc=node.runtime.ddc_hook() if node else None,
        metrics=node.runtime.metrics if node else None,
        # One owner of the compositor: the publisher's, counted in its metrics.
        compositor=node.compositor if node else settings.compositor(),
    )


class ClaimStatus:
    """The driver's `ClaimReporter`: what each prepared claim got, written into its
    ResourceClaim's status (draplugin.driver.claimstatus), and taken out at release."""

    def __init__(self, settings: Settings, endpoint: Endpoint) -> None:
        self._writer = ClaimStatusWriter(
            kubelightkube.client(endpoint, field_manager=FIELD_MANAGER), pool=settings.node.name)

    def applied(self, entry: ClaimEntry, states: Mapping[str, OutputState | None]) -> None:
        self._writer.report(entry.ref, [
            DeviceStatus.ready_with(AppliedOutput.from_output_state(device, state))
            if state is not None else DeviceStatus.not_ready(
                device, "OutputUnknown", "the compositor cannot say what this output runs at "
                "now (not running, or without the layout module)")
            for device, state in states.items()])

    def released(self, entry: ClaimEntry) -> None:
        self._writer.withdraw(entry.ref)


def _restore_when_back(driver: Driver) -> Listener:
    """A watchdog listener: a compositor that answers again has lost every claim's socket,
    and lit every output (weston.ini carries modes, not the Displays' power).

    The watchdog calls it on the publisher's event loop, which must not wait for the
    driver's lock (held through a whole prepare), so the restore runs on a thread of its own.
    """

    def restore() -> None:
        try:
            driver.restore_sockets()
        except Exception:  # the next "available" or start tries again; never silently
            log.exception("restoring the claims' sockets failed")
        driver.follow_power()

    def on_availability(availability: Availability) -> None:
        if availability.available:
            threading.Thread(target=restore, name="restore-sockets", daemon=True).start()

    return on_availability
