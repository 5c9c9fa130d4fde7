"""The node's Display objects (`displays.display.liken.sh`): created when missing, status current.

One Display per connector of the node's cards, named `libdisplay.display.display_name(node,
device)` and labelled with node and device. The operator owns `status` only, written through the
status subresource as a JSON merge patch that holds just what changed (no write when nothing
did) and the resourceVersion it was computed from (a concurrent status write makes it read
again, never lose the other's fields); it never writes `spec`, which is a person's (a claim's
mode shows as `currentMode`, what the compositor runs), and never deletes a Display:
an unplugged monitor leaves its Display with `connected: false` and no monitor fields.

Whether `spec` took effect is reconciled as Kubernetes objects do: `status.observedGeneration`
is the generation the operator last acted on, and the `SpecApplied` condition says how it
went. The operator reports each outcome, once it has acted on a generation:

    await displays.report_spec(name: str, generation: int, outcome: SpecOutcome) -> SpecResult
    SpecOutcome.applied(mode=, transform=, scale=)   True   Applied
    SpecOutcome.held_by_claim(claim: ClaimRef)        False  HeldByClaim
    SpecOutcome.mode_not_offered(mode, offered)       False  ModeNotOffered (offered in message)
    SpecOutcome.monitor_disconnected()                False  MonitorDisconnected
    SpecOutcome.invalid_spec(field, text)             False  InvalidSpec
    SpecOutcome.apply_failed(field, text)             False  ApplyFailed
    SpecOutcome.restart_pending(detail)               Unknown RestartPending
    SpecOutcome.compositor_unavailable(detail)        Unknown CompositorUnavailable
    SpecOutcome.power_not_applied(text)               False  PowerNotApplied
    SpecOutcome.power_partly_applied(text)            False  PowerPartlyApplied

Where the Display manages its output's power (`spec.power`, `draplugin.driver.power`) the
report also carries `status.power` (state, appliedBy, kms, ddc, source), and each outcome's
message ends with how the power was applied.

`reconcile` (the observed fields) keeps both as they are, so a Display's spec outcome only
changes when the operator reports one.

The node's Displays (label `display.liken.sh/node=NODE`) are followed by an informer
(`libdisplay.kube.watch`) while `Displays.watch()` runs: once it has listed, every read is from
its cache, so a hotplug, a claim or an idle resync reads nothing from the API; each write's
answer goes into the cache; a write refused because the cache was behind (409) or named a
Display that is gone (404) is made again from a read of that Display from the API.

The status schema in deploy/base/cluster/crd-displays.yaml is the contract this module fills.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, cast

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import GenericGlobalResource, create_global_resource
from lightkube.types import PatchType

from draplugin import conditions
from draplugin.claims import ClaimRef
from draplugin.conditions import ConditionStatus
from draplugin.monitors import read_monitor
from draplugin.node.retry import DEFAULT_BACKOFF, Backoff, RetryError, with_retries
from draplugin.node.slices import clean_string
from libdisplay import display
from libdisplay.compositor.wayland import Output
from libdisplay.compositor.weston import TRANSFORMS
from libdisplay.hardware.drm import Card, Connector
from libdisplay.kube.watch import DEFAULT_TIMING, Informer, LightkubeSource, Timing

log = logging.getLogger(__name__)

DisplayResource = create_global_resource(
    display.GROUP, display.VERSION, display.KIND, display.PLURAL
)
CONNECTED_CONDITION = "Connected"
SPEC_APPLIED_CONDITION = "SpecApplied"
Power = Literal["on", "standby", "off"]
JsonObject = dict[str, Any]
Result = Literal["created", "updated", "unchanged"]
SpecResult = Literal["updated", "unchanged", "stale", "missing"]
"""`report_spec`: written; already so (no write); `stale`: the Display's generation or
observedGeneration is past the one reported (a newer report or spec wins); `missing`: no such
Display (its re-creation starts at generation 1, and the operator reports that)."""

_PNP_ID = re.compile(r"^[A-Z]{3}$")
# A write refused with one of these was computed from a cache that was behind: the retry
# reads the Display from the API.
_CACHE_BEHIND = (404, 409)


class DisplaysError(Exception):
    """Base of every error this module raises."""


class DisplayWriteError(DisplaysError):
    """A Display could not be created or its status written; the message names the Display."""


class NotCachedError(DisplaysError, LookupError):
    """The informer's cache cannot tell about a Display: not listed yet, or behind for it."""


class SpecOutcomeError(DisplaysError, ValueError):
    """A SpecOutcome or report the API would refuse; `field` names the bad one."""

    def __init__(self, field: str, text: str) -> None:
        super().__init__(f"{field}: {text}")
        self.field = field


@dataclass(frozen=True, slots=True)
class DdcState:
    """What DDC/CI told about a monitor; `supported=False` alone when it does not answer."""

    supported: bool
    capabilities: str | None = None
    vcp_codes: tuple[int, ...] = ()
    inputs: tuple[str, ...] = ()
    brightness: int | None = None
    contrast: int | None = None
    input: str | None = None
    power: Power | None = None

    def to_status(self) -> JsonObject:
        out: JsonObject = {"supported": self.supported}
        optional: dict[str, object] = {
            "capabilities": self.capabilities[:8192] if self.capabilities else None,
            "vcpCodes": sorted(set(self.vcp_codes)) or None,
            "inputs": sorted(set(self.inputs)) or None,
            "brightness": self.brightness,
            "contrast": self.contrast,
            "input": self.input,
            "power": self.power,
        }
        out.update({k: v for k, v in optional.items() if v is not None})
        return out


@dataclass(frozen=True, slots=True)
class Observed:
    """Everything beyond sysfs that a status reports, keyed by device name (`card0-hdmi-a-1`)."""

    outputs: Mapping[str, Output] = field(default_factory=dict)
    ddc: Mapping[str, DdcState] = field(default_factory=dict)
    claims: Mapping[str, ClaimRef] = field(default_factory=dict)


NOTHING_OBSERVED = Observed()


@dataclass(frozen=True, slots=True)
class SpecOutcome:
    """What came of a Display's `spec`: its SpecApplied condition's status, reason, message.
    Build it with the class methods; the constructor checks what the API would refuse."""

    status: ConditionStatus
    reason: str
    message: str

    def __post_init__(self) -> None:
        try:
            conditions.check(self.status, self.reason, self.message)
        except conditions.ConditionError as err:
            raise SpecOutcomeError(err.field, str(err).partition(": ")[2]) from err

    @classmethod
    def applied(cls, *, mode: str, transform: str, scale: int, power: str = "") -> SpecOutcome:
        """The compositor runs the output as spec asks (what it reports, not what was asked);
        `power` says how its power was applied, when the Display manages it."""
        return cls("True", "Applied",
                   f"the output runs at {mode}, transform {transform}, scale {scale}"
                   + (f"; {power}" if power else ""))

    @classmethod
    def power_not_applied(cls, text: str) -> SpecOutcome:
        """Neither KMS nor DDC/CI could apply the power; `text` says why for each."""
        return cls("False", "PowerNotApplied", text)

    @classmethod
    def power_partly_applied(cls, text: str) -> SpecOutcome:
        """One step applied the power and the other failed: `text` says which did what."""
        return cls("False", "PowerPartlyApplied", text)

    @classmethod
    def held_by_claim(cls, claim: ClaimRef, *, power: str = "") -> SpecOutcome:
        """A claim sets the output's mode, transform and scale; `power`, which the Display
        sets whoever holds the output, says how it was applied."""
        if power:
            return cls("False", "HeldByClaim",
                       f"claim {claim.namespace}/{claim.name} holds the output and sets its "
                       f"mode; spec.mode, transform and scale apply when the claim is released; "
                       f"{power}")
        return cls("False", "HeldByClaim",
                   f"claim {claim.namespace}/{claim.name} holds the output and sets it; spec "
                   "applies when the claim is released")

    @classmethod
    def mode_not_offered(cls, mode: str, offered: Iterable[str]) -> SpecOutcome:
        listed = ", ".join(offered) or "none"
        return cls("False", "ModeNotOffered",
                   f"the monitor does not offer mode {mode}; offered: {listed}")

    @classmethod
    def monitor_disconnected(cls) -> SpecOutcome:
        return cls("False", "MonitorDisconnected",
                   "no monitor is connected; spec applies when one is")

    @classmethod
    def invalid_spec(cls, field_name: str, text: str) -> SpecOutcome:
        return cls("False", "InvalidSpec", f"spec.{field_name}: {text}")

    @classmethod
    def apply_failed(cls, field_name: str, text: str) -> SpecOutcome:
        """The compositor refused or failed the change; the output was put back as it was."""
        return cls("False", "ApplyFailed",
                   f"the compositor could not apply {field_name}: {text}; the output runs as "
                   "before")

    @classmethod
    def restart_pending(cls, detail: str) -> SpecOutcome:
        """The change needs the compositor's restart, which has not happened yet."""
        return cls("Unknown", "RestartPending", f"applies when the compositor restarts: {detail}")

    @classmethod
    def compositor_unavailable(cls, detail: str) -> SpecOutcome:
        return cls("Unknown", "CompositorUnavailable",
                   f"the compositor does not answer ({detail}); spec applies when it does")


def observed_status(
    node: str, card: Card, connector: Connector, *, observed: Observed = NOTHING_OBSERVED
) -> JsonObject:
    """The status fields this connector's Display should hold now (conditions aside)."""
    device = connector.device_name
    status: JsonObject = {
        "nodeName": node,
        "card": card.name,
        "connector": connector.output_name,
        "connected": connector.connected,
    }
    if not connector.connected:
        return status
    monitor = read_monitor(connector)
    if monitor.edid is not None:
        status["edid"] = _edid_status(monitor.edid.manufacturer, monitor.edid.monitor_name,
                                      monitor.edid.product_code, monitor.edid.serial_number,
                                      monitor.edid.serial_string)
    if monitor.offered:
        status["modes"] = [str(m) for m in monitor.offered]
    if monitor.preferred is not None:
        status["preferredMode"] = str(monitor.preferred)
    output = observed.outputs.get(device)
    if output is not None:
        status["currentMode"] = str(output.mode)
        status["currentTransform"] = TRANSFORMS[int(output.transform)]
        if 1 <= output.scale <= 4:
            status["currentScale"] = output.scale
    ddc = observed.ddc.get(device)
    if ddc is not None:
        status["ddc"] = ddc.to_status()
    claim = observed.claims.get(device)
    if claim is not None:
        status["claim"] = {"namespace": claim.namespace, "name": claim.name, "uid": claim.uid}
    return status


def _edid_status(manufacturer: str, model: str | None, product_code: int, serial_number: int,
                 serial_string: str | None) -> JsonObject:
    edid: JsonObject = {"productCode": product_code, "serialNumber": serial_number}
    if _PNP_ID.match(manufacturer):
        edid["manufacturer"] = manufacturer
    for key, text in (("model", model), ("serialString", serial_string)):
        cleaned = clean_string(text or "")
        if cleaned:
            edid[key] = cleaned
    return edid


def connected_condition(
    connected: bool, *, previous: Iterable[Mapping[str, Any]] = (), generation: int | None = None,
    now: datetime | None = None,
) -> JsonObject:
    """The `Connected` condition."""
    if connected:
        return conditions.condition(CONNECTED_CONDITION, "True", "MonitorConnected",
                                    "a monitor is connected", previous=previous,
                                    generation=generation, now=now)
    return conditions.condition(CONNECTED_CONDITION, "False", "MonitorDisconnected",
                                "no monitor is connected", previous=previous,
                                generation=generation, now=now)


def spec_applied_condition(
    outcome: SpecOutcome, *, previous: Iterable[Mapping[str, Any]] = (), generation: int,
    now: datetime | None = None,
) -> JsonObject:
    """The `SpecApplied` condition for `outcome`, observed at `generation`."""
    return conditions.condition(SPEC_APPLIED_CONDITION, outcome.status, outcome.reason,
                                outcome.message, previous=previous, generation=generation,
                                now=now)


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> JsonObject:
    """The JSON merge patch (RFC 7386) turning `old` into `new`; {} when they are equal."""
    patch: JsonObject = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            inner = merge_patch(before, value)
            if inner:
                patch[key] = inner
        elif before != value or key not in old:
            patch[key] = value
    return patch


class Displays:
    """Creates this node's missing Displays and writes their status when it changed; reads
    them from the informer's cache once `watch()` has listed them."""

    def __init__(self, client: AsyncClient, *, node: str, backoff: Backoff = DEFAULT_BACKOFF,
                 on_error: Callable[[int], None] | None = None,
                 on_retry: Callable[[str], None] | None = None,
                 timing: Timing = DEFAULT_TIMING) -> None:
        self._client = client
        self._node = node
        self._backoff = backoff
        self._on_error = on_error
        self._on_retry = on_retry or (lambda _operation: None)
        self._on_stale: Callable[[str], None] = lambda _name: None
        # Displays whose next read goes to the API: a write showed the cache behind for them.
        self._stale: set[str] = set()
        self.api_errors = 0
        # Cleared while writes are held (`hold_writes`).
        self._writes_open = asyncio.Event()
        self._writes_open.set()
        node_label = display.labels(node, "")[display.NODE_LABEL]
        self.informer = Informer(
            LightkubeSource(client, DisplayResource, labels=f"{display.NODE_LABEL}={node_label}"),
            on_change=self._changed,
            on_retry=lambda _what: self._on_retry("display-watch"), timing=timing)

    async def reconcile(
        self, cards: Iterable[Card], *, observed: Observed = NOTHING_OBSERVED
    ) -> dict[str, Result]:
        """Every connector of `cards`: Display created if missing, status brought up to date.
        Returns what happened per Display name. One Display failing does not stop the rest;
        the first failure is raised at the end as DisplayWriteError."""
        results: dict[str, Result] = {}
        failures: list[DisplayWriteError] = []
        for card in cards:
            for connector in card.connectors:
                name = display.display_name(self._node, connector.device_name)
                try:
                    results[name] = await self.reconcile_one(card, connector,
                                                             observed=observed)
                except DisplayWriteError as err:
                    log.error("%s", err)
                    failures.append(err)
        if failures:
            raise failures[0]
        return results

    async def reconcile_one(
        self, card: Card, connector: Connector, *, observed: Observed = NOTHING_OBSERVED
    ) -> Result:
        name = display.display_name(self._node, connector.device_name)
        try:
            return await with_retries(
                lambda: self._reconcile(name, card, connector, observed),
                what=f"Display {name}", backoff=self._backoff,
                on_error=lambda code: self._count_error(name, code),
                on_retry=lambda: self._on_retry("display-reconcile"),
                # A Display deleted between our read and write is re-created by a fresh pass.
                also_retry=(404,),
            )
        except RetryError as err:
            raise DisplayWriteError(str(err)) from err

    async def watch(self, on_stale: Callable[[str], None]) -> None:
        """Follow this node's Displays (list, then watch; `libdisplay.kube.watch`) and call
        `on_stale(name)` when one needs the operator: deleted (it is re-created), its `spec`
        edited (a generation its status has not observed), or come into this node's selection,
        spec unobserved, by the operator's own create or label write. Other events of its own
        writes do not count. Until cancelled; raises the ApiCallError of a failure no
        retry mends (403)."""
        self._on_stale = on_stale
        try:
            await self.informer.run()
        finally:
            self._on_stale = lambda _name: None

    def _changed(self, kind: str, obj: JsonObject) -> None:
        if kind == "DELETED" or _spec_unobserved(obj):
            self._on_stale(str((obj.get("metadata") or {}).get("name")))

    def _count_error(self, name: str, code: int) -> None:
        if code in _CACHE_BEHIND:
            self._stale.add(name)
        self.api_errors += 1
        if self._on_error is not None:
            self._on_error(code)

    async def _reconcile(self, name: str, card: Card, connector: Connector,
                         observed: Observed) -> Result:
        read = await self._read(name)
        created = read is None
        if read is None:
            stored = await self._create(name, connector.device_name)
        else:
            stored = await self._label(name, read, connector.device_name)
        if stored is not read and _spec_unobserved(stored):
            # It entered the watch's selection through this write, whose event the cache
            # takes as already seen (no wake-up); a derivation that read its spec from the API
            # before found no Display to report to, so the operator acts on it now.
            self._on_stale(name)
        old_status: JsonObject = dict(stored.get("status") or {})
        new_status = observed_status(self._node, card, connector, observed=observed)
        generation = (stored.get("metadata") or {}).get("generation")
        new_status["conditions"] = conditions.replace(
            old_status.get("conditions") or [],
            connected_condition(connector.connected,
                                previous=old_status.get("conditions") or [],
                                generation=generation))
        # Only a spec report says the spec was acted on, and how its power was applied.
        for reported in ("observedGeneration", "power"):
            if reported in old_status:
                new_status[reported] = old_status[reported]
        patch = merge_patch(old_status, new_status)
        if patch:
            await self._write_status(name, stored, patch)
            log.info("Display %s: status %s", name, ", ".join(sorted(patch)))
        if created:
            return "created"
        return "updated" if patch else "unchanged"

    async def report_spec(self, name: str, generation: int, outcome: SpecOutcome, *,
                          power: JsonObject | None = None) -> SpecResult:
        """Record that the operator acted on generation `generation` of Display `name`'s spec,
        with `outcome`: `status.observedGeneration` and the SpecApplied condition (and
        `status.power`, how the output's power was applied, when given), written only when
        they change. A report older than what the Display shows is dropped
        (`stale`). SpecOutcomeError for a generation below 1; DisplayWriteError when the API
        keeps refusing (the message names the Display)."""
        if isinstance(generation, bool) or not isinstance(generation, int) or generation < 1:
            raise SpecOutcomeError("generation", f"must be an integer from 1, got {generation!r}")
        try:
            return await with_retries(
                lambda: self._report_spec(name, generation, outcome, power),
                what=f"Display {name}", backoff=self._backoff,
                on_error=lambda code: self._count_error(name, code),
                on_retry=lambda: self._on_retry("display-spec"),
                also_retry=(404,),  # deleted between read and write: the next read says so
            )
        except RetryError as err:
            raise DisplayWriteError(str(err)) from err

    async def _report_spec(self, name: str, generation: int, outcome: SpecOutcome,
                           power: JsonObject | None = None) -> SpecResult:
        stored = await self._read(name)
        if stored is None:
            log.info("Display %s is gone: its spec outcome is not recorded", name)
            return "missing"
        old_status: JsonObject = dict(stored.get("status") or {})
        current = (stored.get("metadata") or {}).get("generation")
        observed = old_status.get("observedGeneration")
        if (isinstance(current, int) and generation > current) or (
                isinstance(observed, int) and generation < observed):
            log.info("Display %s: outcome of generation %d dropped (generation %s, observed %s)",
                     name, generation, current, observed)
            return "stale"
        previous = old_status.get("conditions") or []
        wanted = {
            "observedGeneration": generation,
            "conditions": conditions.replace(
                previous, spec_applied_condition(outcome, previous=previous,
                                                 generation=generation)),
        }
        if power is not None:
            wanted["power"] = power
        patch = merge_patch({k: old_status[k] for k in wanted if k in old_status}, wanted)
        if not patch:
            return "unchanged"
        await self._write_status(name, stored, patch)
        log.info("Display %s: spec generation %d %s (%s): %s", name, generation,
                 "applied" if outcome.status == "True" else "not applied", outcome.reason,
                 outcome.message)
        return "updated"

    async def _write_status(self, name: str, stored: JsonObject, patch: JsonObject) -> None:
        """Merge-patch `status` as computed from `stored`: refused (409, retried from a fresh
        read) when the Display changed since, so no other writer's fields are lost."""
        await self._writes_open.wait()
        version = (stored.get("metadata") or {}).get("resourceVersion")
        body: JsonObject = {"status": patch}
        if version:
            body["metadata"] = {"resourceVersion": version}
        written = await self._client.patch(DisplayResource.Status, name, body,
                                           patch_type=PatchType.MERGE)
        self.informer.observe(_as_dict(written))

    def hold_writes(self, held: bool) -> None:
        """Make every write (create, label, status) wait while `held`, on the event loop's
        thread; reads and the watch go on."""
        if held:
            self._writes_open.clear()
        else:
            self._writes_open.set()

    def cached(self, name: str) -> JsonObject | None:
        """Display `name` from the informer's cache (a copy), for readers on any thread (the
        driver's prepares); NotCachedError before the first list, or when a write showed the
        cache behind for it. The cache's objects are replaced, never changed in place, so a
        copy taken off the loop's thread is whole."""
        if not self.informer.synced.is_set() or name in self._stale:
            raise NotCachedError(f"Display {name}: the watch's cache cannot tell yet")
        found = self.informer.get(name)
        return None if found is None else copy.deepcopy(found)

    async def _read(self, name: str) -> JsonObject | None:
        """Display `name` from the informer's cache once it has listed (a copy: callers build
        on it); from the API before that, and once after a write showed the cache behind."""
        if self.informer.synced.is_set() and name not in self._stale:
            cached = self.informer.get(name)
            return None if cached is None else copy.deepcopy(cached)
        found = await self._get(name)
        self._stale.discard(name)
        if found is not None:
            self.informer.observe(found)
        return found

    async def _get(self, name: str) -> JsonObject | None:
        try:
            found = await self._client.get(DisplayResource, name=name)
        except ApiError as err:
            if err.status.code == 404:
                return None
            raise
        return _as_dict(found)

    async def _create(self, name: str, device: str) -> JsonObject:
        await self._writes_open.wait()
        obj = DisplayResource.from_dict({
            "apiVersion": display.API_VERSION,
            "kind": display.KIND,
            "metadata": {"name": name, "labels": self._labels(device)},
            "spec": {},
        })
        created = _as_dict(await self._client.create(cast(GenericGlobalResource, obj)))
        self.informer.observe(created)
        log.info("created Display %s", name)
        return created

    async def _label(self, name: str, stored: JsonObject, device: str) -> JsonObject:
        """A Display a person created by hand gets the labels, so selectors find it; the
        Display as it is now."""
        labels = (stored.get("metadata") or {}).get("labels") or {}
        missing = {k: v for k, v in self._labels(device).items() if labels.get(k) != v}
        if not missing:
            return stored
        await self._writes_open.wait()
        patched = _as_dict(await self._client.patch(DisplayResource, name,
                                                    {"metadata": {"labels": missing}},
                                                    patch_type=PatchType.MERGE))
        self.informer.observe(patched)
        return patched

    def _labels(self, device: str) -> dict[str, str]:
        return display.labels(self._node, device)


def _spec_unobserved(obj: Mapping[str, Any]) -> bool:
    generation = (obj.get("metadata") or {}).get("generation")
    observed = (obj.get("status") or {}).get("observedGeneration")
    return generation is not None and generation != observed


def _as_dict(obj: object) -> JsonObject:
    # lightkube's generic resources leave to_dict untyped.
    result: JsonObject = cast(GenericGlobalResource, obj).to_dict()  # type: ignore[no-untyped-call]
    return result
