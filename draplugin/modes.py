"""Claim modes: the mode records in /etc/weston, weston.ini from them, and compositor restarts.

A mode record (`<records dir>/<claimUID>.json`) holds what one claim asks of each of its
outputs (mode, transform, scale) and what each Display's `spec` said before the operator wrote
the claim's values there, so unprepare can put that back. `weston.ini` is composed from the
effective config of every output: the claim's record, else the Display's spec, else the
monitor's preferred mode (`libdisplay.outputs`). When the file changes, the compositor is
restarted: a restart order naming weston's pid (read from westonctl's pid file, the pod shares
its process namespace), SIGTERM, then a bounded wait until a new weston answers on the socket.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

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

log = logging.getLogger(__name__)

OUTPUT_FIELDS: Final = ("mode", "transform", "scale")
RECORD_VERSION: Final = 1
"""A record without `version` is of version 0, the same fields before versioning."""
_POLL_S: Final = 0.02
_PROBE_TIMEOUT_S: Final = 0.5


class ModesError(Exception):
    """Base of this module's errors."""


class ModeRecordError(ModesError):
    """A mode record that cannot be read; the message names the claim, the file and why."""


class CompositorTimeoutError(ModesError):
    """The compositor did not answer on its socket in time after a restart."""


@dataclass(frozen=True, slots=True)
class ModeRecord:
    """What one claim asks of each of its outputs, and the Display specs it replaced."""

    claim_uid: str
    outputs: Mapping[str, DisplayConfig]
    """Per device name; only the output fields (mode, transform, scale) are set."""
    previous: Mapping[str, Mapping[str, object] | None]
    """Per device name, the Display's output fields before; None when there was no Display."""

    def to_json(self) -> str:
        data = {
            "version": RECORD_VERSION,
            "claimUID": self.claim_uid,
            "outputs": {d: c.to_json() for d, c in sorted(self.outputs.items())},
            "previous": {d: None if p is None else dict(p) for d, p in self.previous.items()},
        }
        return json.dumps(data, indent=2, sort_keys=True) + "\n"


def record_path(records_dir: Path, claim_uid: str) -> Path:
    return records_dir / f"{claim_uid}.json"


def write_record(records_dir: Path, record: ModeRecord) -> None:
    records_dir.mkdir(parents=True, exist_ok=True)
    fsutil.atomic_write(record_path(records_dir, record.claim_uid), record.to_json())


def read_record(records_dir: Path, claim_uid: str) -> ModeRecord | None:
    """The claim's record, or None without one; ModeRecordError when it cannot be read."""
    path = record_path(records_dir, claim_uid)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        raise ModeRecordError(f"mode record of claim {claim_uid} ({path}): {err}") from err
    try:
        return _parse_record(text, source=f"mode record of claim {claim_uid}")
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        raise ModeRecordError(
            f"mode record of claim {claim_uid} ({path}) is not valid: {err}") from err


def remove_record(records_dir: Path, claim_uid: str) -> bool:
    return fsutil.remove(record_path(records_dir, claim_uid))


def list_records(records_dir: Path) -> tuple[str, ...]:
    """Claim UIDs with a record; fsutil's temporaries (dot files) are not records."""
    try:
        names = [p.name for p in records_dir.iterdir()]
    except FileNotFoundError:
        return ()
    return tuple(sorted(n[: -len(".json")] for n in names if n.endswith(".json") and n[0] != "."))


def _parse_record(text: str, *, source: str) -> ModeRecord:
    """Lenient within a known version: unknown keys are ignored and an output field that no
    longer validates is left out (logged); a wrong shape or version raises."""
    data: Any = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    version = data.get("version", 0)
    if version not in (0, RECORD_VERSION):
        raise ValueError(f"version {version!r} is not 0 or {RECORD_VERSION}")
    outputs = {}
    for device, stored in dict(data["outputs"]).items():
        config, dropped = from_stored(stored, source=f"{source} device {device}")
        for message in dropped:
            log.warning("%s: left out", message)
        outputs[str(device)] = config
    return ModeRecord(
        claim_uid=str(data["claimUID"]),
        outputs=outputs,
        previous={str(d): None if p is None else dict(p)
                  for d, p in dict(data["previous"]).items()},
    )


def output_fields(config: DisplayConfig) -> DisplayConfig:
    """Only the fields the compositor applies."""
    return DisplayConfig(mode=config.mode, transform=config.transform, scale=config.scale)


# --- Display spec write-back -------------------------------------------------------------


def display_patch(config: DisplayConfig) -> dict[str, object]:
    """The Display `spec` fields a claim's output config sets."""
    return {k: v for k, v in config.to_json().items() if k in OUTPUT_FIELDS}


def read_previous(kube: Kube, name: str) -> Mapping[str, object] | None:
    spec = kube.get_display_spec(name)
    if spec is None:
        return None
    return {k: spec[k] for k in OUTPUT_FIELDS if k in spec}


def write_claimed(kube: Kube, *, node: str, record: ModeRecord) -> None:
    """Put the claim's output fields into each Display that exists."""
    for device, config in record.outputs.items():
        if record.previous.get(device) is None:
            log.info("no Display for %s: its spec.mode is not updated", device)
            continue
        name = display.display_name(node, device)
        kube.patch_display_spec(name, display_patch(config))
        log.info("Display %s spec now %s (claim %s)", name, display_patch(config), record.claim_uid)


def restore_previous(kube: Kube, *, node: str, record: ModeRecord) -> None:
    """Put back what each Display's spec said before the claim."""
    for device, config in record.outputs.items():
        previous = record.previous.get(device)
        if previous is None:
            continue
        patch = {k: previous.get(k) for k in display_patch(config)}
        name = display.display_name(node, device)
        kube.patch_display_spec(name, patch)
        log.info("Display %s spec restored to %s", name, dict(previous))


# --- weston.ini --------------------------------------------------------------------------


def compose(settings: Settings, kube: Kube, *, cards: Iterable[drm.Card] | None = None) -> str:
    """weston.ini text for the effective config of every output of the card, as declare
    composes it at pod start."""
    cards = tuple(cards) if cards is not None else drm.enumerate_cards(
        sysfs_root=settings.sysfs_root, dev_root=settings.dev_root
    )
    claimed = _claimed_outputs(settings.mode_records_dir)
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


def regenerate(settings: Settings, kube: Kube) -> bool:
    """Rewrite weston.ini when its effective config changed; True if it did."""
    text = compose(settings, kube)
    try:
        if settings.weston_ini.read_text(encoding="utf-8") == text:
            return False
    except FileNotFoundError:
        pass
    settings.weston_ini.parent.mkdir(parents=True, exist_ok=True)
    fsutil.atomic_write(settings.weston_ini, text)
    log.info("rewrote %s", settings.weston_ini)
    return True


def _claimed_outputs(records_dir: Path) -> dict[str, DisplayConfig]:
    claimed: dict[str, DisplayConfig] = {}
    for uid in list_records(records_dir):
        try:
            record = read_record(records_dir, uid)
        except ModeRecordError as err:
            log.warning("ignoring %s", err)
            continue
        if record is not None:
            claimed.update(record.outputs)
    return claimed


def _display_spec(kube: Kube, node: str, device: str) -> DisplaySpec | None:
    name = display.display_name(node, device)
    try:
        spec = kube.get_display_spec(name)
        return None if spec is None else parse_spec(spec)
    except (KubeError, DisplaySpecError) as err:
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


def weston_pid(pid_file: Path) -> int | None:
    """weston's pid as westonctl wrote it, when that process is alive."""
    try:
        pid = int(pid_file.read_text(encoding="utf-8").strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # it exists; only signalling is refused, which the restart will report
    return pid


def restart_compositor(settings: Settings, *, reason: str) -> None:
    """Order weston's restart, SIGTERM it and wait until a new weston answers.

    Without a running weston there is nothing to restart: it reads weston.ini when it starts.
    """
    pid = weston_pid(settings.pid_file)
    if pid is None:
        log.info("weston is not running: it will read %s when it starts", settings.weston_ini)
        return
    order_restart(pid, reason=reason, directory=settings.restarts_dir)
    os.kill(pid, signal.SIGTERM)
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
