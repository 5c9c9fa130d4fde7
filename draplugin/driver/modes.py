"""Claim modes: what each output runs at, the weston.ini that says so, and applying it.

Where each fact lives, once:

- **What a claim asked for** (mode, transform, scale per device) is its entry's `config` in the
  plugin's checkpoint (`draplugin.driver.checkpoint`), in the kubelet-plugin hostPath. It survives a
  restart of any container and a roll of the pod; the weston-config emptyDir does not, so
  nothing about a claim is kept there.
- **What a person wants** is the Display's `spec` (mode, transform, scale). The operator never
  writes it: a claim's mode is what the operator applies and observes (`status.currentMode`),
  not a setting of the monitor. So releasing a claim needs no memory of what came before it,
  and a person's edit of `spec.mode` made during a claim is simply what applies after release.
- **What an output runs at** is derived, never stored: per connected connector, the claim
  holding it (checkpoint state `started` or `prepared`) over the Display's `spec` over the
  monitor's preferred mode, field by field for transform and scale; a claim's `preferred`
  overrides `spec.mode` (`libdisplay.compositor.outputs.choose`).

`apply` derives it, writes it out as `weston.ini` (for weston's next start: declare writes
the same file at pod start from the Displays alone, as it cannot read the checkpoint), and
brings the running compositor to it through `draplugin.compositor.Compositor`: live, output
by output, through the layout module; a restart only where the module cannot. It runs at
each prepare or unprepare that states output fields, after each connector change the slice
published, after a person edits a Display's `spec`, and at the operator's start (a pod that
replaced the last one started weston from the Displays alone, so an output a claim holds
across the roll gets its claim's settings back, live).

The file and the running compositor are two steps: a marker beside weston.ini
(`weston.ini.unapplied`) is written before the file and removed once the compositor was
brought to it (or is not running, and reads the file when it starts), so an operator killed
between the two still applies the change at its next start, even where only a restart can
(a stock shell, without the layout module).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final, Literal

from draplugin.compositor import Compositor, Outcome, RestartReason, Wanted, mode_text
from draplugin.driver import power as outputpower
from draplugin.driver.checkpoint import Checkpoint, ClaimEntry
from draplugin.driver.claimconfig import DisplayConfig, from_stored
from draplugin.kube import Kube, KubeError
from draplugin.monitors import read_monitor
from draplugin.settings import Settings
from libdisplay import display, fsutil
from libdisplay.compositor.outputs import Choice, derive_ini
from libdisplay.compositor.weston import WestonIniError, check_output_mode
from libdisplay.display import DisplayPower, DisplaySpec, DisplaySpecError, parse_spec
from libdisplay.hardware import drm
from libdisplay.hardware.modes import Mode

log = logging.getLogger(__name__)

HOLDING_STATES: Final = ("started", "prepared")
"""Checkpoint states whose claim's output fields apply; `unpreparing` is being released."""


class ModesError(Exception):
    """Base of this module's errors."""


class DisplayReadError(ModesError):
    """A Display could not be read from the API: the derivation would be a guess."""


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


@dataclass(frozen=True, slots=True)
class Derivation:
    """What every output of the card runs at, and why: per device name its choice (the
    compositor's output name and settings, their source, what was refused), the Display
    each read, and the claims' fields; `text` is weston.ini saying so."""

    choices: dict[str, Choice]
    connected: tuple[str, ...]
    displays: dict[str, ReadDisplay | None]
    claimed: dict[str, DisplayConfig]
    offered: dict[str, tuple[Mode, ...]]
    text: str
    power: dict[str, DisplayPower] = field(default_factory=dict)
    """Per connected device, the power its Display asks the operator to apply
    (`draplugin.driver.power.target`); a device left out is not managed (lit)."""

    def wanted(self, *, modeset: Collection[str] = ()) -> list[Wanted]:
        """What the compositor's outputs should run at, one per connected device; `modeset`
        names devices whose monitor was re-plugged (a full modeset even when nothing
        differs)."""
        wanted = []
        for device in self.connected:
            output = self.choices[device].output
            wanted.append(Wanted(
                output=output.name,
                mode=output.mode if isinstance(output.mode, Mode) else None,
                transform=output.transform or "normal",
                scale=output.scale or 1,
                modeset=device in modeset,
                power="on" if self.power.get(device, "On") == "On" else "off"))
        return wanted


def derive(settings: Settings, kube: Kube, claimed: Mapping[str, DisplayConfig], *,
           cards: Iterable[drm.Card] | None = None) -> Derivation:
    """Every output's settings from the checkpoint's claims over the Displays, as declare
    composes them (DisplayReadError when a Display cannot be read: a derivation would be a
    guess)."""
    cards = tuple(cards) if cards is not None else drm.enumerate_cards(
        sysfs_root=settings.node.sysfs_root, dev_root=settings.node.dev_root
    )
    connected = tuple(c.device_name for card in cards for c in card.connectors if c.connected)
    read = {d: _read_display(kube, settings.node.name, d) for d in connected}
    merged = {d: _merged_spec(r.spec if r else None, claimed.get(d)) for d, r in read.items()}
    claim_modes = {d: c.mode for d, c in claimed.items() if isinstance(c.mode, Mode)}
    choices, text = derive_ini(cards, specs=merged, claim_modes=claim_modes,
                               aliases=settings.node.aliases, shell=settings.shell,
                               config=settings.weston_ini, runtime_dir=settings.socket_dir,
                               read=read_monitor)
    devices = [c.device_name for card in cards for c in card.connectors]
    offered = {c.device_name: read_monitor(c).offered
                for card in cards for c in card.connectors if c.connected}
    power = {d: wanted for d, r in read.items() if r is not None
             and (wanted := outputpower.target(r.spec.power if r.spec else None,
                                               r.last_power)) is not None}
    return Derivation(choices=dict(zip(devices, choices, strict=True)), connected=connected,
                      displays=read, claimed=dict(claimed), offered=offered, text=text,
                      power=power)


def compose(settings: Settings, kube: Kube, claimed: Mapping[str, DisplayConfig], *,
            cards: Iterable[drm.Card] | None = None) -> str:
    """weston.ini text for every output of the card with these claims' fields."""
    return derive(settings, kube, claimed, cards=cards).text


@dataclass(frozen=True, slots=True)
class Applied:
    """What `apply` derived, and what the compositor did with it."""

    derivation: Derivation
    outcome: Outcome = field(default_factory=Outcome)
    written: bool = False
    power: dict[str, outputpower.PowerApplied] = field(default_factory=dict)
    """Per device whose power the derivation manages, how it was applied."""

    @property
    def restarted(self) -> bool:
        return self.outcome.restarted is not None


def unapplied_marker(weston_ini: Path) -> Path:
    return weston_ini.with_name(weston_ini.name + ".unapplied")


SpecReason = Literal["Applied", "HeldByClaim", "ModeNotOffered", "InvalidSpec", "ApplyFailed",
                     "RestartPending", "PowerNotApplied", "PowerPartlyApplied"]


@dataclass(frozen=True, slots=True)
class SpecVerdict:
    """What came of one Display's `spec` (the generation the derivation read): applied, with
    what weston reports; held by a claim that sets the output; a mode the monitor does not
    offer (with what it offers); a spec no compositor can take; a change the compositor
    refused; or waiting for the compositor to start. `power`: how its power was applied,
    where the Display manages it; once the rest applied, a power that did not take effect,
    or took effect with a step failed, is the verdict's reason."""

    device: str
    display: str
    generation: int
    reason: SpecReason
    mode: str = ""
    transform: str = ""
    scale: int = 1
    holder: ClaimEntry | None = None
    offered: tuple[str, ...] = ()
    field: str = ""
    detail: str = ""
    power: outputpower.PowerApplied | None = None


def holders(checkpoint: Checkpoint) -> dict[str, ClaimEntry]:
    """Per device, the claim that holds it and sets its output (a claim stating no output
    field leaves the Display's spec in force)."""
    held = {}
    for uid in sorted(checkpoint.claims):
        entry = checkpoint.claims[uid]
        if entry.state not in HOLDING_STATES:
            continue
        for device in entry.config:
            if output_fields(stored_config(entry, device)).states_output:
                held[device] = entry
    return held


def verdicts(applied: Applied, held: Mapping[str, ClaimEntry]) -> list[SpecVerdict]:
    """Each connected output's Display spec outcome after `apply`."""
    derivation, outcome = applied.derivation, applied.outcome
    found = []
    for device in derivation.connected:
        read = derivation.displays.get(device)
        if read is None or read.generation is None:
            continue  # no Display yet: the publisher creates it, and its creation is an edit
        power = applied.power.get(device)
        verdict = SpecVerdict(device=device, display=read.name, generation=read.generation,
                              reason="Applied", power=power)
        output = derivation.choices[device].output.name
        state = outcome.states.get(output)
        if read.invalid is not None:
            verdict = replace(verdict, reason="InvalidSpec", field="spec",
                              detail=str(read.invalid))
        elif device in held:
            verdict = replace(verdict, reason="HeldByClaim", holder=held[device])
        elif read.spec is not None and read.spec.mode is not None and not _offers(
                read.spec.mode, derivation.offered.get(device, ()), output):
            verdict = replace(verdict, reason="ModeNotOffered", mode=str(read.spec.mode),
                              offered=_listed(derivation.offered.get(device, ())))
        elif output in outcome.failed:
            err = outcome.failed[output]
            verdict = replace(verdict, reason="ApplyFailed",
                              field=str(getattr(err, "field", "") or "output"), detail=str(err))
        elif state is None:
            verdict = replace(verdict, reason="RestartPending",
                              detail="the compositor is not running; it starts at the spec")
        else:
            verdict = replace(verdict, mode=mode_text(state), transform=state.transform,
                              scale=state.scale)
            if power is not None and not power.complete:
                verdict = replace(verdict, reason="PowerPartlyApplied" if power.applied_by
                                  else "PowerNotApplied")
        found.append(verdict)
    return found


def _listed(offered: tuple[Mode, ...]) -> tuple[str, ...]:
    """The offered modes as a person reads them: a size sysfs lists without a refresh is
    left out where the EDID gives it with one."""
    timed = {(m.width, m.height) for m in offered if m.refresh_mhz}
    return tuple(str(m) for m in offered if m.refresh_mhz or (m.width, m.height) not in timed)


def _offers(mode: Mode, offered: tuple[Mode, ...], output: str) -> bool:
    try:
        check_output_mode(mode, offered, output=output)
    except WestonIniError:
        return False
    return True


def apply(settings: Settings, kube: Kube, checkpoint: Checkpoint, compositor: Compositor, *,
          why: str, modeset: Collection[str] = (), restart_reason: RestartReason | None = None,
          on_written: Callable[[], None] | None = None,
          cards: Iterable[drm.Card] | None = None,
          power_hook: outputpower.PowerHook | None = None) -> Applied:
    """Derive every output's settings, write weston.ini when its text changed, and bring the
    running compositor to them (`Compositor.apply`: live where it can). `modeset` names
    devices whose monitor was re-plugged; `restart_reason` names a fallback restart by why it
    was needed instead of by what the module answered. `on_written` is called between the
    file and the compositor (a test's crash point). `cards`: the inventory to derive from,
    else sysfs is read now. Each managed output's power is then set on its monitor through
    `power_hook` (DDC/CI) after the compositor's KMS step (`draplugin.driver.power`)."""
    derivation = derive(settings, kube, claimed_outputs(checkpoint), cards=cards)
    ini = settings.weston_ini
    marker = unapplied_marker(ini)
    changed = _read(ini) != derivation.text
    if changed:
        ini.parent.mkdir(parents=True, exist_ok=True)
        fsutil.atomic_write(marker, f"{why}\n")
        fsutil.atomic_write(ini, derivation.text)
        log.info("rewrote %s (%s)", ini, why)
    if on_written is not None:
        on_written()
    connected = [derivation.choices[d].output.name for d in derivation.connected]
    outcome = compositor.apply(derivation.wanted(modeset=modeset), why=why,
                               connected=connected,
                               config_changed=changed or marker.exists(),
                               restart_reason=restart_reason)
    _remove(marker)
    return Applied(derivation=derivation, outcome=outcome, written=changed,
                   power=_power_steps(derivation, outcome, power_hook))


def apply_power(settings: Settings, kube: Kube, checkpoint: Checkpoint, compositor: Compositor,
                *, why: str, power_hook: outputpower.PowerHook | None = None) -> Applied:
    """The outputs' power alone, KMS then DDC/CI, as `apply` ends (after the compositor
    started again: it runs weston.ini, which carries no power, and lit every output)."""
    derivation = derive(settings, kube, claimed_outputs(checkpoint))
    outcome = compositor.apply_power(derivation.wanted(), why=why)
    return Applied(derivation=derivation, outcome=outcome,
                   power=_power_steps(derivation, outcome, power_hook))


def _power_steps(derivation: Derivation, outcome: Outcome,
                 hook: outputpower.PowerHook | None) -> dict[str, outputpower.PowerApplied]:
    """Each managed output's DDC/CI step after the compositor's KMS one (`outcome`)."""
    powered = {device: outputpower.apply(device, derivation.choices[device].output.name, state,
                                         outcome, hook or outputpower.NoPower())
               for device, state in derivation.power.items()}
    for device, done in powered.items():
        log.info("%s: %s", device, done.describe())
    return powered


def _remove(path: Path) -> None:
    fsutil.remove(path)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


@dataclass(frozen=True, slots=True)
class ReadDisplay:
    """A Display as the derivation read it: which edit (`generation`) of its spec, the spec
    when it parses, else why not."""

    name: str
    generation: int | None
    spec: DisplaySpec | None
    invalid: DisplaySpecError | None = None
    last_power: object = None
    """`status.power.state`: the power the operator last applied (to turn On again when the
    spec stops stating one)."""


def _read_display(kube: Kube, node: str, device: str) -> ReadDisplay | None:
    name = display.display_name(node, device)
    try:
        found = kube.get_display(name)
    except KubeError as err:
        raise DisplayReadError(f"cannot read Display {name}: {err}") from err
    if found is None:
        return None
    generation = (found.get("metadata") or {}).get("generation")
    reported = (found.get("status") or {}).get("power")
    last_power = reported.get("state") if isinstance(reported, dict) else None
    try:
        spec = parse_spec(found.get("spec") or {})
    except DisplaySpecError as err:
        # As declare does: a spec no compositor can take leaves the output at its default.
        log.warning("Display %s: %s; its output ignores it", name, err)
        return ReadDisplay(name, generation, None, err, last_power=last_power)
    return ReadDisplay(name, generation, spec, last_power=last_power)


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
