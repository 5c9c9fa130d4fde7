"""displays: Display objects on the fake apiserver with the real CRD from deploy/base."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from lightkube import AsyncClient
from lightkube.types import PatchType

from draplugin.node import displays
from draplugin.node.retry import Backoff
from fakekube.client import run_async
from fakekube.server import FakeKube
from libdisplay import display, drm, sysfs_tree
from libdisplay.edid_build import EdidParams, build_edid
from libdisplay.modes import parse_mode
from tests.support.crds import display_crd

NODE = "kiosk-1"
HDMI = display.display_name(NODE, "card0-hdmi-a-1")
DP = display.display_name(NODE, "card0-dp-1")
WAIT_SECONDS = 30.0
FAST = Backoff(first=0.01, cap=0.05, attempts=6)
T = TypeVar("T")


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with FakeKube() as server:
        server.register_crd(display_crd())
        yield server


def _run(fake: FakeKube, scenario: Callable[[AsyncClient], Awaitable[T]]) -> T:
    return run_async(fake.url, scenario, timeout=WAIT_SECONDS)


def _cards(root: Path) -> tuple[drm.Card, ...]:
    return drm.enumerate_cards(sysfs_root=sysfs_tree.sysfs_root(root),
                               dev_root=sysfs_tree.dev_root(root))


def _machine(root: Path) -> tuple[drm.Card, ...]:
    edid = build_edid(EdidParams(manufacturer="DEL", product_code=0x411A, serial_number=9,
                                 serial_string="SN1", name="U2720Q",
                                 preferred=parse_mode("1920x1080@60")))
    sysfs_tree.write_tree(root, sysfs_tree.SimCard(connectors=(
        sysfs_tree.SimConnector(type="HDMI-A", edid=edid),
        sysfs_tree.SimConnector(type="DP", status="disconnected"),
    )))
    return _cards(root)


def _get(fake: FakeKube, name: str) -> dict[str, Any]:
    found = fake.get(display.API_VERSION, display.KIND, name)
    assert found is not None
    return found


def test_creates_a_display_per_connector_with_status(fake: FakeKube, tmp_path: Path) -> None:
    cards = _machine(tmp_path)
    observed = displays.Observed(
        ddc={"card0-hdmi-a-1": displays.DdcState(supported=True, capabilities="(vcp(10 60))",
                                                  vcp_codes=(0x60, 0x10), inputs=("hdmi1",),
                                                  brightness=70, power="on")},
        claims={"card0-hdmi-a-1": displays.ClaimRef("ns", "screen", "uid-1")},
    )

    async def scenario(client: AsyncClient) -> dict[str, displays.Result]:
        return await displays.Displays(client, node=NODE, backoff=FAST).reconcile(
            cards, observed=observed)

    assert _run(fake, scenario) == {HDMI: "created", DP: "created"}
    hdmi = _get(fake, HDMI)
    assert hdmi["metadata"]["labels"] == {display.NODE_LABEL: NODE,
                                          display.DEVICE_LABEL: "card0-hdmi-a-1"}
    status = hdmi["status"]
    assert status["nodeName"] == NODE and status["card"] == "card0"
    assert status["connector"] == "HDMI-A-1" and status["connected"] is True
    assert status["edid"] == {"manufacturer": "DEL", "model": "U2720Q", "productCode": 0x411A,
                              "serialNumber": 9, "serialString": "SN1"}
    assert status["preferredMode"] == "1920x1080@60"
    assert "1920x1080@60" in status["modes"]
    assert status["ddc"] == {"supported": True, "capabilities": "(vcp(10 60))",
                             "vcpCodes": [0x10, 0x60], "inputs": ["hdmi1"], "brightness": 70,
                             "power": "on"}
    assert status["claim"] == {"namespace": "ns", "name": "screen", "uid": "uid-1"}
    assert [c["status"] for c in status["conditions"]] == ["True"]
    assert _get(fake, DP)["status"]["connected"] is False


def test_second_pass_writes_nothing(fake: FakeKube, tmp_path: Path) -> None:
    cards = _machine(tmp_path)

    async def scenario(client: AsyncClient) -> dict[str, displays.Result]:
        publisher = displays.Displays(client, node=NODE, backoff=FAST)
        await publisher.reconcile(cards)
        return await publisher.reconcile(cards)

    assert _run(fake, scenario) == {HDMI: "unchanged", DP: "unchanged"}
    patches = [r for r in fake.request_log() if r.method == "PATCH"]
    assert len(patches) == 2  # one status write per Display, at creation


def test_spec_a_person_wrote_is_kept_and_labels_added(fake: FakeKube, tmp_path: Path) -> None:
    cards = _machine(tmp_path)
    fake.create({"apiVersion": display.API_VERSION, "kind": display.KIND,
                 "metadata": {"name": HDMI},
                 "spec": {"mode": "1280x720@60", "transform": "rotate-90", "scale": 2}})

    async def scenario(client: AsyncClient) -> dict[str, displays.Result]:
        return await displays.Displays(client, node=NODE, backoff=FAST).reconcile(cards)

    assert _run(fake, scenario)[HDMI] == "updated"
    hdmi = _get(fake, HDMI)
    assert hdmi["spec"] == {"mode": "1280x720@60", "transform": "rotate-90", "scale": 2}
    assert hdmi["metadata"]["labels"][display.DEVICE_LABEL] == "card0-hdmi-a-1"
    assert hdmi["status"]["observedGeneration"] == hdmi["metadata"]["generation"]


def test_unplugged_monitor_keeps_its_display_disconnected(fake: FakeKube,
                                                          tmp_path: Path) -> None:
    cards = _machine(tmp_path)

    async def scenario(client: AsyncClient) -> dict[str, displays.Result]:
        publisher = displays.Displays(client, node=NODE, backoff=FAST)
        await publisher.reconcile(cards)
        sysfs_tree.hotplug(tmp_path, "card0-HDMI-A-1", status="disconnected")
        return await publisher.reconcile(_cards(tmp_path))

    assert _run(fake, scenario)[HDMI] == "updated"
    status = _get(fake, HDMI)["status"]
    assert status["connected"] is False
    assert "edid" not in status and "modes" not in status
    assert status["conditions"][0]["reason"] == "MonitorDisconnected"


def test_conflicting_and_throttled_writes_are_retried(fake: FakeKube, tmp_path: Path) -> None:
    cards = _machine(tmp_path)
    fake.fail_next_writes(2, 429, retry_after=0, resource="displays")

    async def scenario(client: AsyncClient) -> tuple[dict[str, displays.Result], int]:
        publisher = displays.Displays(client, node=NODE, backoff=FAST)
        return await publisher.reconcile(cards), publisher.api_errors

    assert _run(fake, scenario) == ({HDMI: "created", DP: "created"}, 2)


@pytest.mark.parametrize(
    ("old", "new", "patch"),
    [
        ({"a": 1}, {"a": 1}, {}),
        ({"a": 1, "b": 2}, {"a": 1}, {"b": None}),
        ({"e": {"x": 1, "y": 2}}, {"e": {"x": 1}}, {"e": {"y": None}}),
        ({"m": [1, 2]}, {"m": [2]}, {"m": [2]}),
        ({}, {"c": {"d": 1}}, {"c": {"d": 1}}),
    ],
    ids=["equal", "removed", "nested-removed", "list-replaced", "added"],
)
def test_merge_patch(old: dict[str, Any], new: dict[str, Any], patch: dict[str, Any]) -> None:
    assert displays.merge_patch(old, new) == patch


def test_watch_wakes_on_spec_edits_and_deletes_not_on_status_writes(
    fake: FakeKube, tmp_path: Path
) -> None:
    cards = _machine(tmp_path)

    async def scenario(client: AsyncClient) -> list[str]:
        publisher = displays.Displays(client, node=NODE, backoff=FAST)
        await publisher.reconcile(cards)
        woken: asyncio.Queue[str] = asyncio.Queue()
        watcher = asyncio.create_task(publisher.watch(woken.put_nowait))
        try:
            # The watch lists both Displays first: they are current, so they wake nothing.
            await client.patch(displays.DisplayResource, HDMI, {"spec": {"mode": "1280x720@60"}},
                               patch_type=PatchType.MERGE)
            first = await woken.get()
            # The reconcile records the new generation: its own status write wakes nothing,
            # so (events arrive in order) the next wake-up is the delete's.
            await publisher.reconcile(cards)
            await client.delete(displays.DisplayResource, DP)
            return [first, await woken.get()]
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)

    assert _run(fake, scenario) == [HDMI, DP]
    assert _get(fake, HDMI)["status"]["observedGeneration"] == 2
