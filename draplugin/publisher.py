"""The node publisher wired to the kubelet side: one object the operator starts and stops.

The publisher (`draplugin.node`) runs on its own asyncio thread; the kubelet side is sync
gRPC. This module is the seam: it tells the driver why prepares must fail now (the
watchdog's verdict), feeds the health stream, hands the DDC/CI hook to prepare, and
after every prepare/unprepare batch tells the publisher which claim holds which monitor.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from draplugin.checkpoint import Checkpoint
from draplugin.compositor import Compositor
from draplugin.node.displays import ClaimRef
from draplugin.node.metrics import Metrics
from draplugin.node.retry import Backoff
from draplugin.node.runtime import (
    NodeConfig,
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

    def refusal(self) -> str | None:
        """Why new prepares fail now, or None while the compositor answers."""
        if self.runtime.compositor_available:
            return None
        availability = self.runtime.watchdog.availability
        detail = availability.detail if availability else "not probed yet"
        return (
            f"the compositor does not answer on its socket ({detail}); "
            "the claim is prepared once it does"
        )

    def health(self) -> tuple[bool, str]:
        """The health stream's verdict: the watchdog's, not a probe of its own."""
        availability = self.runtime.watchdog.availability
        detail = availability.detail if availability else "not probed yet"
        return self.runtime.compositor_available, f"compositor: {detail}"

    def claims_changed(self, checkpoint: Checkpoint) -> None:
        """Show on each Display which prepared claim holds it."""
        holders = {
            device.device: ClaimRef(namespace=entry.namespace, name=entry.name, uid=entry.uid)
            for entry in checkpoint.claims.values()
            if entry.state == _PREPARED
            for device in entry.devices
        }
        self.runtime.set_claims(holders)
        self.thread.submit(self.runtime.supervise(self.runtime.refresh()))

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


def node_config(settings: Settings) -> NodeConfig:
    """The publisher's view of the settings (the compositor's paths and timeouts are the
    Compositor's, from `Settings.compositor`, never copied here)."""
    namespace, pod = os.environ.get("POD_NAMESPACE"), os.environ.get("POD_NAME")
    return NodeConfig(
        node=settings.node_name,
        sysfs_root=settings.sysfs_root,
        dev_root=settings.dev_root,
        pod=(namespace, pod) if namespace and pod else None,
        aliases=settings.aliases,
        hotplug_resync=settings.hotplug_resync_s,
        slice_resync=settings.slice_resync_s,
        liveness_timeout=settings.liveness_timeout_s,
        backoff=Backoff.capped(settings.api_backoff_cap_s),
    )


def node_runtime(settings: Settings, client: Any) -> NodeRuntime:
    """The node publisher's runtime for these settings, with its compositor counted in its
    metrics."""
    registry = Metrics()
    config = node_config(settings)
    return NodeRuntime(client, config, settings.compositor(recorder=registry,
                                                           probe_timeout=config.probe_timeout),
                       registry=registry)


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
    server = runtime.metrics.serve(metrics_addr, health=runtime.liveness)
    log.info("node publisher running for %s", settings.node_name)
    return Publisher(thread=thread, runtime=runtime, metrics_server=server)
