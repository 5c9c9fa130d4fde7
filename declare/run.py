"""declare's one job: the claimed card's connectors + each monitor's Display -> weston.ini.

Screens must come up: an unreachable API, a missing Display or a mode the monitor does not
offer each log a warning naming the monitor and the value, and that output starts at its
preferred mode. Only a missing card (the claim delivered none) fails the container.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from libdisplay import display, fsutil
from libdisplay.compositor.outputs import (
    LAYOUT_SHELL,
    Choice,
    derive_ini,
)
from libdisplay.hardware import drm
from libdisplay.kube import stdlib_client as kubeapi
from libdisplay.pod import RUNTIME_DIR

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything declare reads, as the container's flags and environment give it."""

    sysfs_root: Path
    dev_root: Path
    config: Path
    node_name: str | None
    endpoint: kubeapi.Endpoint | None
    """None when no API is configured: every output then starts at its preferred mode."""
    api_timeout_s: float
    """The budget for all Display reads together, not per read."""
    aliases: Mapping[str, str]
    shell: str = LAYOUT_SHELL
    """weston's shell: the layout module, or a stock shell where it is not built."""
    runtime_dir: Path = RUNTIME_DIR
    """weston's runtime dir as weston sees it: claims' sockets go under its claims/."""


def read_specs(
    devices: Iterable[str],
    *,
    node: str,
    endpoint: kubeapi.Endpoint,
    timeout_s: float,
) -> dict[str, display.DisplaySpec]:
    """Each device's Display spec by device name; what cannot be read is left out, with a warning.

    The first unreachable-API error ends the reads: the next would only wait out its timeout.
    """
    specs: dict[str, display.DisplaySpec] = {}
    deadline = time.monotonic() + timeout_s
    for device in devices:
        name = display.display_name(node, device)
        path = f"/apis/{display.GROUP}/{display.VERSION}/{display.PLURAL}/{name}"
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            log.warning(
                "no time left to read Display %s: its monitor starts at its preferred mode", name
            )
            continue
        try:
            obj = kubeapi.get_json(endpoint, path, timeout=remaining)
        except kubeapi.ApiUnreachableError as err:
            log.warning("API unreachable (%s): every monitor starts at its preferred mode", err)
            break
        except kubeapi.ApiStatusError as err:
            log.warning(
                "cannot read Display %s (%s): its monitor starts at its preferred mode", name, err
            )
            continue
        if obj is None:
            log.warning("no Display %s: its monitor starts at its preferred mode", name)
            continue
        try:
            specs[device] = display.parse_spec(obj.get("spec"))
        except display.DisplaySpecError as err:
            log.warning("Display %s: %s; its monitor starts at its preferred mode", name, err)
    return specs


def plan(settings: Settings) -> tuple[str, tuple[Choice, ...]]:
    """The weston.ini text and the choice behind each output. Raises drm.DrmError without a card."""
    cards = drm.enumerate_cards(sysfs_root=settings.sysfs_root, dev_root=settings.dev_root)
    connected = [c.device_name for card in cards for c in card.connectors if c.connected]
    specs: dict[str, display.DisplaySpec] = {}
    if not connected:
        log.info("no monitor is connected: weston starts with no output")
    elif settings.endpoint is None or not settings.node_name:
        log.warning("no API server or node name: every monitor starts at its preferred mode")
    else:
        specs = read_specs(
            connected,
            node=settings.node_name,
            endpoint=settings.endpoint,
            timeout_s=settings.api_timeout_s,
        )
    choices, text = derive_ini(cards, specs=specs, aliases=settings.aliases,
                               shell=settings.shell, config=settings.config,
                               runtime_dir=settings.runtime_dir)
    return text, choices


def write(settings: Settings) -> tuple[Choice, ...]:
    """Write weston.ini atomically; the file is whole or untouched."""
    text, choices = plan(settings)
    settings.config.parent.mkdir(parents=True, exist_ok=True)
    fsutil.atomic_write(settings.config, text)
    for choice in choices:
        log.info(
            "output %s: mode %s (%s)",
            choice.output.name,
            choice.output.mode,
            choice.source,
        )
    log.info("wrote %s with %d output(s)", settings.config, len(choices))
    return choices
