"""Switch the Displays a label selector picks to one power state: a schedule, the Kubernetes way.

`draplugin power STATE --selector SELECTOR` is what the CronJobs of
deploy/examples/display-power-schedule.yaml run (the operator's image, no kubectl, no shell):
it lists the Displays the selector picks and sets `spec.power` on each that is not at STATE yet,
with a JSON merge patch of that one field, so a person's other spec fields and the operator's
status stay as they are. Its ServiceAccount needs `list` and `patch` on `displays` and nothing
else (the example's ClusterRole; tests/deploy holds it to that).

A selector that picks nothing is an error: a typo in a CronJob would otherwise leave the
screens on every night in silence.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from libdisplay import display
from libdisplay.display import POWER_STATES, DisplayPower

if TYPE_CHECKING:
    from lightkube import Client
    from lightkube.core.selector import _VALUE_TYPE

log = logging.getLogger(__name__)

Result = Literal["switched", "unchanged"]
# A label key: an optional DNS-subdomain prefix and a name (what the API accepts).
_KEY: Final = r"(?:[a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_VALUE: Final = r"(?:[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_TERM: Final = re.compile(rf"^(?P<not>!)?(?P<key>{_KEY})(?:(?P<op>==|=|!=)(?P<value>{_VALUE}))?$")


class ScheduleError(Exception):
    """Base of this module's errors; the message names the option or the Display."""


class SelectorError(ScheduleError, ValueError):
    """--selector is not an equality-based label selector."""


class PowerStateError(ScheduleError, ValueError):
    """STATE is not one of the Display's power states."""


class NothingSelectedError(ScheduleError):
    """No Display carries the selected labels."""


@dataclass(frozen=True, slots=True)
class Switched:
    """One selected Display and what was done to it."""

    name: str
    result: Result
    before: str | None


def power_state(text: str) -> DisplayPower:
    """STATE as the Display's enum spells it (PowerStateError otherwise)."""
    for state in POWER_STATES:
        if text == state:
            return state
    raise PowerStateError(f"STATE must be one of {', '.join(POWER_STATES)}, not {text!r}")


def parse_selector(text: str) -> dict[str, _VALUE_TYPE]:
    """An equality-based label selector (`a=b,c!=d,e,!f`) as lightkube takes it."""
    from lightkube import operators

    terms: dict[str, _VALUE_TYPE] = {}
    for raw in text.split(","):
        term = raw.strip()
        match = _TERM.match(term)
        if not term or match is None or (match["not"] and match["op"]):
            raise SelectorError(
                f"--selector: {term!r} is not a label selector term (key=value, key!=value, "
                "key or !key, comma-separated)")
        key = match["key"]
        if key in terms:
            raise SelectorError(f"--selector: {key!r} appears twice")
        if match["not"]:
            terms[key] = operators.not_exists()
        elif match["op"] == "!=":
            terms[key] = operators.not_equal(match["value"])
        elif match["op"]:
            terms[key] = match["value"]
        else:
            terms[key] = None  # exists
    return terms


def switch(client: Client, state: DisplayPower, selector: str) -> list[Switched]:
    """Set `spec.power` to `state` on every Display `selector` picks, in name order; those
    at `state` already are not written. NothingSelectedError when it picks none."""
    from lightkube.generic_resource import create_global_resource
    from lightkube.types import PatchType

    resource = create_global_resource(display.GROUP, display.VERSION, display.KIND,
                                      display.PLURAL)
    found = sorted((_as_dict(obj) for obj in client.list(resource,
                                                         labels=parse_selector(selector))),
                   key=lambda obj: str(obj["metadata"]["name"]))
    if not found:
        raise NothingSelectedError(f"no Display has the labels {selector!r}")
    done = []
    for obj in found:
        name = str(obj["metadata"]["name"])
        before = (obj.get("spec") or {}).get("power")
        if before == state:
            done.append(Switched(name, "unchanged", before))
            continue
        client.patch(resource, name, {"spec": {"power": state}}, patch_type=PatchType.MERGE)
        log.info("Display %s: spec.power %s -> %s", name, before, state)
        done.append(Switched(name, "switched", before))
    return done


def _as_dict(obj: object) -> Mapping[str, Any]:
    # lightkube's generic resources leave to_dict untyped.
    result: Mapping[str, Any] = obj.to_dict()  # type: ignore[attr-defined]
    return result
