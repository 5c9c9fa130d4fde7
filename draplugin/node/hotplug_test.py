"""hotplug: injected uevents and sysfs changes on a simulated tree, up to the fake apiserver."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

import pytest

from draplugin.node import hotplug, slices
from draplugin.node.retry import Backoff
from fakekube.client import async_client
from fakekube.server import FakeKube
from libdisplay.hardware import drm
from libdisplay.sim import sysfs as sysfs_tree
from libdisplay.sim.edid import EdidParams, build_edid

NODE = "kiosk-1"
WAIT_SECONDS = 30.0
A = build_edid(EdidParams(serial_number=1, name="A"))
B = build_edid(EdidParams(serial_number=2, name="B"))


def _machine(root: Path) -> hotplug.Scan:
    sysfs_tree.write_tree(root, sysfs_tree.SimCard(connectors=(
        sysfs_tree.SimConnector(type="HDMI-A", edid=A),
        sysfs_tree.SimConnector(type="DP", status="disconnected"),
    )))
    return functools.partial(drm.enumerate_cards, sysfs_root=sysfs_tree.sysfs_root(root),
                             dev_root=sysfs_tree.dev_root(root))


class Recorder:
    def __init__(self) -> None:
        self.changes: list[hotplug.Changes] = []
        self.seen = asyncio.Event()

    async def __call__(self, cards: tuple[drm.Card, ...], changes: hotplug.Changes) -> None:
        self.changes.append(changes)
        self.seen.set()


async def _until(recorder: Recorder, count: int) -> None:
    while len(recorder.changes) < count:
        recorder.seen.clear()
        await asyncio.wait_for(recorder.seen.wait(), WAIT_SECONDS)


def test_burst_of_uevents_gives_one_rescan(tmp_path: Path) -> None:
    scan = _machine(tmp_path)

    async def main() -> tuple[int, int, list[hotplug.Changes]]:
        source, recorder = hotplug.QueueEvents(), Recorder()
        watcher = hotplug.Hotplug(source, scan, recorder, debounce=0.2, resync=600)
        await watcher.start()
        sysfs_tree.hotplug(tmp_path, "card0-DP-1", status="connected", edid=B)
        for _ in range(20):
            source.inject()
        task = asyncio.create_task(watcher.run())
        try:
            await _until(recorder, 1)
        finally:
            task.cancel()
        return watcher.events, watcher.rescans, recorder.changes

    events, rescans, changes = asyncio.run(main())
    assert (events, rescans) == (20, 1)
    assert changes == [hotplug.Changes(added=("card0-dp-1",))]


def test_new_monitor_on_same_connector_is_swapped(tmp_path: Path) -> None:
    scan = _machine(tmp_path)

    async def main() -> list[hotplug.Changes]:
        recorder = Recorder()
        watcher = hotplug.Hotplug(hotplug.QueueEvents(), scan, recorder)
        await watcher.start()
        sysfs_tree.hotplug(tmp_path, "card0-HDMI-A-1", status="connected", edid=B)
        await watcher.rescan()
        sysfs_tree.hotplug(tmp_path, "card0-HDMI-A-1", status="disconnected")
        await watcher.rescan()
        return recorder.changes

    assert asyncio.run(main()) == [hotplug.Changes(swapped=("card0-hdmi-a-1",)),
                                   hotplug.Changes(removed=("card0-hdmi-a-1",))]


def test_periodic_resync_catches_a_lost_uevent(tmp_path: Path) -> None:
    scan = _machine(tmp_path)

    async def main() -> list[hotplug.Changes]:
        recorder = Recorder()
        watcher = hotplug.Hotplug(hotplug.QueueEvents(), scan, recorder, resync=0.05)
        await watcher.start()
        task = asyncio.create_task(watcher.run())
        try:
            sysfs_tree.hotplug(tmp_path, "card0-HDMI-A-1", status="disconnected")
            await _until(recorder, 1)
        finally:
            task.cancel()
        return recorder.changes

    assert asyncio.run(main()) == [hotplug.Changes(removed=("card0-hdmi-a-1",))]


def test_uevent_reaches_the_resource_slice(tmp_path: Path) -> None:
    scan = _machine(tmp_path)
    fast = Backoff(first=0.01, cap=0.05, attempts=6)
    with FakeKube() as fake:
        fake.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})

        async def main() -> None:
            client = async_client(fake.url)
            publisher = slices.Publisher(client, node=NODE, backoff=fast)
            source = hotplug.QueueEvents()

            async def republish(cards: tuple[drm.Card, ...], _: hotplug.Changes) -> None:
                publisher.update(slices.build_devices(cards))
                await publisher.sync()

            watcher = hotplug.Hotplug(source, scan, republish)
            publisher.update(slices.build_devices(await watcher.start()))
            await publisher.sync()
            task = asyncio.create_task(watcher.run())
            try:
                sysfs_tree.hotplug(tmp_path, "card0-DP-1", status="connected", edid=B)
                source.inject()
                while publisher.publishes < 2:
                    await asyncio.sleep(0.01)
            finally:
                task.cancel()
                await client.close()

        asyncio.run(asyncio.wait_for(main(), WAIT_SECONDS))
        stored = fake.get("resource.k8s.io/v1", "ResourceSlice", slices.slice_name(NODE))
        assert stored is not None
        assert [d["name"] for d in stored["spec"]["devices"]] == ["card0-dp-1", "card0-hdmi-a-1"]


@pytest.mark.parametrize(
    ("old", "new", "changes"),
    [
        ({"a": "1"}, {"a": "1"}, hotplug.Changes()),
        ({}, {"a": "1"}, hotplug.Changes(added=("a",))),
        ({"a": "1"}, {}, hotplug.Changes(removed=("a",))),
        ({"a": "1"}, {"a": "2"}, hotplug.Changes(swapped=("a",))),
        ({"a": ""}, {"a": "2"}, hotplug.Changes(swapped=("a",))),
    ],
    ids=["same", "added", "removed", "swapped", "edid-appeared"],
)
def test_diff(old: dict[str, str], new: dict[str, str], changes: hotplug.Changes) -> None:
    assert hotplug.diff(old, new) == changes
