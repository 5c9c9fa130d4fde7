"""What a ResourceClaim allocated to this driver on this node, and the config of each device.

Reads the claim's `status.allocation` as the apiserver returns it (a JSON object): the results
for driver `display.liken.sh`, each of which must be in this node's pool, and the opaque configs
for this driver that apply to each result's request, class configs before claim configs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from draplugin.driver.claimconfig import DisplayConfig, decode
from libdisplay.pod import DRIVER

_SOURCE_ORDER: Final = {"FromClass": 0, "FromClaim": 1}


class AllocationError(ValueError):
    """The claim's allocation cannot be prepared here; the message says why."""


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One allocation result for this driver, with the config laid over it."""

    request: str
    pool: str
    device: str
    config: DisplayConfig

    @property
    def request_name(self) -> str:
        """The request without a subrequest (`req/sub` -> `req`), as the kubelet wants it."""
        return self.request.split("/", 1)[0]


@dataclass(frozen=True, slots=True)
class _Config:
    source: str
    requests: tuple[str, ...]
    config: DisplayConfig

    def applies_to(self, request: str) -> bool:
        return not self.requests or request in self.requests or (
            request.split("/", 1)[0] in self.requests
        )


def allocated_devices(claim: Mapping[str, Any], *, pool: str) -> tuple[AllocatedDevice, ...]:
    """This driver's devices of the claim, each with its config. Raises AllocationError or
    ClaimConfigError (the first bad config, named by its source and index)."""
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise AllocationError("claim is not allocated (no status.allocation)")
    devices = allocation.get("devices") or {}
    results = [r for r in devices.get("results") or () if r.get("driver") == DRIVER]
    if not results:
        raise AllocationError(f"claim has no device of driver {DRIVER}")
    configs = _configs(devices.get("config") or ())
    out = []
    for result in results:
        if result.get("pool") != pool:
            raise AllocationError(
                f"device {result.get('device')!r} is in pool {result.get('pool')!r}, "
                f"not this node's pool {pool!r}"
            )
        request = str(result.get("request", ""))
        config = DisplayConfig()
        for entry in configs:
            if entry.applies_to(request):
                config = config.overlay(entry.config)
        out.append(
            AllocatedDevice(
                request=request, pool=pool, device=str(result.get("device")), config=config
            )
        )
    return tuple(out)


def _configs(entries: Sequence[Mapping[str, Any]]) -> list[_Config]:
    ordered = sorted(
        enumerate(entries), key=lambda ie: (_SOURCE_ORDER.get(ie[1].get("source", ""), 2), ie[0])
    )
    out = []
    for index, entry in ordered:
        opaque = entry.get("opaque") or {}
        if opaque.get("driver") != DRIVER:
            continue
        source = f"{'class' if entry.get('source') == 'FromClass' else 'claim'} config {index}"
        config = decode(opaque.get("parameters"), source=source)
        requests = tuple(entry.get("requests") or ())
        out.append(_Config(source=source, requests=requests, config=config))
    return out
