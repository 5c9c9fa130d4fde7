"""What a claim got, in its ResourceClaim's `status.devices` (KEP-4817).

After a claim's prepare applied its output, the driver writes one entry per device it prepared:
`driver`, `pool`, `device`, `data` (the output as the compositor reports it: name, mode,
transform, scale) and a `Ready` condition, so `kubectl get resourceclaim -o yaml` shows what the
claim got. At unprepare the driver takes its entries out again. The operator calls, from its
(synchronous) prepare and unprepare paths:

    writer = ClaimStatusWriter(client: lightkube.Client, pool=node_name)
    writer.report(claim: ClaimRef, devices: Sequence[DeviceStatus], *,
                  stored: Mapping | None = None) -> WriteResult
    writer.withdraw(claim: ClaimRef, *, stored: Mapping | None = None) -> WriteResult
    DeviceStatus.ready_with(AppliedOutput(device=, output=, mode=, transform=, scale=))
    DeviceStatus.ready_with(AppliedOutput.from_output_state(device, state))  # OutputState
    DeviceStatus.not_ready(device, reason, message)

`stored` is the claim as the caller already read it (prepare reads it for the allocation): the
write then costs one PATCH; without it, or after a conflict, the claim is read first. Nothing
changed, nothing is written.

The entries of other drivers (and other pools) are kept as they are. The write is a JSON merge
patch of `resourceclaims/status` that carries the claim's resourceVersion: a concurrent status
write (the scheduler's, another driver's) makes it read and merge again rather than drop that
writer's entries. On Kubernetes 1.36+ (DRAResourceClaimGranularStatusAuthorization) the API
also checks the caller may write this driver's entries from this node: the ClusterRole's
`resourceclaims/driver` rule (deploy/base/cluster/clusterroles.yaml).

Failures: ClaimStatusError (`field` names what was wrong: a device the claim was not allocated
on this pool, a value the API would refuse) and ClaimStatusWriteError (the API refused or kept
failing; the message names the claim). Neither leaves a partial write.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from lightkube import Client
from lightkube.resources.resource_v1 import ResourceClaim
from lightkube.types import PatchType

from draplugin import conditions
from draplugin.apierrors import from_lightkube
from draplugin.claims import ClaimRef
from libdisplay.compositor.weston import TRANSFORMS
from libdisplay.hardware.modes import Mode
from libdisplay.pod import DRIVER

log = logging.getLogger(__name__)

JsonObject = dict[str, Any]
WriteResult = Literal["updated", "unchanged", "missing"]
"""`missing`: no claim of that namespace, name and uid (deleted, or re-created): nothing to say."""

READY_CONDITION = "Ready"
DATA_API_VERSION = "display.liken.sh/v1alpha1"
DATA_KIND = "AppliedOutput"
SCALE_MAX = 8
DATA_MAX_BYTES = 10 * 1024  # AllocatedDeviceStatus.data's limit
_CONFLICT = 409
_NOT_FOUND = 404


class ClaimStatusError(ValueError):
    """A status the API would refuse, found before any call; `field` names the bad value."""

    def __init__(self, field: str, text: str) -> None:
        super().__init__(f"{field}: {text}")
        self.field = field


class ClaimStatusWriteError(Exception):
    """The API refused the write or kept failing; the message names the claim. `retryable`
    says whether a later attempt may pass (an outage) or not (403, 422)."""

    def __init__(self, message: str, *, code: int | None, retryable: bool) -> None:
        super().__init__(message)
        self.code = code
        self.retryable = retryable


class _ReportedOutput(Protocol):
    """What `libdisplay.compositor.layout.OutputState` carries (read by attribute)."""

    @property
    def name(self) -> str: ...
    @property
    def width(self) -> int: ...
    @property
    def height(self) -> int: ...
    @property
    def refresh_mhz(self) -> int: ...
    @property
    def transform(self) -> str: ...
    @property
    def scale(self) -> int: ...


@dataclass(frozen=True, slots=True)
class AppliedOutput:
    """A claim's output as the compositor reports it once prepare applied it. `device` is the
    DRA device (`card0-hdmi-a-1`), `output` the compositor's name for it, `mode` WxH[@Hz],
    `transform` in weston.ini's names (which the layout module speaks too), `scale` 1..8."""

    device: str
    output: str
    mode: str
    transform: str = "normal"
    scale: int = 1

    def __post_init__(self) -> None:
        for name in ("device", "output", "mode"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ClaimStatusError(name, f"must be a non-empty string, got {value!r}")
        if self.transform not in TRANSFORMS:
            raise ClaimStatusError("transform", f"must be one of {', '.join(TRANSFORMS)}, got "
                                                f"{self.transform!r}")
        if isinstance(self.scale, bool) or not isinstance(self.scale, int) or not (
                1 <= self.scale <= SCALE_MAX):
            raise ClaimStatusError("scale", f"must be an integer 1..{SCALE_MAX}, got "
                                            f"{self.scale!r}")

    @classmethod
    def from_output_state(cls, device: str, state: _ReportedOutput) -> AppliedOutput:
        """From the layout module's answer (`LayoutControl.configure` or `.outputs()`)."""
        mode = Mode(state.width, state.height, state.refresh_mhz)
        return cls(device=device, output=state.name, mode=str(mode), transform=state.transform,
                   scale=state.scale)

    def data(self) -> JsonObject:
        """The entry's `data`: self-describing, as opaque driver data should be."""
        return {"apiVersion": DATA_API_VERSION, "kind": DATA_KIND, "output": self.output,
                "mode": self.mode, "transform": self.transform, "scale": self.scale}

    def describe(self) -> str:
        return (f"{self.output} runs at {self.mode}, transform {self.transform}, "
                f"scale {self.scale}")


@dataclass(frozen=True, slots=True)
class DeviceStatus:
    """One device's entry: its Ready condition and, when ready, what it got."""

    device: str
    ready: bool
    reason: str
    message: str
    applied: AppliedOutput | None = None

    def __post_init__(self) -> None:
        try:
            conditions.check("True" if self.ready else "False", self.reason, self.message)
        except conditions.ConditionError as err:
            raise ClaimStatusError(err.field, str(err).partition(": ")[2]) from err

    @classmethod
    def ready_with(cls, applied: AppliedOutput) -> DeviceStatus:
        """The device is configured as the claim asked: what the compositor now reports."""
        return cls(applied.device, True, "OutputApplied", applied.describe(), applied)

    @classmethod
    def not_ready(cls, device: str, reason: str, message: str) -> DeviceStatus:
        return cls(device, False, reason, message)


def entry(status: DeviceStatus, *, pool: str, generation: int | None,
          previous: Mapping[str, Any] | None = None) -> JsonObject:
    """The `status.devices[]` entry for `status`; its Ready condition keeps the previous
    entry's lastTransitionTime while readiness is unchanged."""
    ready = conditions.condition(
        READY_CONDITION, "True" if status.ready else "False", status.reason, status.message,
        previous=(previous or {}).get("conditions") or (), generation=generation)
    built: JsonObject = {"driver": DRIVER, "pool": pool, "device": status.device,
                         "conditions": [ready]}
    if status.applied is not None:
        built["data"] = status.applied.data()
    return built


class ClaimStatusWriter:
    """Writes this driver's `status.devices` entries of one pool (this node's)."""

    def __init__(self, client: Client, *, pool: str, attempts: int = 5,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._client = client
        self._pool = pool
        self._attempts = attempts
        self._sleep = sleep

    def report(self, claim: ClaimRef, devices: Sequence[DeviceStatus], *,
               stored: Mapping[str, Any] | None = None) -> WriteResult:
        """Set the entries of `devices` (each allocated to this driver and pool in the claim),
        keeping every other entry as it is. ClaimStatusError before any write when a device is
        listed twice or not allocated here."""
        names = [d.device for d in devices]
        if len(set(names)) != len(names):
            raise ClaimStatusError("device", f"listed more than once: {sorted(names)}")

        def change(claim_obj: Mapping[str, Any], old: list[JsonObject]) -> list[JsonObject]:
            allocated = self._allocated(claim_obj)
            for name in names:
                if name not in allocated:
                    raise ClaimStatusError("device", f"{name} is not allocated to {DRIVER} in "
                                                     f"pool {self._pool} by claim "
                                                     f"{claim.namespace}/{claim.name}")
            generation = (claim_obj.get("metadata") or {}).get("generation")
            by_device = {d.device: d for d in devices}
            out = [e if not self._ours(e) or e.get("device") not in by_device
                   else entry(by_device[e["device"]], pool=self._pool, generation=generation,
                              previous=e)
                   for e in old]
            present = {e.get("device") for e in old if self._ours(e)}
            out += [entry(d, pool=self._pool, generation=generation)
                    for d in devices if d.device not in present]
            return out

        return self._write(claim, change, stored)

    def withdraw(self, claim: ClaimRef, *,
                 stored: Mapping[str, Any] | None = None) -> WriteResult:
        """Take out this driver's entries of this pool (after unprepare: nothing is applied)."""
        return self._write(claim, lambda _claim, old: [e for e in old if not self._ours(e)],
                           stored)

    # -- the write ----------------------------------------------------------------------------

    def _ours(self, e: Mapping[str, Any]) -> bool:
        return e.get("driver") == DRIVER and e.get("pool") == self._pool and not e.get("shareID")

    def _allocated(self, claim_obj: Mapping[str, Any]) -> set[str]:
        results = (((claim_obj.get("status") or {}).get("allocation") or {}).get("devices")
                   or {}).get("results") or ()
        return {r.get("device") for r in results
                if r.get("driver") == DRIVER and r.get("pool") == self._pool}

    def _write(self, claim: ClaimRef,
               change: Callable[[Mapping[str, Any], list[JsonObject]], list[JsonObject]],
               stored: Mapping[str, Any] | None) -> WriteResult:
        where = f"ResourceClaim {claim.namespace}/{claim.name}"
        for attempt in range(self._attempts):
            current = stored if stored is not None else self._get(claim, where)
            stored = None  # after a conflict, read afresh
            if current is None or (current.get("metadata") or {}).get("uid") != claim.uid:
                log.info("%s (uid %s) is gone: no device status to write", where, claim.uid)
                return "missing"
            old: list[JsonObject] = list((current.get("status") or {}).get("devices") or [])
            new = change(current, old)
            if new == old:
                return "unchanged"
            _check_size(new)
            version = (current.get("metadata") or {}).get("resourceVersion")
            body: JsonObject = {"metadata": {"resourceVersion": version},
                                "status": {"devices": new or None}}
            try:
                self._client.patch(ResourceClaim.Status, claim.name, body,
                                   namespace=claim.namespace, patch_type=PatchType.MERGE)
            except Exception as err:
                failure = from_lightkube(err, f"write the device status of {where}")
                if failure is None:
                    raise
                if failure.code == _NOT_FOUND:
                    return "missing"
                if not failure.retryable or attempt == self._attempts - 1:
                    raise ClaimStatusWriteError(str(failure), code=failure.code,
                                                retryable=failure.retryable) from err
                if failure.code != _CONFLICT:
                    self._sleep(min(2.0, max(0.05 * 2**attempt, failure.retry_after)))
                continue
            log.info("%s: device status %s", where, _summary(new, self._ours))
            return "updated"
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _get(self, claim: ClaimRef, where: str) -> Mapping[str, Any] | None:
        try:
            found = self._client.get(ResourceClaim, claim.name, namespace=claim.namespace)
        except Exception as err:
            failure = from_lightkube(err, f"read {where}")
            if failure is None:
                raise
            if failure.code == _NOT_FOUND:
                return None
            raise ClaimStatusWriteError(str(failure), code=failure.code,
                                        retryable=failure.retryable) from err
        result: JsonObject = found.to_dict()
        return result


def _check_size(entries: Iterable[Mapping[str, Any]]) -> None:
    for e in entries:
        if "data" in e and len(json.dumps(e["data"])) > DATA_MAX_BYTES:
            raise ClaimStatusError("data", f"over {DATA_MAX_BYTES} bytes for {e.get('device')}")


def _summary(entries: Iterable[Mapping[str, Any]],
             ours: Callable[[Mapping[str, Any]], bool]) -> str:
    shown = [f"{e['device']} {e['conditions'][0]['status']}" for e in entries if ours(e)]
    return ", ".join(shown) or "withdrawn"
