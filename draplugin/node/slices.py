"""The node's ResourceSlice: one device per connected monitor, published and kept published.

`build_devices` turns `libdisplay.hardware.drm` cards into `resource.k8s.io/v1` devices (docs/dra.md
§3.1): names are DNS labels (`card0-hdmi-a-1`), attribute names C identifiers, at most 32
attributes per device, strings cleaned and cut to 64 characters so an odd EDID never gets the
slice rejected. `Publisher` owns the one slice of this node's pool (pool = node name, owned by
the Node): it writes it at start, again only when its content changes, recreates it when the
kubelet wipes it (docs/dra.md §1), and carries the compositor-unavailable taint on every device.
It follows its slice with a watch (`libdisplay.kube.watch`): each check compares against the
watch's cache, so an idle node sends the API server nothing but the open watch.

Pool generation: the pool is a single slice, so an update keeps the generation (the Go helper
does the same when one API call suffices); a re-create after a wipe takes the next generation,
so a consumer never sees an older generation win over a newer one.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, cast

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceSlice

from draplugin.monitors import read_monitor
from draplugin.node.retry import DEFAULT_BACKOFF, Backoff, RetryError, fatal, with_retries
from libdisplay.hardware.drm import Card, Connector
from libdisplay.kube.watch import DEFAULT_TIMING, Informer, LightkubeSource, Timing
from libdisplay.pod import DRIVER

log = logging.getLogger(__name__)

ADDRESS_ATTRIBUTE = "liken.sh/address"
TAINT_KEY = "display.liken.sh/compositor-unavailable"
TAINT_EFFECT = "NoSchedule"
MAX_STRING = 64
MAX_ATTRIBUTES = 32
# 128 devices per slice, but 64 once any device has a taint (docs/dra.md §3.1), and every device
# carries one while the compositor is down: the pool is one slice of at most 64 devices.
MAX_DEVICES = 64
_MAX_NAME = 253

JsonObject = dict[str, Any]
AttributeValue = dict[str, str | int | bool]
Sync = Literal["created", "updated", "unchanged"]

_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")


class SliceError(Exception):
    """Base of every error this module raises."""


class BadAttributeError(SliceError):
    """An attribute name the API would reject (not a C identifier of at most 32 characters)."""


class PublishError(SliceError):
    """The slice could not be written after the retries; the message names it and the cause."""


def clean_string(text: str) -> str:
    """Printable text without control characters, runs of blanks as one space, ≤ 64 chars."""
    kept = "".join(" " if unicodedata.category(ch)[0] in "CZ" else ch for ch in text)
    return " ".join(kept.split())[:MAX_STRING].rstrip()


def device_attributes(
    card: Card, connector: Connector, *, ddc: bool = False
) -> dict[str, AttributeValue]:
    """The attributes of the device on `connector`; EDID fields only when the EDID decodes."""
    attributes: dict[str, AttributeValue] = {
        "connector": {"string": connector.output_name},
        "connectorType": {"string": connector.type},
        "ddc": {"bool": ddc},
    }
    if card.pci_address:
        attributes[ADDRESS_ATTRIBUTE] = {"string": card.pci_address}
    monitor = read_monitor(connector)
    edid = monitor.edid
    if edid is not None:
        strings = {
            "manufacturer": edid.manufacturer,
            "model": edid.monitor_name or "",
            "serialString": edid.serial_string or "",
        }
        for name, text in strings.items():
            cleaned = clean_string(text)
            if cleaned:
                attributes[name] = {"string": cleaned}
        attributes["productCode"] = {"int": edid.product_code}
        attributes["serialNumber"] = {"int": edid.serial_number}
        if edid.image_size_cm:
            attributes["widthMM"] = {"int": edid.image_size_cm[0] * 10}
            attributes["heightMM"] = {"int": edid.image_size_cm[1] * 10}
    if monitor.preferred is not None:
        attributes["preferredWidth"] = {"int": monitor.preferred.width}
        attributes["preferredHeight"] = {"int": monitor.preferred.height}
        if monitor.preferred.refresh_mhz:
            attributes["preferredRefreshMHz"] = {"int": monitor.preferred.refresh_mhz}
    if monitor.offered:
        largest = max(monitor.offered, key=lambda m: (m.width * m.height, m.width))
        attributes["maxWidth"] = {"int": largest.width}
        attributes["maxHeight"] = {"int": largest.height}
    check_attributes(attributes)
    return attributes


def check_attributes(attributes: Mapping[str, AttributeValue]) -> None:
    """Raise BadAttributeError for a name or count the apiserver would refuse."""
    if len(attributes) > MAX_ATTRIBUTES:
        raise BadAttributeError(f"{len(attributes)} attributes: at most {MAX_ATTRIBUTES} allowed")
    for name in attributes:
        domain, _, ident = name.rpartition("/")
        if not _C_IDENTIFIER.match(ident) or len(domain) > 63:
            raise BadAttributeError(f"attribute name {name!r} is not a (qualified) C identifier")


def build_devices(
    cards: Iterable[Card], *, ddc: Mapping[str, bool] | None = None
) -> tuple[JsonObject, ...]:
    """One device per connected connector, by name; `ddc` maps device names to DDC/CI answers."""
    ddc = ddc or {}
    devices = [
        {"name": c.device_name, "attributes": device_attributes(card, c,
                                                                 ddc=ddc.get(c.device_name, False))}
        for card in cards
        for c in card.connectors
        if c.connected
    ]
    devices.sort(key=lambda d: str(d["name"]))
    if len(devices) > MAX_DEVICES:
        left_out = [str(d["name"]) for d in devices[MAX_DEVICES:]]
        log.error("%d connected monitors, a slice holds %d: not publishing %s",
                  len(devices), MAX_DEVICES, ", ".join(left_out))
    return tuple(devices[:MAX_DEVICES])


def slice_name(node: str) -> str:
    """`<node>-display.liken.sh`, hashed down when the node name is near the length limit."""
    name = f"{node}-{DRIVER}"
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(node.encode()).hexdigest()[:10]
    return f"{node[: _MAX_NAME - len(DRIVER) - len(digest) - 2].rstrip('.-')}-{digest}-{DRIVER}"


def with_taint(devices: Iterable[JsonObject], *, tainted: bool) -> list[JsonObject]:
    """The devices with the compositor-unavailable taint set on each, or cleared from each."""
    out = []
    for device in devices:
        copy = {k: v for k, v in device.items() if k != "taints"}
        if tainted:
            copy["taints"] = [{"key": TAINT_KEY, "effect": TAINT_EFFECT}]
        out.append(copy)
    return out


def build_slice(
    node: str, *, node_uid: str, devices: Iterable[JsonObject], generation: int
) -> JsonObject:
    """The whole ResourceSlice object for this node's pool."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": slice_name(node),
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid,
                 "controller": True}
            ],
        },
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": list(devices),
        },
    }


def _content(devices: Iterable[JsonObject], *, taints: bool) -> list[JsonObject]:
    """What decides whether a write is needed: devices without `timeAdded` (the apiserver's)."""
    out = []
    for device in devices:
        copy = {k: v for k, v in device.items() if k != "taints"}
        if taints and device.get("taints"):
            copy["taints"] = [
                {k: v for k, v in t.items() if k != "timeAdded"} for t in device["taints"]
            ]
        out.append(copy)
    return out


def _keep_time_added(wanted: list[JsonObject], stored: list[JsonObject]) -> None:
    """Carry `timeAdded` over from unchanged taints, so an update does not restart their clock."""
    times = {
        (d.get("name"), t.get("key"), t.get("effect")): t.get("timeAdded")
        for d in stored for t in d.get("taints") or []
    }  # fmt: skip
    for device in wanted:
        for taint in device.get("taints") or []:
            added = times.get((device["name"], taint["key"], taint["effect"]))
            if added:
                taint["timeAdded"] = added


class Publisher:
    """Keeps this node's ResourceSlice equal to the inventory and taint state it is given.

    `update(devices)` and `set_tainted(flag)` record what should be published and wake `run()`,
    which writes at start, after each change, and every `resync` seconds checks the slice is
    still there. `sync()` is one pass, for callers that want to await the write. The checks
    read the watch's cache, not the API; the API is read only before the watch's first list
    and once after a conflict (the cache was behind).
    """

    def __init__(
        self,
        client: AsyncClient,
        *,
        node: str,
        resync: float = 5.0,
        backoff: Backoff = DEFAULT_BACKOFF,
        on_publish: Callable[[], None] | None = None,
        on_error: Callable[[int], None] | None = None,
        on_retry: Callable[[str], None] | None = None,
        on_pass: Callable[[], None] | None = None,
        timing: Timing = DEFAULT_TIMING,
    ) -> None:
        self._client = client
        self._node = node
        self._resync = resync
        self._backoff = backoff
        self._devices: tuple[JsonObject, ...] = ()
        self._tainted = False
        self._node_uid: str | None = None
        self._generation = -1
        self._taints_dropped = False
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._on_publish = on_publish
        self._on_error = on_error
        # Hears the operation of every retried call, and every completed pass of the loop.
        self._on_retry = on_retry or (lambda _operation: None)
        self._on_pass = on_pass or (lambda: None)
        self.publishes = 0
        self.api_errors = 0
        # Every event of the slice wakes the loop: a wipe shows as DELETED, a foreign edit as
        # MODIFIED; the loop's pass compares and writes only on a difference.
        self.informer = Informer(
            LightkubeSource(client, ResourceSlice, name=slice_name(node)),
            on_change=lambda _kind, _obj: self._wake.set(),
            on_retry=lambda _what: self._on_retry("resourceslice-watch"), timing=timing)
        self._stale = False

    @property
    def name(self) -> str:
        return slice_name(self._node)

    @property
    def tainted(self) -> bool:
        return self._tainted

    def update(self, devices: Iterable[JsonObject]) -> None:
        self._devices = tuple(devices)
        self._wake.set()

    def set_tainted(self, tainted: bool) -> None:
        """Put the compositor-unavailable taint on every device, or take it off."""
        if tainted != self._tainted:
            log.info("compositor-unavailable taint %s", "on" if tainted else "off")
        self._tainted = tainted
        self._wake.set()

    async def run(self) -> None:
        """Publish now, then on every change, on every event of the slice (a wipe shows as
        DELETED) and every `resync` seconds a check against the watch's cache; until
        cancelled. A failure of the watch no retry mends (403) ends it."""
        watcher = asyncio.create_task(self.informer.run())
        try:
            await self._loop(watcher)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def _loop(self, watcher: asyncio.Task[None]) -> None:
        while True:
            if watcher.done():
                watcher.result()  # raises what ended the watch
            self._wake.clear()
            try:
                await self.sync()
            except SliceError as err:
                if fatal(err):
                    raise
                log.error("%s (tried again in %gs)", err, self._resync)
            self._on_pass()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._resync)

    async def sync(self) -> Sync:
        """Make the stored slice match; create it when missing. Retries 409/429 with backoff."""
        async with self._lock:
            try:
                return await with_retries(
                    self._sync_once, what=f"ResourceSlice {self.name}", backoff=self._backoff,
                    on_error=self._count_error,
                    on_retry=lambda: self._on_retry("resourceslice-sync"))
            except RetryError as err:
                raise PublishError(str(err)) from err

    def _count_error(self, code: int) -> None:
        if code == 409:  # the cache was behind the API: the retry reads the slice
            self._stale = True
        self.api_errors += 1
        if self._on_error is not None:
            self._on_error(code)

    async def _sync_once(self) -> Sync:
        wanted = with_taint(self._devices, tainted=self._tainted)
        stored = await self._stored()
        if stored is None:
            return await self._create(wanted)
        spec = stored.get("spec") or {}
        self._generation = max(self._generation, int(spec["pool"]["generation"]))
        stored_devices = list(spec.get("devices") or [])
        taints = not self._taints_dropped
        if _content(stored_devices, taints=taints) == _content(wanted, taints=taints):
            return "unchanged"
        _keep_time_added(wanted, stored_devices)
        obj = build_slice(self._node, node_uid=await self._uid(), devices=wanted,
                          generation=self._generation)
        obj["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
        written = await self._client.replace(_load(obj))
        self._after_write(wanted, written.to_dict())
        return "updated"

    async def _create(self, wanted: list[JsonObject]) -> Sync:
        self._generation += 1
        obj = build_slice(self._node, node_uid=await self._uid(), devices=wanted,
                          generation=self._generation)
        written = await self._client.create(_load(obj))
        log.info("created ResourceSlice %s (generation %d, %d devices)",
                 self.name, self._generation, len(wanted))
        self._after_write(wanted, written.to_dict())
        return "created"

    def _after_write(self, wanted: list[JsonObject], written: JsonObject) -> None:
        self.publishes += 1
        self.informer.observe(written)
        if self._on_publish is not None:
            self._on_publish()
        sent = any(d.get("taints") for d in wanted)
        kept = any(d.get("taints") for d in (written.get("spec") or {}).get("devices") or [])
        if sent and not kept and not self._taints_dropped:
            # A cluster without DRADeviceTaints drops them silently; comparing them would churn.
            log.warning("the apiserver dropped the device taints (DRADeviceTaints is off); "
                        "health is reported through the kubelet stream only")
            self._taints_dropped = True

    async def _stored(self) -> JsonObject | None:
        """The slice as the watch's cache holds it (in the model's shape, as a GET gives it);
        read from the API before the watch's first list and after a conflict."""
        if self.informer.synced.is_set() and not self._stale:
            cached = self.informer.get(self.name)
            return None if cached is None else _load(cached).to_dict()
        found = await self._get()
        self._stale = False
        if found is not None:
            self.informer.observe(found)
        return found

    async def _get(self) -> JsonObject | None:
        try:
            found = await self._client.get(ResourceSlice, name=self.name)
        except ApiError as err:
            if err.status.code == 404:
                return None
            raise
        result: JsonObject = found.to_dict()
        return result

    async def _uid(self) -> str:
        if self._node_uid is None:
            node = await self._client.get(Node, name=self._node)
            if node.metadata is None or not node.metadata.uid:
                raise PublishError(f"Node {self._node} has no uid")
            self._node_uid = node.metadata.uid
        return self._node_uid


def _load(obj: JsonObject) -> ResourceSlice:
    return cast(ResourceSlice, ResourceSlice.from_dict(obj))
