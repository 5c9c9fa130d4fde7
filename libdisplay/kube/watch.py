"""Follow API objects with one list and then a watch: an informer, as client-go's reflector.

`Informer.run()` lists once and keeps the objects in `cache` (by namespace and name), then
watches from the list's resourceVersion with bookmarks allowed, so that an idle watch's
resourceVersion stays recent and its resumption finds the history still there. A watch that
ends (the server's `timeoutSeconds`, a cut connection) is resumed from the last
resourceVersion seen; a 410 Gone (the history was compacted away) re-lists once, and the
differences from the cache are told as events. Every failed attempt waits a delay drawn
uniformly from a window that doubles up to `max_delay` ("full jitter"): a fleet of nodes whose
API server came back reconnects and re-lists spread over that window, not in the same second.

An idle informer costs the API server one open watch and a bookmark a minute; nothing is
polled. `on_change(type, obj)` hears ADDED, MODIFIED and DELETED (raw JSON objects), on the
informer's task. A writer calls `observe(obj)` with what a write answered, so its next check
against the cache does not wait for the watch to bring its own write back; a watch event or a
list answered before that write (an older resourceVersion) does not undo it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from libdisplay.kube.errors import ApiCallError, status_error
from libdisplay.kube.lightkube_errors import from_lightkube

if TYPE_CHECKING:
    from lightkube import AsyncClient

log = logging.getLogger(__name__)

JsonObject = dict[str, Any]
Key = tuple[str, str]
OnChange = Callable[[str, JsonObject], None]

EXPIRED = 410
# A watch that ends cleanly sooner than this without one event is treated as a failure, so a
# server that closes every watch at once is not hammered in a loop.
MIN_WATCH_S = 1.0


class WatchSource(Protocol):
    """What an informer follows: one collection, listed and watched with the same selectors."""

    what: str
    """Names the collection in logs and errors (`ResourceSlice x`, `Pod ns/name`)."""

    async def list(self) -> tuple[list[JsonObject], str]:
        """The objects and the list's resourceVersion; ApiCallError on failure."""
        ...

    def watch(self, resource_version: str, timeout_s: int) -> AsyncIterator[tuple[str, JsonObject]]:
        """The events after `resource_version` (BOOKMARK and ERROR included) until the stream
        ends; ApiCallError on failure."""
        ...


@dataclass(frozen=True, slots=True)
class Timing:
    """The informer's clock settings; defaults as client-go's reflector."""

    initial_delay: float = 0.8
    max_delay: float = 30.0
    watch_timeout: tuple[int, int] = (300, 600)
    """The range `timeoutSeconds` is drawn from for each watch request."""

    def window(self, failures: int) -> float:
        """The jitter window after `failures` failures in a row (≥ 1)."""
        return float(min(self.max_delay, self.initial_delay * 2.0 ** min(failures - 1, 30)))


DEFAULT_TIMING = Timing()


def object_key(obj: JsonObject) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def resource_version(obj: JsonObject) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def newer(candidate: str, than: str) -> bool:
    """Whether resourceVersion `candidate` is after `than` (opaque versions: assume it is)."""
    if candidate.isdigit() and than.isdigit():
        return int(candidate) > int(than)
    return candidate != than


def known_after(candidate: str, than: str) -> bool:
    """Whether `candidate` is certainly after `than` (opaque versions: not known to be)."""
    return candidate.isdigit() and than.isdigit() and int(candidate) > int(than)


class Informer:
    """A cache of one collection kept by list-then-watch; see the module docstring."""

    def __init__(self, source: WatchSource, *, on_change: OnChange | None = None,
                 timing: Timing = DEFAULT_TIMING, rng: random.Random | None = None,
                 on_retry: Callable[[str], None] | None = None) -> None:
        self.source = source
        self.cache: dict[Key, JsonObject] = {}
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.lists = 0
        self.watches = 0
        self._on_change = on_change or (lambda _type, _obj: None)
        self._on_retry = on_retry or (lambda _what: None)
        self._timing = timing
        self._rng = rng or random.Random()
        # The resourceVersion each key was last seen at, deleted keys included, so a write's
        # answer that arrives after the watch's later event does not undo it.
        self._seen: dict[Key, str] = {}

    def get(self, name: str, namespace: str = "") -> JsonObject | None:
        return self.cache.get((namespace, name))

    def observe(self, obj: JsonObject) -> None:
        """Take in an object a write answered, unless the cache holds a later state of it."""
        if self._behind(obj):
            return
        self._apply("MODIFIED" if object_key(obj) in self.cache else "ADDED", obj, notify=False)

    def _behind(self, obj: JsonObject) -> bool:
        """Whether the cache has seen `obj`'s key at this resourceVersion or a later one."""
        key = object_key(obj)
        return key in self._seen and not newer(resource_version(obj), self._seen[key])

    async def run(self) -> None:
        """List, then watch, resumed and re-listed as needed; until cancelled. Raises the
        ApiCallError of a failure no retry can mend (403, 404 of the kind, ...)."""
        relist, failures = True, 0
        while True:
            try:
                if relist:
                    await self._list()
                    relist = False
                if await self._watch():
                    failures = 0
                    continue
                raise ApiCallError(f"watch {self.source.what}", "the stream ended at once",
                                   reason="ShortWatch", retryable=True)
            except ApiCallError as err:
                if err.code == EXPIRED:
                    # The history after our version is gone: only a list shows what changed.
                    log.info("%s: %s; listing again", self.source.what, err)
                    relist = True
                    continue
                if not err.retryable:
                    raise
                failures += 1
                delay = self._rng.uniform(0.0, self._timing.window(failures))
                log.info("%s (watching again in %.1f s)", err, delay)
                self._on_retry("watch")
                await asyncio.sleep(delay)

    async def _list(self) -> None:
        items, rv = await self.source.list()
        self.lists += 1
        fresh = {object_key(o): o for o in items}
        # An object a write made after the list's snapshot (observed) is kept, not deleted.
        gone = [k for k in self.cache
                if k not in fresh and not known_after(self._seen.get(k, ""), rv)]
        for key in gone:
            self._apply("DELETED", {**self.cache[key], "metadata": {
                **self.cache[key].get("metadata", {}), "resourceVersion": rv}})
        for key, obj in fresh.items():
            if not self._behind(obj):
                self._apply("MODIFIED" if key in self.cache else "ADDED", obj)
        self.resource_version = rv
        self.synced.set()

    async def _watch(self) -> bool:
        """One watch request until its stream ends; False when it ended at once, empty."""
        low, high = self._timing.watch_timeout
        timeout = self._rng.randint(low, high)
        started, events = time.monotonic(), 0
        self.watches += 1
        async for kind, obj in self.source.watch(self.resource_version, timeout):
            events += 1
            if kind == "ERROR":
                code = int(obj.get("code") or 0)
                raise status_error(f"watch {self.source.what}", code, json.dumps(obj).encode())
            rv = resource_version(obj)
            # An event older than a write already observed would undo it in the cache.
            if kind != "BOOKMARK" and not self._behind(obj):
                self._apply(kind, obj)
            if rv:
                self.resource_version = rv
        return events > 0 or time.monotonic() - started >= MIN_WATCH_S

    def _apply(self, kind: str, obj: JsonObject, *, notify: bool = True) -> None:
        key = object_key(obj)
        self._seen[key] = resource_version(obj)
        if kind == "DELETED":
            self.cache.pop(key, None)
        else:
            self.cache[key] = obj
        if notify:
            self._on_change(kind, obj)


class LightkubeSource:
    """A collection of `res` through a lightkube AsyncClient (its auth, TLS and timeouts).

    Goes through lightkube's request layer: its public `watch()` cannot ask for bookmarks,
    and its `list()` decodes into models a cache has no use for.
    """

    def __init__(self, client: AsyncClient, res: type, *, namespace: str | None = None,
                 name: str | None = None, labels: str | None = None) -> None:
        # lightkube's request layer (see the class docstring), untyped there.
        self._generic: Any = client._client
        self._res = res
        self._namespace = namespace
        self._params = {"fieldSelector": f"metadata.name={name}" if name else None,
                        "labelSelector": labels}
        where = f"{namespace}/" if namespace else ""
        self.what = f"{res.__name__} {where}{name or labels or '*'}"

    async def list(self) -> tuple[list[JsonObject], str]:
        operation = f"list {self.what}"
        br = self._generic.prepare_request("list", res=self._res, namespace=self._namespace,
                                           params=dict(self._params))
        try:
            response = await self._generic.send(self._generic.build_adapter_request(br))
        except Exception as err:
            raise _transport(operation, err) from err
        if response.status_code >= 300:
            raise status_error(operation, response.status_code, response.content,
                               reason=response.reason_phrase, headers=dict(response.headers))
        try:
            body = response.json()
            return list(body.get("items") or []), str(body["metadata"]["resourceVersion"])
        except (ValueError, KeyError, TypeError) as err:
            raise ApiCallError(operation, f"not a list: {err}", code=response.status_code,
                               reason="NotJson", retryable=True) from err

    async def watch(self, resource_version: str,
                    timeout_s: int) -> AsyncIterator[tuple[str, JsonObject]]:
        import httpx2  # pants: no-infer-dep - lightkube's own HTTP library, installed with it

        operation = f"watch {self.what}"
        params = {**self._params, "resourceVersion": resource_version,
                  "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout_s)}
        br = self._generic.prepare_request("list", res=self._res, namespace=self._namespace,
                                           watch=True, params=params)
        # No answer for well past the server's own timeout: the connection is dead.
        br.timeout = httpx2.Timeout(10.0, read=timeout_s + 60.0)
        try:
            response = await self._generic.send(self._generic.build_adapter_request(br),
                                                stream=True)
        except Exception as err:
            raise _transport(operation, err) from err
        try:
            if response.status_code >= 300:
                body = await response.aread()
                raise status_error(operation, response.status_code, body,
                                   reason=response.reason_phrase, headers=dict(response.headers))
            try:
                async for line in response.aiter_lines():
                    if line.strip():
                        event = json.loads(line)
                        yield str(event["type"]), dict(event["object"])
            except (ValueError, KeyError, TypeError) as err:
                raise ApiCallError(operation, f"not a watch event: {err}", reason="NotJson",
                                   retryable=True) from err
            except ApiCallError:
                raise
            except Exception as err:
                raise _transport(operation, err) from err
        finally:
            await response.aclose()


def _transport(operation: str, err: BaseException) -> BaseException:
    """The ApiCallError for a failed request; anything else (a bug) as it is."""
    return from_lightkube(err, operation) or err
