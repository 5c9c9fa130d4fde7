"""Claim modes: what each output runs at, the weston.ini that says so, and ordered restarts.

Where each fact lives, once:

- **What a claim asked for** (mode, transform, scale per device) is its entry's `config` in the
  plugin's checkpoint (`draplugin.checkpoint`), in the kubelet-plugin hostPath. It survives a
  restart of any container and a roll of the pod; the weston-config emptyDir does not, so
  nothing about a claim is kept there.
- **What a person wants** is the Display's `spec` (mode, transform, scale). The operator never
  writes it: a claim's mode is what the operator applies and observes (`status.currentMode`),
  not a setting of the monitor. So releasing a claim needs no memory of what came before it,
  and a person's edit of `spec.mode` made during a claim is simply what applies after release.
- **What an output runs at** is derived, never stored: per connected connector, the claim
  holding it (checkpoint state `started` or `prepared`) over the Display's `spec` over the
  monitor's preferred mode, field by field for transform and scale; a claim's `preferred`
  overrides `spec.mode` (`libdisplay.outputs.choose`). `weston.ini` is that derivation
  written out. declare writes it at pod start from the Displays alone (it cannot read the
  checkpoint); the operator rewrites it from the checkpoint and the Displays at its own start,
  at each prepare or unprepare that states output fields, and after each connector change the
  slice published (`Driver.follow_connectors`: a monitor plugged in after start gets its
  claim's or Display's mode), and restarts the compositor when the text changed. So a new
  pod sets each mode once, except an output a claim holds across the roll: weston starts at
  its Display's mode and the operator's start-up orders the one restart that puts the
  claim's mode back. A machine that comes up with no claim left
  runs every screen at its Display's `spec.mode`, or at the mode its monitor prefers.

A rewrite of weston.ini and the restart that applies it are two steps: a marker beside
weston.ini (`weston.ini.unapplied`) is written before the file and removed once weston has
been told to restart (or is not running, and reads the file when it starts), so an operator
killed between the two restarts the compositor at its next start.

A restart is a restart order naming weston's pid (`libdisplay.westonpid`, which checks the pid
is weston's), SIGTERM, then a bounded wait until a new weston answers on the socket.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Final

from draplugin.checkpoint import Checkpoint, ClaimEntry
from draplugin.claimconfig import DisplayConfig, from_stored
from draplugin.kube import Kube, KubeError
from draplugin.settings import Settings
from libdisplay import display, drm, fsutil
from libdisplay.display import DisplaySpec, DisplaySpecError, parse_spec
from libdisplay.modes import Mode
from libdisplay.outputs import (
    CLAIMS_DIR,
    DEFAULT_CORE,
    LayoutSockets,
    choose_all,
    compose_ini,
)
from libdisplay.wayland import Liveness, probe
from libdisplay.weston import order_restart
from libdisplay.westonpid import weston_pid

log = logging.getLogger(__name__)

HOLDING_STATES: Final = ("started", "prepared")
"""Checkpoint states whose claim's output fields apply; `unpreparing` is being released."""
_POLL_S: Final = 0.02
_PROBE_TIMEOUT_S: Final = 0.5


class ModesError(Exception):
    """Base of this module's errors."""


class DisplayReadError(ModesError):
    """A Display could not be read from the API: the derivation would be a guess."""


class CompositorTimeoutError(ModesError):
    """The compositor did not answer on its socket in time after a restart."""


def output_fields(config: DisplayConfig) -> DisplayConfig:
    """Only the fields the compositor applies."""
    return DisplayConfig(mode=config.mode, transform=config.transform, scale=config.scale)


def stored_config(entry: ClaimEntry, device: str) -> DisplayConfig:
    """A device's checkpointed config, read leniently: a field that no longer validates is
    left out (logged), never fatal."""
    config, dropped = from_stored(
        entry.config.get(device, {}),
        source=f"checkpointed config of claim {entry.uid} device {device}")
    for message in dropped:
        log.warning("%s: left out", message)
    return config


def states_output(entry: ClaimEntry) -> bool:
    """Whether the claim asks the compositor for a mode, transform or scale."""
    return any(stored_config(entry, d).states_output for d in entry.config)


def claimed_outputs(checkpoint: Checkpoint) -> dict[str, DisplayConfig]:
    """Per device name, the output fields of the claim holding it, from the checkpoint."""
    claimed: dict[str, DisplayConfig] = {}
    for uid in sorted(checkpoint.claims):
        entry = checkpoint.claims[uid]
        if entry.state not in HOLDING_STATES:
            continue
        for device in entry.config:
            config = output_fields(stored_config(entry, device))
            if config.states_output:
                claimed[device] = config
    return claimed


# --- weston.ini --------------------------------------------------------------------------


def compose(settings: Settings, kube: Kube, claimed: Mapping[str, DisplayConfig], *,
            cards: Iterable[drm.Card] | None = None) -> str:
    """weston.ini text for every output of the card, composed as declare composes it."""
    cards = tuple(cards) if cards is not None else drm.enumerate_cards(
        sysfs_root=settings.sysfs_root, dev_root=settings.dev_root
    )
    connected = [c.device_name for card in cards for c in card.connectors if c.connected]
    specs = {d: _merged_spec(_display_spec(kube, settings.node_name, d), claimed.get(d))
             for d in connected}
    claim_modes = {d: c.mode for d, c in claimed.items() if isinstance(c.mode, Mode)}
    choices = choose_all(cards, specs=specs, claim_modes=claim_modes, aliases=settings.aliases)
    for choice in choices:
        for warning in choice.warnings:
            log.warning("%s", warning)
    # The same [core] and layout sockets declare writes, so only the outputs can differ.
    return compose_ini(
        choices,
        core=replace(DEFAULT_CORE, shell=settings.shell),
        layout=LayoutSockets.beside(settings.weston_ini,
                                    claims_dir=settings.socket_dir / CLAIMS_DIR),
    ).render()


def unapplied_marker(weston_ini: Path) -> Path:
    return weston_ini.with_name(weston_ini.name + ".unapplied")


def apply(settings: Settings, kube: Kube, checkpoint: Checkpoint, *, reason: str,
          restart: bool = True,
          on_ordered: Callable[[], None] | None = None,
          on_written: Callable[[], None] | None = None) -> bool:
    """Bring weston.ini in line with the checkpoint and the Displays, and restart the
    compositor when it changed (or an earlier change was never applied). True when it did.
    With `restart` False the file is only rewritten, for weston's next start, and an earlier
    unapplied change stays marked. `on_ordered` hears each restart order; `on_written` is
    called between the file and the restart (a test's crash point)."""
    text = compose(settings, kube, claimed_outputs(checkpoint))
    ini = settings.weston_ini
    marker = unapplied_marker(ini)
    changed = _read(ini) != text
    if changed:
        ini.parent.mkdir(parents=True, exist_ok=True)
        if restart:
            fsutil.atomic_write(marker, f"{reason}\n")
        fsutil.atomic_write(ini, text)
        log.info("rewrote %s (%s)", ini, reason)
    if not restart or not (changed or marker.exists()):
        return False
    if on_written is not None:
        on_written()
    restart_compositor(settings, reason=reason, on_ordered=on_ordered,
                       on_signalled=lambda: _remove(marker))
    return True


def _remove(path: Path) -> None:
    fsutil.remove(path)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def _display_spec(kube: Kube, node: str, device: str) -> DisplaySpec | None:
    name = display.display_name(node, device)
    try:
        spec = kube.get_display_spec(name)
    except KubeError as err:
        raise DisplayReadError(f"cannot read Display {name}: {err}") from err
    if spec is None:
        return None
    try:
        return parse_spec(spec)
    except DisplaySpecError as err:
        # As declare does: a spec no compositor can take leaves the output at its default.
        log.warning("Display %s: %s; its output ignores it", name, err)
        return None


def _merged_spec(spec: DisplaySpec | None, claim: DisplayConfig | None) -> DisplaySpec:
    spec = spec or DisplaySpec()
    if claim is None:
        return spec
    return DisplaySpec(
        # "preferred" in a claim overrides whatever mode the Display states.
        mode=None if claim.mode == "preferred" else spec.mode,
        transform=claim.transform if claim.transform is not None else spec.transform,
        scale=claim.scale if claim.scale is not None else spec.scale,
    )


# --- restarts ----------------------------------------------------------------------------


def restart_compositor(settings: Settings, *, reason: str,
                       on_ordered: Callable[[], None] | None = None,
                       on_signalled: Callable[[], None] | None = None) -> None:
    """Order weston's restart, SIGTERM it and wait until a new weston answers.

    Without a running weston there is nothing to restart: it reads weston.ini when it starts.
    `on_ordered` hears each order written; `on_signalled` is called once weston was told (or
    there is no weston), before the wait.
    """
    pid = weston_pid(settings.pid_file)
    if pid is None:
        log.info("weston is not running: it will read %s when it starts", settings.weston_ini)
        if on_signalled is not None:
            on_signalled()
        return
    order_restart(pid, reason=reason, directory=settings.restarts_dir)
    if on_ordered is not None:
        on_ordered()
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        log.info("weston pid %s exited before the SIGTERM", pid)
    if on_signalled is not None:
        on_signalled()
    log.info("sent SIGTERM to weston pid %s; waiting for the socket to answer", pid)
    started = time.monotonic()
    deadline = started + settings.restart_timeout_s
    while time.monotonic() < deadline:
        new = weston_pid(settings.pid_file)
        if new is not None and new != pid and _answers(settings.wayland_socket):
            log.info("weston pid %s answers %.3f s after the restart", new,
                     time.monotonic() - started)
            return
        time.sleep(_POLL_S)
    raise CompositorTimeoutError(
        f"the compositor did not answer on {settings.wayland_socket} within "
        f"{settings.restart_timeout_s:g} s after its restart"
    )


def _answers(socket: Path) -> bool:
    return probe(socket, timeout=_PROBE_TIMEOUT_S).state is Liveness.ANSWERING
