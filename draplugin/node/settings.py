"""The node's group of the operator's settings (`draplugin.settings.Settings.node`): where the
node's pieces are and how often the publisher re-reads them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from draplugin.node import hangs, watchdog
from draplugin.node.retry import DEFAULT_BACKOFF, Backoff


@dataclass(frozen=True, slots=True)
class NodeSettings:
    """`name` is the node's (the slice's pool, the Displays' prefix). `pod` is (namespace,
    name) of this pod, for the weston container's restart count; None leaves the crash count
    at 0. `aliases` map connector output names to the compositor's (a simulated node runs
    weston's x11 outputs `X1`, ...)."""

    name: str
    sysfs_root: Path = Path("/sys")
    dev_root: Path = Path("/dev")
    pod: tuple[str, str] | None = None
    aliases: Mapping[str, str] = field(default_factory=dict)
    """Connector output name (`HDMI-A-1`) → the compositor's name for it, where they differ."""
    slice_resync: float = 5.0
    """Seconds between checks of the ResourceSlice against the watch's cache."""
    hotplug_resync: float = 30.0
    """Seconds between re-reads of sysfs without a uevent, for lost events."""
    ddc_timeout: float = 10.0
    watchdog_interval: float = watchdog.INTERVAL_S
    """Seconds between the watchdog's probes (draplugin.node.watchdog)."""
    hang_budget: hangs.Budget = hangs.DEFAULT_BUDGET
    """When a silent compositor is tainted and killed: its defaults are the hang budgets'
    (draplugin.node.hangs)."""
    prepare_wait: float = watchdog.PREPARE_WAIT_S
    """Seconds a prepare waits for the watchdog's first verdict (the operator just started)."""
    probe_timeout: float = 1.0
    """The compositor's other probes (its outputs, a restart's answer)."""
    liveness_timeout: float = 60.0
    """Seconds without a completed pass of the slice loop after which liveness fails."""
    backoff: Backoff = DEFAULT_BACKOFF
    """Delays between retries of a failed API call."""
