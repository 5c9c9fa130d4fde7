"""The Display object (CRD `displays.display.liken.sh`, cluster-scoped): one per node and connector.

`spec` is the mode the compositor starts at — what a person set, or what the operator wrote
for a claim that stated one; `status` is what the operator observed. This module owns the
object's name and the strict reading of its `spec`; it does no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal, get_args

from libdisplay.compositor.weston import TRANSFORMS, Transform
from libdisplay.hardware.modes import Mode, ModeError, parse_mode

GROUP = "display.liken.sh"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "Display"
PLURAL = "displays"
# Labels every Display carries, so a node's Displays are one selector away.
NODE_LABEL = f"{GROUP}/node"
DEVICE_LABEL = f"{GROUP}/device"

_MAX_NAME = 253
_MAX_LABEL = 63
_SPEC_KEYS = frozenset({"mode", "transform", "scale", "power"})

DisplayPower = Literal["On", "Off", "Standby"]
"""`spec.power`, in the API's CamelCase for enumerations: the output's power as a person sets
it (a schedule included). Off and Standby both stop the output's signal (KMS); they differ
only in what DDC/CI asks of the monitor (VCP 0xD6 04 off, 02 standby)."""
POWER_STATES: Final[tuple[DisplayPower, ...]] = get_args(DisplayPower)


class DisplaySpecError(ValueError):
    """A Display `spec` field that is not usable; the message names the field and value."""


@dataclass(frozen=True, slots=True)
class DisplaySpec:
    """A Display's `spec`. None means "not stated": the monitor's preferred mode, normal, 1."""

    mode: Mode | None = None
    transform: Transform | None = None
    scale: int | None = None
    power: DisplayPower | None = None


def display_name(node: str, device: str) -> str:
    """`<node>.<device>`, e.g. `kiosk-3.card0-hdmi-a-1`: a DNS subdomain, unique per connector.

    A node name near the 253-character limit is cut and suffixed with a hash of the whole,
    so two long node names never share a Display.
    """
    name = f"{node}.{device}"
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    keep = _MAX_NAME - len(device) - len(digest) - 2
    return f"{node[:keep].rstrip('.-')}-{digest}.{device}"


def labels(node: str, device: str) -> dict[str, str]:
    """The labels a Display carries: its node and its device.

    A label value holds at most 63 characters, a node name up to 253: a longer node name is
    cut and suffixed with a hash of the whole, as `display_name` does, so the selector for
    one node never matches another's Displays.
    """
    return {NODE_LABEL: _label_value(node), DEVICE_LABEL: _label_value(device)}


def _label_value(text: str) -> str:
    if len(text) <= _MAX_LABEL:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    return f"{text[: _MAX_LABEL - len(digest) - 1].rstrip('.-_')}-{digest}"


def parse_spec(spec: Mapping[str, object] | None) -> DisplaySpec:
    """Read a Display's `spec` strictly: any field that is not usable raises DisplaySpecError.

    `mode: preferred` is the same as no mode.
    """
    if spec is None:
        return DisplaySpec()
    unknown = sorted(set(spec) - _SPEC_KEYS)
    if unknown:
        raise DisplaySpecError(f"spec has unknown field(s) {', '.join(unknown)}")
    return DisplaySpec(
        mode=_mode(spec.get("mode")),
        transform=_transform(spec.get("transform")),
        scale=_scale(spec.get("scale")),
        power=_power(spec.get("power")),
    )


def _mode(value: object) -> Mode | None:
    if value is None or value == "preferred":
        return None
    if not isinstance(value, str):
        raise DisplaySpecError(f"spec.mode must be a string like 1920x1080@60, not {value!r}")
    try:
        return parse_mode(value)
    except ModeError as err:
        raise DisplaySpecError(f"spec.mode: {err}") from err


def _transform(value: object) -> Transform | None:
    if value is None:
        return None
    if value not in TRANSFORMS:
        raise DisplaySpecError(
            f"spec.transform must be one of {', '.join(TRANSFORMS)}, not {value!r}"
        )
    return value


def _scale(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4:
        raise DisplaySpecError(f"spec.scale must be a whole number from 1 to 4, not {value!r}")
    return value


def _power(value: object) -> DisplayPower | None:
    if value is None:
        return None
    for state in POWER_STATES:
        if value == state:
            return state
    raise DisplaySpecError(f"spec.power must be one of {', '.join(POWER_STATES)}, not {value!r}")
