"""kubewatch: list once, watch with bookmarks, resumed after a drop, re-listed once after a
compaction, reconnects spread over the jitter window, against the fake apiserver."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import ConfigMap

from fakekube.client import run_async
from fakekube.server import FakeKube
from libdisplay.kube.watch import Informer, LightkubeSource, Timing

JsonObject = dict[str, Any]
T = TypeVar("T")
WAIT_S = 30.0
FAST = Timing(initial_delay=0.05, max_delay=0.2)


def _config_map(name: str, value: str) -> JsonObject:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default"}, "data": {"v": value}}


def _run(fake: FakeKube, scenario: Callable[[AsyncClient], Awaitable[T]]) -> T:
    return run_async(fake.url, scenario, timeout=WAIT_S)


async def _until(check: Callable[[], bool], what: str,
                 detail: Callable[[], str] = lambda: "") -> None:
    deadline = time.monotonic() + WAIT_S / 2
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT_S / 2:g} s: {what} {detail()}")
        await asyncio.sleep(0.01)


class Recorded:
    """A source that notes when each list was made."""

    def __init__(self, inner: LightkubeSource) -> None:
        self.inner = inner
        self.what = inner.what
        self.listed: list[float] = []

    async def list(self) -> tuple[list[JsonObject], str]:
        self.listed.append(time.monotonic())
        return await self.inner.list()

    def watch(self, resource_version: str, timeout_s: int) -> AsyncIterator[tuple[str, JsonObject]]:
        return self.inner.watch(resource_version, timeout_s)


def _informer(client: AsyncClient, seen: list[tuple[str, str]], **kw: Any) -> Informer:
    source = LightkubeSource(client, ConfigMap, namespace="default", name="watched")
    return Informer(source, timing=FAST,
                    on_change=lambda t, o: seen.append((t, o.get("data", {}).get("v", ""))), **kw)


def _value(informer: Informer) -> str | None:
    found = informer.get("watched", "default")
    return None if found is None else str(found["data"]["v"])


@pytest.mark.parametrize("abrupt", [False, True])
def test_a_dropped_watch_is_resumed_without_losing_a_change(abrupt: bool) -> None:
    with FakeKube() as fake:
        fake.create(_config_map("watched", "1"))

        async def scenario(client: AsyncClient) -> None:
            seen: list[tuple[str, str]] = []
            informer = _informer(client, seen)
            task = asyncio.create_task(informer.run())
            try:
                await _until(lambda: _value(informer) == "1", "the first list")
                _patch(fake, "1b")
                await _until(lambda: _value(informer) == "1b", "a change by the watch")
                watches = informer.watches
                assert fake.drop_watches(abrupt=abrupt) == 1
                # Changed while no watch is open: the resumed watch replays it.
                _patch(fake, "2")
                await _until(lambda: _value(informer) == "2", "the change after the drop")
                assert informer.watches > watches
                assert informer.lists == 1, "a resumed watch needs no list"
                assert ("MODIFIED", "2") in seen
            finally:
                task.cancel()

        _run(fake, scenario)


def _patch(fake: FakeKube, value: str) -> None:
    fake.update("v1", "ConfigMap", "watched", lambda o: o.update(data={"v": value}),
                namespace="default")


def test_a_compacted_history_relists_once_and_tells_the_deletion() -> None:
    with FakeKube() as fake:
        fake.create(_config_map("watched", "1"))

        async def scenario(client: AsyncClient) -> None:
            seen: list[tuple[str, str]] = []
            informer = _informer(client, seen)
            task = asyncio.create_task(informer.run())
            try:
                await _until(lambda: _value(informer) == "1", "the first list")
                await _until(lambda: fake.open_watches == 1, "the watch is open")
                fake.set_outage("drop")
                fake.delete("v1", "ConfigMap", "watched", namespace="default")
                fake.compact()
                fake.set_outage(None)
                await _until(lambda: informer.get("watched", "default") is None,
                             "the deletion seen by the re-list")
                assert informer.lists == 2
                assert seen[-1][0] == "DELETED"
            finally:
                task.cancel()

        _run(fake, scenario)


def test_bookmarks_keep_an_idle_watch_resumable_after_a_compaction() -> None:
    with FakeKube(bookmark_interval=0.1) as fake:
        fake.create(_config_map("watched", "1"))

        async def scenario(client: AsyncClient) -> None:
            informer = _informer(client, [])
            task = asyncio.create_task(informer.run())
            try:
                await _until(lambda: _value(informer) == "1", "the first list")
                # Changes the watch does not select move the store's version on ...
                for i in range(3):
                    fake.create(_config_map(f"other-{i}", "x"))
                now = str(fake.store.resource_version)
                # ... and a bookmark brings the informer's version along.
                await _until(lambda: informer.resource_version == now, "a bookmark")
                fake.compact()
                fake.drop_watches()
                _patch(fake, "2")
                await _until(lambda: _value(informer) == "2", "the change after the drop")
                assert informer.lists == 1, "the bookmark's version was still in the history"
            finally:
                task.cancel()

        _run(fake, scenario)


def test_reconnects_after_an_outage_are_spread_over_the_jitter_window() -> None:
    count, timing = 20, Timing(initial_delay=0.25, max_delay=2.0)
    with FakeKube() as fake:
        fake.create(_config_map("watched", "1"))

        async def scenario(client: AsyncClient) -> list[float]:
            sources = [Recorded(LightkubeSource(client, ConfigMap, namespace="default",
                                                name="watched")) for _ in range(count)]
            informers = [Informer(s, timing=timing, rng=random.Random(i))
                         for i, s in enumerate(sources)]
            tasks = [asyncio.create_task(i.run()) for i in informers]
            try:
                await _until(lambda: fake.open_watches == count, "every watch open")
                fake.set_outage("drop")
                # History moves on and is compacted: each one's return is a re-list, which
                # the test can time.
                fake.create(_config_map("other", "x"))
                fake.compact()
                await asyncio.sleep(3 * timing.max_delay)
                back = time.monotonic()
                fake.set_outage(None)
                await _until(lambda: all(len(s.listed) >= 2 for s in sources),
                             "every informer re-listed",
                             detail=lambda: f"lists {[len(s.listed) for s in sources]}")
                return [s.listed[1] - back for s in sources]
            finally:
                for task in tasks:
                    task.cancel()

        after = sorted(_run(fake, scenario))
    # Each waits a delay drawn from the window (2 s once the failures have doubled it up); the
    # bound leaves a loaded 2-core machine time to run twenty lists, it only catches a hang.
    assert after[-1] <= 3 * timing.max_delay, after
    assert after[-1] - after[0] >= timing.max_delay / 2, f"re-lists not spread: {after}"
    busiest = max(sum(1 for t in after if s <= t < s + 0.25) for s in after)
    assert busiest <= count // 2, f"{busiest} of {count} re-lists within 0.25 s: {after}"


class Scripted:
    """A source whose list and watch answer when the test lets them: what was read before a
    write arrives after its answer."""

    what = "ConfigMap default/watched"

    def __init__(self, listed: list[JsonObject], events: list[tuple[str, JsonObject]]) -> None:
        self.listed, self.events = listed, events
        self.list_gate, self.watch_gate = asyncio.Event(), asyncio.Event()

    async def list(self) -> tuple[list[JsonObject], str]:
        await self.list_gate.wait()
        return self.listed, "10"

    async def watch(self, resource_version: str,
                    timeout_s: int) -> AsyncIterator[tuple[str, JsonObject]]:
        await self.watch_gate.wait()
        for event in self.events:
            yield event
        await asyncio.Event().wait()  # open until cancelled


def _at(value: str, rv: int) -> JsonObject:
    obj = _config_map("watched", value)
    obj["metadata"]["resourceVersion"] = str(rv)
    return obj


def test_a_list_or_event_older_than_an_observed_write_does_not_undo_it() -> None:
    async def scenario() -> tuple[list[str | None], list[tuple[str, str]]]:
        seen: list[tuple[str, str]] = []
        # Listed at 10 (before the write at 12), an event at 11, a bookmark, one at 13.
        source = Scripted([], [("MODIFIED", _at("older", 11)),
                               ("BOOKMARK", {"metadata": {"resourceVersion": "12"}}),
                               ("MODIFIED", _at("later", 13))])
        informer = Informer(source, timing=FAST,
                            on_change=lambda t, o: seen.append((t, o["data"]["v"])))
        task = asyncio.create_task(informer.run())
        try:
            informer.observe(_at("mine", 12))
            source.list_gate.set()
            await informer.synced.wait()
            values = [_value(informer)]
            source.watch_gate.set()
            await _until(lambda: informer.resource_version == "13", "the watch's events")
            return [*values, _value(informer)], seen
        finally:
            task.cancel()

    values, seen = asyncio.run(asyncio.wait_for(scenario(), WAIT_S))
    assert values == ["mine", "later"]
    assert seen == [("MODIFIED", "later")]
