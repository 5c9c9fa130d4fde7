"""The node publisher as the operator (`draplugin.operator`) holds it: one object it starts
and stops.

The publisher (`draplugin.node`) runs on its own asyncio thread; the kubelet side is sync
gRPC. This object answers the driver on any thread: why prepares must fail now (the
watchdog's verdict), the health stream, the DDC/CI hook; after every prepare/unprepare batch
it tells the publisher which claim holds which monitor, and after every derivation the
driver applied it writes each Display's spec outcome (its SpecApplied condition and
observedGeneration).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from draplugin.compositor import Compositor
from draplugin.driver import modes
from draplugin.driver.checkpoint import Checkpoint
from draplugin.liveness import HealthChecks
from draplugin.node.displays import DisplaysError, SpecOutcome
from draplugin.node.metrics import Metrics
from draplugin.node.retry import fatal
from draplugin.node.runtime import (
    NodeRuntime,
    NodeThread,
    NodeThreadError,
    async_client,
)
from draplugin.settings import Settings

log = logging.getLogger(__name__)

_PREPARED = "prepared"


@dataclass(slots=True)
class Publisher:
    """A started publisher; `stop` ends its thread and its metrics server."""

    thread: NodeThread
    runtime: NodeRuntime
    metrics_server: Any
    liveness: HealthChecks
    """What /healthz answers: the publisher's loop, and what the operator adds."""

    def refusal(self) -> str | None:
        """Why new prepares fail now, or None while the compositor answers or is busy
        (`Watchdog.refusal`; it waits for the first verdict)."""
        return self.runtime.watchdog.refusal(wait=self.runtime.config.prepare_wait)

    def health(self) -> tuple[bool, str]:
        """The health stream's verdict: the watchdog's, not a probe of its own."""
        availability = self.runtime.watchdog.availability
        detail = availability.detail if availability else "not probed yet"
        return self.runtime.compositor_available, f"compositor: {detail}"

    def claims_changed(self, checkpoint: Checkpoint) -> None:
        """Show on each Display which prepared claim holds it."""
        holders = {
            device.device: entry.ref
            for entry in checkpoint.claims.values()
            if entry.state == _PREPARED
            for device in entry.devices
        }
        self.runtime.set_claims(holders)
        self.thread.submit(self.runtime.supervise(self.runtime.refresh()))

    def specs_applied(self, applied: modes.Applied, checkpoint: Checkpoint) -> None:
        """Write what came of each Display's spec in `applied` (any thread)."""
        found = modes.verdicts(applied, modes.holders(checkpoint))
        if not found:
            return
        try:
            self.thread.submit(self.runtime.supervise(self._report(found)))
        except NodeThreadError as err:  # the publisher ended: the process is exiting
            log.warning("cannot report the Displays' spec outcome: %s", err)

    async def _report(self, found: list[modes.SpecVerdict]) -> None:
        self.runtime.metrics.set_power_states(
            verdict.power.state if verdict.power is not None and verdict.power.applied_by
            else "On" for verdict in found)
        for verdict in found:
            power = None if verdict.power is None else verdict.power.to_status()
            try:
                await self.runtime.displays.report_spec(verdict.display, verdict.generation,
                                                        spec_outcome(verdict), power=power)
            except DisplaysError as err:
                if fatal(err):
                    raise
                # The next derivation (a prepare, a hotplug, an edit) reports it again.
                log.error("%s", err)

    def rescan(self) -> None:
        """Re-read sysfs now, as a uevent would make it (SIGHUP)."""
        log.info("re-reading sysfs on request")
        try:
            self.thread.submit(self.runtime.supervise(self.runtime.rescan()))
        except NodeThreadError as err:  # the publisher ended: the process is exiting
            log.warning("cannot re-read sysfs: %s", err)

    @property
    def compositor(self) -> Compositor:
        return self.runtime.compositor

    def stop(self) -> None:
        self.metrics_server.shutdown()
        self.thread.stop()


def spec_outcome(verdict: modes.SpecVerdict) -> SpecOutcome:
    """The SpecApplied condition a verdict makes."""
    power = verdict.power.describe() if verdict.power is not None else ""
    if verdict.reason == "Applied":
        return SpecOutcome.applied(mode=verdict.mode, transform=verdict.transform,
                                   scale=verdict.scale, power=power)
    if verdict.reason == "PowerNotApplied":
        return SpecOutcome.power_not_applied(power)
    if verdict.reason == "PowerPartlyApplied":
        return SpecOutcome.power_partly_applied(power)
    if verdict.reason == "HeldByClaim" and verdict.holder is not None:
        holder = verdict.holder
        return SpecOutcome.held_by_claim(holder.ref, power=power)
    if verdict.reason == "ModeNotOffered":
        return SpecOutcome.mode_not_offered(verdict.mode, verdict.offered)
    if verdict.reason == "InvalidSpec":
        return SpecOutcome.invalid_spec(verdict.field, verdict.detail)
    if verdict.reason == "ApplyFailed":
        return SpecOutcome.apply_failed(verdict.field, verdict.detail)
    return SpecOutcome.restart_pending(verdict.detail)


def node_runtime(settings: Settings, client: Any) -> NodeRuntime:
    """The node publisher's runtime for these settings, with its compositor counted in its
    metrics."""
    registry = Metrics()
    compositor = settings.compositor(recorder=registry, probe_timeout=settings.node.probe_timeout)
    return NodeRuntime(client, settings.node, compositor, registry=registry)


def start_publisher(settings: Settings, *, metrics_addr: str,
                    on_fatal: Callable[[BaseException], None] | None = None) -> Publisher:
    """Start the publisher for this node and serve its metrics and liveness on `metrics_addr`.
    `on_fatal` hears what ended the publisher by itself."""
    kube = settings.kube
    thread = NodeThread(
        lambda: node_runtime(settings, async_client(endpoint=kube.endpoint())),
        on_fatal=on_fatal,
    )
    runtime = thread.start()
    liveness = HealthChecks(runtime.liveness)
    server = runtime.metrics.serve(metrics_addr, health=liveness)
    log.info("node publisher running for %s", settings.node.name)
    return Publisher(thread=thread, runtime=runtime, metrics_server=server, liveness=liveness)
