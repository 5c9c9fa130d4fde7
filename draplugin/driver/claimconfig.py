"""The claim parameters: `DisplayConfig` (display.liken.sh/v1alpha1), decoded strictly.

A claim or its DeviceClass carries opaque config for this driver; each one decodes to a
`DisplayConfig`, and the configs that apply to one allocated device are laid over each other
in order (class configs first, then claim configs; a field a later config states wins). Any
unknown field, wrong type or value out of range raises `ClaimConfigError` naming where the
config came from, the field and the value. Whether the monitor offers a mode is checked later,
against the monitor (`draplugin.driver.state`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Final, Literal, get_args

from libdisplay.compositor.weston import TRANSFORMS, Transform
from libdisplay.hardware.mccs import INPUT_SOURCES
from libdisplay.hardware.modes import Mode, ModeError, parse_mode

API_VERSION: Final = "display.liken.sh/v1alpha1"
KIND: Final = "DisplayConfig"

Power = Literal["on", "standby", "suspend", "off"]
POWER_STATES: Final[tuple[Power, ...]] = get_args(Power)
INPUTS: Final = tuple(INPUT_SOURCES.values())
_INPUT_BY_KEY: Final = {name.lower(): name for name in INPUTS}

PREFERRED: Final = "preferred"
_SCALE_RANGE: Final = (1, 4)
_PERCENT_RANGE: Final = (0, 100)
_FIELDS: Final = frozenset(
    {"apiVersion", "kind", "mode", "transform", "scale", "brightness", "contrast", "input", "power"}
)
DDC_FIELDS: Final = ("brightness", "contrast", "input", "power")


class ClaimConfigError(ValueError):
    """A config that cannot be applied; the message names its source, the field and the value."""


@dataclass(frozen=True, slots=True)
class DisplayConfig:
    """What a claim asks of its monitor; None means "not stated"."""

    mode: Mode | Literal["preferred"] | None = None
    transform: Transform | None = None
    scale: int | None = None
    brightness: int | None = None
    contrast: int | None = None
    input: str | None = None
    power: Power | None = None

    def overlay(self, later: DisplayConfig) -> DisplayConfig:
        """This config with every field `later` states taken from `later`."""
        stated = {f.name: getattr(later, f.name) for f in fields(later)}
        return replace(self, **{k: v for k, v in stated.items() if v is not None})

    @property
    def states_output(self) -> bool:
        """Whether the compositor's output config (mode, transform, scale) is asked for."""
        return any(v is not None for v in (self.mode, self.transform, self.scale))

    @property
    def ddc_settings(self) -> tuple[str, ...]:
        """The DDC/CI fields this config states, in a fixed order."""
        return tuple(name for name in DDC_FIELDS if getattr(self, name) is not None)

    def to_json(self) -> dict[str, object]:
        """The stated fields in the claim's own form, e.g. `{"mode": "1920x1080@60"}`."""
        out: dict[str, object] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = _mode_text(value) if isinstance(value, Mode) else value
        return out


@dataclass(frozen=True, slots=True)
class DdcPlan:
    """A device's DDC/CI settings, checked and ready to apply: its connector (for messages),
    the i2c bus it answers on, and the settings."""

    device: str
    connector: str
    bus: int
    config: DisplayConfig


def decode(parameters: object, *, source: str) -> DisplayConfig:
    """One opaque config's `parameters`; `source` names it in errors (e.g. `class config 1`)."""
    if not isinstance(parameters, Mapping):
        raise ClaimConfigError(f"{source}: parameters must be an object, not {parameters!r}")
    unknown = sorted(str(k) for k in parameters if k not in _FIELDS)
    if unknown:
        raise ClaimConfigError(
            f"{source}: unknown field {unknown[0]!r} (DisplayConfig has mode, transform, "
            "scale, brightness, contrast, input, power)"
        )
    if parameters.get("apiVersion") != API_VERSION or parameters.get("kind") != KIND:
        raise ClaimConfigError(
            f"{source}: apiVersion/kind {parameters.get('apiVersion')!r}/"
            f"{parameters.get('kind')!r} is not {API_VERSION}/{KIND}"
        )
    return DisplayConfig(
        mode=_mode(parameters.get("mode"), source),
        transform=_transform(parameters.get("transform"), source),
        scale=_int(parameters.get("scale"), source, "scale", _SCALE_RANGE),
        brightness=_int(parameters.get("brightness"), source, "brightness", _PERCENT_RANGE),
        contrast=_int(parameters.get("contrast"), source, "contrast", _PERCENT_RANGE),
        input=_input(parameters.get("input"), source),
        power=_power(parameters.get("power"), source),
    )


def from_json(data: Mapping[str, object]) -> DisplayConfig:
    """Read back what `to_json` wrote (the checkpoint's and mode records' form), strictly."""
    return decode({"apiVersion": API_VERSION, "kind": KIND, **data}, source="stored config")


def from_stored(data: object, *, source: str) -> tuple[DisplayConfig, tuple[str, ...]]:
    """What `to_json` wrote, read leniently: a field that no longer decodes (validation
    tightened since it was stored) or is unknown is left out, not fatal. Returns the config
    and one message per field left out, naming `source`, the field and why."""
    if not isinstance(data, Mapping):
        return DisplayConfig(), (f"{source}: not an object: {data!r:.60}",)
    kept: dict[str, object] = {}
    dropped: list[str] = []
    for name, value in data.items():
        if name not in _FIELDS or name in ("apiVersion", "kind"):
            dropped.append(f"{source}: unknown field {name!r}")
            continue
        try:
            decode({"apiVersion": API_VERSION, "kind": KIND, name: value}, source=source)
        except ClaimConfigError as err:
            dropped.append(str(err))
            continue
        kept[str(name)] = value
    return from_json(kept), tuple(dropped)


def _mode_text(mode: Mode) -> str:
    return str(mode)


def _mode(value: object, source: str) -> Mode | Literal["preferred"] | None:
    if value is None:
        return None
    if value == PREFERRED:
        return PREFERRED
    if not isinstance(value, str):
        raise ClaimConfigError(
            f"{source}: field 'mode' must be a string like 1920x1080@60 or preferred, "
            f"not {value!r}"
        )
    try:
        return parse_mode(value)
    except ModeError as err:
        raise ClaimConfigError(f"{source}: field 'mode' value {value!r}: {err}") from err


def _transform(value: object, source: str) -> Transform | None:
    if value is None:
        return None
    if value not in TRANSFORMS:
        raise ClaimConfigError(
            f"{source}: field 'transform' value {value!r} is not one of {', '.join(TRANSFORMS)}"
        )
    return value


def _int(value: object, source: str, field: str, bounds: tuple[int, int]) -> int | None:
    if value is None:
        return None
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, int):
        raise ClaimConfigError(
            f"{source}: field {field!r} must be a whole number from {low} to {high}, "
            f"not {value!r}"
        )
    if not low <= value <= high:
        raise ClaimConfigError(
            f"{source}: field {field!r} value {value} is out of range {low}-{high}"
        )
    return value


def _input(value: object, source: str) -> str | None:
    if value is None:
        return None
    name = _INPUT_BY_KEY.get(value.lower()) if isinstance(value, str) else None
    if name is None:
        raise ClaimConfigError(
            f"{source}: field 'input' value {value!r} is not an input source "
            f"({', '.join(INPUTS)})"
        )
    return name


def _power(value: object, source: str) -> Power | None:
    if value is None:
        return None
    for state in POWER_STATES:
        if value == state:
            return state
    raise ClaimConfigError(
        f"{source}: field 'power' value {value!r} is not one of {', '.join(POWER_STATES)}"
    )
