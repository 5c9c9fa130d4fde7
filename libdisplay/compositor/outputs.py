"""The effective configuration of each output, and the weston.ini that starts weston at it.

The effective mode of an output (DESIGN.md, "Display"): the mode of the claim that holds it
(the operator's checkpoint, `draplugin.driver.modes`), else the Display's `spec.mode`, else the
monitor's preferred mode. A stated mode the monitor
does not offer is not an error here: screens must come up, so it falls back to the preferred
mode with a warning that names the monitor and the value. Both `declare` (at pod start) and
the operator (on a claim, a release, a Display edit or a plug) build weston.ini through one
`derive_ini`, so the files they write differ only by what each read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from libdisplay.compositor.weston import (
    CoreConfig,
    OutputConfig,
    WestonIni,
    WestonIniError,
    check_output_mode,
)
from libdisplay.display import DisplaySpec
from libdisplay.hardware.drm import Card, Connector
from libdisplay.hardware.edid import Edid, EdidError, decode_edid
from libdisplay.hardware.modes import Mode

log = logging.getLogger(__name__)

Source = Literal["claim", "display", "preferred", "disconnected"]

# The layout module is weston's shell (westonctl/layout); weston finds it in its module dir.
# weston appends "-shell.so" to a shell name that lacks it, hence the name.
LAYOUT_SHELL = "layout-shell.so"
# - require-outputs=none: a card with no monitor starts a compositor that stays Running, and
#   its monitors light when they are plugged in.
# - require-input=false: a node with no keyboard or mouse (signage, a wall) must not stop weston.
# - idle-time=0: the compositor never blanks a screen on its own: signage has no input.
DEFAULT_CORE = CoreConfig(
    shell=LAYOUT_SHELL, require_outputs="none", require_input=False, idle_time=0
)


# The claims' sockets live in <weston's runtime dir>/claims/<claim uid>/ (draplugin's delivery).
CLAIMS_DIR = "claims"


@dataclass(frozen=True, slots=True)
class LayoutSockets:
    """The layout module's two sockets, in /etc/weston: out of every consumer's reach; and the
    directory the claims' sockets must be under (CREATE refuses any other path)."""

    control: Path = Path("/etc/weston/layout.sock")
    capture: Path = Path("/etc/weston/capture.sock")
    claims_dir: Path | None = None

    @classmethod
    def beside(cls, config: Path, *, claims_dir: Path | None = None) -> LayoutSockets:
        """The sockets in the directory of weston.ini (/etc/weston in the pod)."""
        return cls(control=config.parent / "layout.sock", capture=config.parent / "capture.sock",
                   claims_dir=claims_dir)

    def section(self) -> str:
        claims = f"claims-dir={self.claims_dir}\n" if self.claims_dir is not None else ""
        return (f"[layout]\ncontrol-socket={self.control}\ncapture-socket={self.capture}\n"
                f"{claims}")


_HEADER = (
    "# Written by display-operator; rewritten at every pod start and whenever a claim\n"
    "# states a mode. Edit the Display objects (spec.mode), not this file.\n"
)


@dataclass(frozen=True, slots=True)
class Monitor:
    """A connector with what its EDID says: the modes it offers and the one it prefers."""

    connector: Connector
    edid: Edid | None
    offered: tuple[Mode, ...]
    preferred: Mode | None

    @property
    def label(self) -> str:
        """How logs name the monitor: connector, and model when the EDID has one."""
        model = self.edid.monitor_name if self.edid else None
        return f"{self.connector.name} ({model})" if model else self.connector.name


@dataclass(frozen=True, slots=True)
class Choice:
    """What one output starts at, where that came from, and what was refused on the way."""

    output: OutputConfig
    source: Source
    warnings: tuple[str, ...] = field(default=())


def read_monitor(connector: Connector) -> Monitor:
    """Decode the connector's EDID; a broken one still leaves the sysfs modes to choose from."""
    edid: Edid | None = None
    if connector.edid:
        try:
            edid = decode_edid(connector.edid)
        except EdidError as err:
            log.warning("monitor on %s has an unreadable EDID: %s", connector.name, err)
    edid_modes = edid.modes if edid else ()
    offered = tuple(dict.fromkeys((*edid_modes, *connector.modes)))
    preferred = (edid.preferred_mode if edid else None) or (
        connector.modes[0] if connector.modes else None
    )
    return Monitor(connector=connector, edid=edid, offered=offered, preferred=preferred)


def choose(
    monitor: Monitor,
    *,
    spec: DisplaySpec | None,
    claim_mode: Mode | None = None,
    output_name: str | None = None,
) -> Choice:
    """The effective output config of one connected monitor."""
    name = output_name or monitor.connector.output_name
    spec = spec or DisplaySpec()
    warnings: list[str] = []
    stated: tuple[tuple[Source, Mode | None], ...] = (("claim", claim_mode), ("display", spec.mode))
    for source, wanted in stated:
        if wanted is None:
            continue
        try:
            found = check_output_mode(wanted, monitor.offered, output=name)
        except WestonIniError:
            warnings.append(
                f"monitor {monitor.label} does not offer the {source}'s mode {wanted}; "
                f"using its preferred mode {_mode_text(monitor.preferred)}"
            )
            continue
        mode = found if found is not None and found.refresh_mhz else wanted
        output = OutputConfig(name=name, mode=mode, transform=spec.transform, scale=spec.scale)
        return Choice(output=output, source=source, warnings=tuple(warnings))
    output = OutputConfig(
        name=name,
        mode=monitor.preferred or "preferred",
        transform=spec.transform,
        scale=spec.scale,
    )
    return Choice(output=output, source="preferred", warnings=tuple(warnings))


def disconnected(connector: Connector, *, output_name: str | None = None) -> Choice:
    """A section for a connector with no monitor: weston reads it when one is plugged in."""
    name = output_name or connector.output_name
    return Choice(output=OutputConfig(name=name, mode="preferred"), source="disconnected")


def _mode_text(mode: Mode | None) -> str:
    return str(mode) if mode else "(none known: weston picks)"


def choose_all(
    cards: Iterable[Card],
    *,
    specs: Mapping[str, DisplaySpec],
    claim_modes: Mapping[str, Mode] | None = None,
    aliases: Mapping[str, str] | None = None,
    read: Callable[[Connector], Monitor] | None = None,
) -> tuple[Choice, ...]:
    """One choice per connector of every card, connected or not, keyed by DRA device name.

    `specs` and `claim_modes` are keyed by device name (`card0-hdmi-a-1`); `aliases` maps a
    connector's output name (`HDMI-A-1`) to the name the compositor's backend gives it (a
    simulated node maps connectors onto x11 outputs `X1`, `X2`, ...). `read` decodes a
    connector's monitor (default `read_monitor`; the operator passes its cached one).
    """
    read = read or read_monitor
    claim_modes = claim_modes or {}
    aliases = aliases or {}
    choices = []
    for card in cards:
        for connector in card.connectors:
            name = aliases.get(connector.output_name)
            if not connector.connected:
                choices.append(disconnected(connector, output_name=name))
                continue
            device = connector.device_name
            choices.append(
                choose(
                    read(connector),
                    spec=specs.get(device),
                    claim_mode=claim_modes.get(device),
                    output_name=name,
                )
            )
    return tuple(choices)


def compose_ini(
    choices: Iterable[Choice],
    *,
    core: CoreConfig = DEFAULT_CORE,
    layout: LayoutSockets | None = None,
) -> WestonIni:
    """weston.ini for these choices: `[core]`, the layout module's sockets, one `[output]` each."""
    layout = layout or LayoutSockets()
    ini = WestonIni.parse(_HEADER + "\n" + layout.section()).with_core(core)
    for choice in choices:
        ini = ini.with_output(choice.output)
    return ini


def derive_ini(
    cards: Iterable[Card],
    *,
    specs: Mapping[str, DisplaySpec],
    claim_modes: Mapping[str, Mode] | None = None,
    aliases: Mapping[str, str] | None = None,
    shell: str = LAYOUT_SHELL,
    config: Path,
    runtime_dir: Path,
    read: Callable[[Connector], Monitor] | None = None,
) -> tuple[tuple[Choice, ...], str]:
    """Each connector's choice (its warnings logged) and the weston.ini text that starts weston
    at them, with the layout module's sockets beside `config` and the claims' sockets under
    `runtime_dir`; `read` as `choose_all` takes it."""
    choices = choose_all(cards, specs=specs, claim_modes=claim_modes, aliases=aliases, read=read)
    for choice in choices:
        for warning in choice.warnings:
            log.warning("%s", warning)
    ini = compose_ini(
        choices,
        core=replace(DEFAULT_CORE, shell=shell),
        layout=LayoutSockets.beside(config, claims_dir=runtime_dir / CLAIMS_DIR),
    )
    return choices, ini.render()
