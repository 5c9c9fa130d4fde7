"""The object store: one global resourceVersion counter, the objects of every kind, the event
history watches replay from, compaction, and the fan-out of events to open watches.

Objects are plain JSON dicts. A stored dict is never mutated after it is stored (writers store
a new dict), so readers may serialise it without copying. The REST layer holds `lock` across a
whole read-modify-write, as etcd's transaction would guarantee.
"""

from __future__ import annotations

import collections
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from fakekube import status
from fakekube.jsoncopy import copy_json

JsonObject = dict[str, Any]
KindKey = tuple[str, str]  # (group, plural)
ObjKey = tuple[str, str]  # (namespace or "", name)
EventType = Literal["ADDED", "MODIFIED", "DELETED"]


@dataclass(frozen=True, slots=True)
class Event:
    """One change as etcd records it: the object after the change (its last state for DELETED,
    carrying the deletion's resourceVersion) and the object before it."""

    rv: int
    type: EventType
    kind: KindKey
    obj: JsonObject
    prev: JsonObject | None


@dataclass(frozen=True, slots=True)
class Closed:
    """Queued to a watch to end its stream; `abrupt` drops the connection mid-stream."""

    abrupt: bool


WatchItem = tuple[EventType, JsonObject] | Closed


class Watcher:
    """One open watch: filters events by kind, namespace and selectors, turning an object that
    moves into or out of the selection into ADDED or DELETED as the apiserver does."""

    def __init__(self, kind: KindKey, namespace: str | None,
                 matches: Callable[[JsonObject], bool]) -> None:
        self.kind = kind
        self.namespace = namespace
        self._matches = matches
        self.queue: queue.SimpleQueue[WatchItem] = queue.SimpleQueue()

    def _selected(self, obj: JsonObject | None) -> bool:
        if obj is None:
            return False
        ns = obj.get("metadata", {}).get("namespace", "")
        return (self.namespace is None or ns == self.namespace) and self._matches(obj)

    def offer(self, event: Event) -> None:
        if event.kind != self.kind:
            return
        now, before = self._selected(event.obj), self._selected(event.prev)
        if event.type == "DELETED":
            if now:
                self.queue.put(("DELETED", event.obj))
        elif now and before:
            self.queue.put(("MODIFIED", event.obj))
        elif now:
            self.queue.put(("ADDED", event.obj))
        elif before:
            self.queue.put(("DELETED", event.obj))

    def close(self, *, abrupt: bool) -> None:
        self.queue.put(Closed(abrupt))


def object_key(obj: JsonObject) -> ObjKey:
    meta = obj.get("metadata", {})
    return (meta.get("namespace", ""), meta["name"])


class Store:
    def __init__(self, *, history_limit: int = 100_000) -> None:
        self.lock = threading.RLock()
        self._rv = 0
        self._compacted = 0
        self._history_limit = history_limit
        self._history: collections.deque[Event] = collections.deque()
        self._objects: dict[KindKey, dict[ObjKey, JsonObject]] = collections.defaultdict(dict)
        self._watchers: set[Watcher] = set()
        self.log: list[Event] = []

    @property
    def resource_version(self) -> int:
        with self.lock:
            return self._rv

    def get(self, kind: KindKey, namespace: str, name: str) -> JsonObject | None:
        with self.lock:
            return self._objects[kind].get((namespace, name))

    def items(self, kind: KindKey, namespace: str | None = None) -> list[JsonObject]:
        """The objects of a kind in etcd key order (namespace, then name)."""
        with self.lock:
            found = self._objects[kind]
            return [found[k] for k in sorted(found) if namespace is None or k[0] == namespace]

    def put(self, kind: KindKey, obj: JsonObject) -> JsonObject:
        """Store `obj` (ADDED or MODIFIED) under a new resourceVersion; returns the stored dict."""
        with self.lock:
            key = object_key(obj)
            prev = self._objects[kind].get(key)
            stored = self._stamp(obj)
            self._objects[kind][key] = stored
            self._record(Event(self._rv, "MODIFIED" if prev else "ADDED", kind, stored, prev))
            return stored

    def remove(self, kind: KindKey, last: JsonObject) -> JsonObject:
        """Delete the object `last` names; the DELETED event carries `last` (its final state) at
        a new resourceVersion."""
        with self.lock:
            prev = self._objects[kind].pop(object_key(last))
            stamped = self._stamp(last)
            self._record(Event(self._rv, "DELETED", kind, stamped, prev))
            return stamped

    def _stamp(self, obj: JsonObject) -> JsonObject:
        self._rv += 1
        stored = copy_json(obj)
        stored.setdefault("metadata", {})["resourceVersion"] = str(self._rv)
        return stored

    def _record(self, event: Event) -> None:
        self._history.append(event)
        self.log.append(event)
        while len(self._history) > self._history_limit:
            self._compacted = self._history.popleft().rv
        for watcher in list(self._watchers):
            watcher.offer(event)

    def compact(self) -> int:
        """Forget all history: a watch from any older resourceVersion now gets 410 Expired."""
        with self.lock:
            self._history.clear()
            self._compacted = self._rv
            return self._rv

    def watch(self, watcher: Watcher, since: int | None) -> None:
        """Register `watcher` and queue what it must see first: synthetic ADDED for every
        selected object when `since` is None, else the history after `since` (410 when that
        history is compacted away)."""
        with self.lock:
            if since is None:
                for obj in self.items(watcher.kind):
                    watcher.offer(Event(self._rv, "ADDED", watcher.kind, obj, None))
            elif since < self._compacted:
                raise status.expired(f"too old resource version: {since} ({self._compacted})")
            else:
                for event in self._history:
                    if event.rv > since:
                        watcher.offer(event)
            self._watchers.add(watcher)

    def watch_count(self) -> int:
        with self.lock:
            return len(self._watchers)

    def unwatch(self, watcher: Watcher) -> None:
        with self.lock:
            self._watchers.discard(watcher)

    def close_watches(self, *, abrupt: bool) -> int:
        with self.lock:
            watchers = list(self._watchers)
            self._watchers.clear()
        for watcher in watchers:
            watcher.close(abrupt=abrupt)
        return len(watchers)
