"""slices: device attributes from simulated cards, and the Publisher against the fake apiserver
(with DISPLAY_OPERATOR_REAL_API=1, a real kube-apiserver 1.37: `tests.support.realapi`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from lightkube import AsyncClient

from draplugin.node import slices
from draplugin.node.retry import Backoff
from fakekube.client import run_async
from fakekube.faults import FaultCode
from fakekube.server import FakeKube
from libdisplay import pod
from libdisplay.hardware import drm
from libdisplay.hardware.modes import parse_mode
from libdisplay.sim import sysfs as sysfs_tree
from libdisplay.sim.edid import EdidParams, build_edid
from tests.support import realapi
from tests.support.realapi import ApiServer, real_kube  # noqa: F401 - a fixture

NODE = "kiosk-1"
WAIT_SECONDS = 30.0
T = TypeVar("T")
FAST = Backoff(first=0.01, cap=0.05, attempts=6)


def _edid(**kwargs: Any) -> bytes:
    return build_edid(EdidParams(**kwargs))


def _tree(root: Path, *connectors: sysfs_tree.SimConnector) -> tuple[drm.Card, ...]:
    sysfs_tree.write_tree(root, sysfs_tree.SimCard(connectors=connectors))
    return drm.enumerate_cards(sysfs_root=sysfs_tree.sysfs_root(root),
                               dev_root=sysfs_tree.dev_root(root))


@pytest.fixture
def fake(real_kube: realapi.RealKube | None) -> Iterator[ApiServer]:  # noqa: F811
    """The fake, or with DISPLAY_OPERATOR_REAL_API=1 a real kube-apiserver 1.37."""
    with realapi.api_server(real_kube) as server:
        server.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
        yield server


def _run(fake: ApiServer, scenario: Callable[[AsyncClient], Awaitable[T]]) -> T:
    return run_async(fake.url, scenario, timeout=WAIT_SECONDS, **realapi.client_options(fake))


def _stored(fake: ApiServer) -> dict[str, Any]:
    found = fake.get("resource.k8s.io/v1", "ResourceSlice", slices.slice_name(NODE))
    assert found is not None
    return found


def test_devices_carry_edid_and_mode_attributes(tmp_path: Path) -> None:
    edid = _edid(manufacturer="DEL", product_code=0x411A, serial_number=77,
                 serial_string="SN123", name="U2720Q", size_mm=(600, 340),
                 preferred=parse_mode("3840x2160@60"), detailed=(parse_mode("1920x1080@60"),))
    cards = _tree(tmp_path,
                  sysfs_tree.SimConnector(type="HDMI-A", edid=edid, modes=("3840x2160",)),
                  sysfs_tree.SimConnector(type="DP", status="disconnected"))
    (device,) = slices.build_devices(cards, ddc={"card0-hdmi-a-1": True})
    assert device["name"] == "card0-hdmi-a-1"
    attrs = device["attributes"]
    assert attrs["connector"] == {"string": "HDMI-A-1"}
    assert attrs["connectorType"] == {"string": "HDMI-A"}
    assert attrs["manufacturer"] == {"string": "DEL"}
    assert attrs["model"] == {"string": "U2720Q"}
    assert attrs["productCode"] == {"int": 0x411A}
    assert attrs["serialNumber"] == {"int": 77}
    assert attrs["serialString"] == {"string": "SN123"}
    assert attrs["widthMM"] == {"int": 600}
    assert attrs["preferredWidth"] == {"int": 3840}
    assert attrs["preferredRefreshMHz"] == {"int": 60000}
    assert attrs["maxWidth"] == {"int": 3840}
    assert attrs["ddc"] == {"bool": True}
    assert attrs[slices.ADDRESS_ATTRIBUTE] == {"string": "0000:00:02.0"}


def test_connected_monitor_without_edid_still_is_a_device(tmp_path: Path) -> None:
    cards = _tree(tmp_path, sysfs_tree.SimConnector(type="DP", modes=("1280x720",)))
    (device,) = slices.build_devices(cards)
    assert "manufacturer" not in device["attributes"]
    assert device["attributes"]["preferredWidth"] == {"int": 1280}


def test_more_monitors_than_a_slice_holds_are_cut_to_the_limit_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    count = slices.MAX_DEVICES + 3
    cards = _tree(tmp_path, *(sysfs_tree.SimConnector(type="DP", index=i, modes=("1280x720",))
                              for i in range(1, count + 1)))
    devices = slices.build_devices(cards)
    assert len(devices) == slices.MAX_DEVICES
    published = {d["name"] for d in devices}
    left_out = {f"card0-dp-{i}" for i in range(1, count + 1)} - published
    assert len(left_out) == 3
    assert all(name in caplog.text for name in left_out)


@pytest.mark.parametrize(
    ("raw", "cleaned"),
    [
        ("  Dell\tU27\x00 ", "Dell U27"),
        ("x" * 100, "x" * 64),
        ("a\u200bb", "a b"),
        ("", ""),
    ],
    ids=["controls-and-blanks", "too-long", "format-char", "empty"],
)
def test_clean_string(raw: str, cleaned: str) -> None:
    assert slices.clean_string(raw) == cleaned


@pytest.mark.parametrize(
    "name", ["bad-name", "1abc", "x" * 33, "a.b"], ids=["dash", "digit-first", "long", "dot"]
)
def test_bad_attribute_names_are_refused(name: str) -> None:
    with pytest.raises(slices.BadAttributeError, match="is not a"):
        slices.check_attributes({name: {"int": 1}})


def test_long_node_name_gives_a_valid_slice_name() -> None:
    name = slices.slice_name("n" * 250)
    assert len(name) <= 253 and name.endswith(pod.DRIVER)


def test_publish_creates_once_then_no_churn(fake: ApiServer, tmp_path: Path) -> None:
    cards = _tree(tmp_path, sysfs_tree.SimConnector(type="HDMI-A", edid=_edid()))

    async def scenario(client: AsyncClient) -> list[slices.Sync]:
        publisher = slices.Publisher(client, node=NODE, backoff=FAST)
        publisher.update(slices.build_devices(cards))
        first = await publisher.sync()
        publisher.update(slices.build_devices(cards))
        return [first, await publisher.sync(), await publisher.sync()]

    assert _run(fake, scenario) == ["created", "unchanged", "unchanged"]
    stored = _stored(fake)
    node_uid = fake.get("v1", "Node", NODE)["metadata"]["uid"]  # type: ignore[index]
    assert stored["metadata"]["ownerReferences"][0]["uid"] == node_uid
    assert stored["spec"]["nodeName"] == NODE
    assert stored["spec"]["pool"] == {"name": NODE, "generation": 0, "resourceSliceCount": 1}
    assert [d["name"] for d in stored["spec"]["devices"]] == ["card0-hdmi-a-1"]


def test_hotplug_updates_in_place_keeping_generation(fake: ApiServer, tmp_path: Path) -> None:
    cards = _tree(tmp_path, sysfs_tree.SimConnector(type="HDMI-A", edid=_edid()),
                  sysfs_tree.SimConnector(type="DP", status="disconnected"))
    sysfs = sysfs_tree.sysfs_root(tmp_path)

    async def scenario(client: AsyncClient) -> slices.Sync:
        publisher = slices.Publisher(client, node=NODE, backoff=FAST)
        publisher.update(slices.build_devices(cards))
        await publisher.sync()
        sysfs_tree.hotplug(tmp_path, "card0-DP-1", status="connected", edid=_edid(name="B"))
        publisher.update(slices.build_devices(
            drm.enumerate_cards(sysfs_root=sysfs, dev_root=sysfs_tree.dev_root(tmp_path))))
        return await publisher.sync()

    assert _run(fake, scenario) == "updated"
    stored = _stored(fake)
    assert [d["name"] for d in stored["spec"]["devices"]] == ["card0-dp-1", "card0-hdmi-a-1"]
    assert stored["spec"]["pool"]["generation"] == 0


def test_wiped_slice_is_recreated_with_next_generation(fake: ApiServer, tmp_path: Path) -> None:
    cards = _tree(tmp_path, sysfs_tree.SimConnector(type="HDMI-A", edid=_edid()))

    async def scenario(client: AsyncClient) -> list[slices.Sync]:
        publisher = slices.Publisher(client, node=NODE, resync=0.05, backoff=FAST)
        publisher.update(slices.build_devices(cards))
        task = asyncio.create_task(publisher.run())
        try:
            while publisher.publishes < 1:
                await asyncio.sleep(0.01)
            assert fake.delete_node_slices(NODE) == [publisher.name]
            while publisher.publishes < 2:
                await asyncio.sleep(0.01)
        finally:
            task.cancel()
        return [await publisher.sync()]

    assert _run(fake, scenario) == ["unchanged"]
    assert _stored(fake)["spec"]["pool"]["generation"] == 1


@realapi.fake_only("fail_next_writes, a fault hook")
@pytest.mark.parametrize("code", [409, 429], ids=["conflict", "too-many-requests"])
def test_write_errors_are_retried(fake: ApiServer, tmp_path: Path, code: FaultCode) -> None:
    cards = _tree(tmp_path, sysfs_tree.SimConnector(type="HDMI-A", edid=_edid()))
    assert isinstance(fake, FakeKube)
    fake.fail_next_writes(3, code, retry_after=0, resource="resourceslices")

    async def scenario(client: AsyncClient) -> tuple[slices.Sync, int]:
        publisher = slices.Publisher(client, node=NODE, backoff=FAST)
        publisher.update(slices.build_devices(cards))
        return await publisher.sync(), publisher.api_errors

    assert _run(fake, scenario) == ("created", 3)
    _stored(fake)


@realapi.fake_only("fail_next_writes, a fault hook")
def test_persistent_errors_end_in_a_publish_error(fake: ApiServer, tmp_path: Path) -> None:
    assert isinstance(fake, FakeKube)
    fake.fail_next_writes(10, 500, resource="resourceslices")

    async def scenario(client: AsyncClient) -> None:
        publisher = slices.Publisher(client, node=NODE, backoff=FAST)
        await publisher.sync()

    with pytest.raises(slices.PublishError, match="500"):
        _run(fake, scenario)


def test_taint_is_set_kept_and_cleared(fake: ApiServer, tmp_path: Path) -> None:
    cards = _tree(tmp_path, sysfs_tree.SimConnector(type="HDMI-A", edid=_edid()),
                  sysfs_tree.SimConnector(type="DP", edid=_edid(name="B")))

    async def scenario(client: AsyncClient) -> list[slices.Sync]:
        publisher = slices.Publisher(client, node=NODE, backoff=FAST)
        publisher.update(slices.build_devices(cards))
        results = [await publisher.sync()]
        publisher.set_tainted(True)
        results += [await publisher.sync(), await publisher.sync()]
        taints = [d.get("taints") for d in _stored(fake)["spec"]["devices"]]
        assert all(t and t[0]["key"] == slices.TAINT_KEY and t[0]["effect"] == "NoSchedule"
                   and t[0]["timeAdded"] for t in taints)
        publisher.set_tainted(False)
        results.append(await publisher.sync())
        return results

    assert _run(fake, scenario) == ["created", "updated", "unchanged", "updated"]
    assert all("taints" not in d for d in _stored(fake)["spec"]["devices"])


@realapi.fake_only("the DRADeviceTaints gate is GA and locked on in 1.37")
def test_dropped_taints_do_not_churn(tmp_path: Path) -> None:
    cards = _tree(tmp_path, sysfs_tree.SimConnector(type="HDMI-A", edid=_edid()))
    with FakeKube(device_taints=False) as fake:
        fake.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})

        async def scenario(client: AsyncClient) -> list[slices.Sync]:
            publisher = slices.Publisher(client, node=NODE, backoff=FAST)
            publisher.update(slices.build_devices(cards))
            publisher.set_tainted(True)
            return [await publisher.sync(), await publisher.sync()]

        assert _run(fake, scenario) == ["created", "unchanged"]


def test_watch_recreates_a_wiped_slice_before_the_resync(fake: ApiServer, tmp_path: Path) -> None:
    cards = _tree(tmp_path, sysfs_tree.SimConnector(type="HDMI-A", edid=_edid()))

    async def scenario(client: AsyncClient) -> int:
        publisher = slices.Publisher(client, node=NODE, resync=600.0, backoff=FAST)
        publisher.update(slices.build_devices(cards))
        task = asyncio.create_task(publisher.run())
        try:
            while publisher.publishes < 1:
                await asyncio.sleep(0.01)
            while not any(r.param("watch") == "true" for r in fake.request_log()):
                await asyncio.sleep(0.01)  # the deletion below must reach an open watch
            fake.delete_node_slices(NODE)
            while publisher.publishes < 2:
                await asyncio.sleep(0.01)
        finally:
            task.cancel()
        return publisher.publishes

    assert _run(fake, scenario) == 2
    assert _stored(fake)["spec"]["pool"]["generation"] == 1


def test_update_keeps_time_added_of_unchanged_taints(fake: ApiServer, tmp_path: Path) -> None:
    cards = _tree(tmp_path, sysfs_tree.SimConnector(type="HDMI-A", edid=_edid()),
                  sysfs_tree.SimConnector(type="DP", status="disconnected"))
    old = "2020-01-01T00:00:00Z"
    (device,) = slices.with_taint(slices.build_devices(cards), tainted=True)
    device["taints"][0]["timeAdded"] = old
    node_uid = fake.get("v1", "Node", NODE)["metadata"]["uid"]  # type: ignore[index]
    fake.create(slices.build_slice(NODE, node_uid=node_uid, devices=[device], generation=0))
    sysfs_tree.hotplug(tmp_path, "card0-DP-1", status="connected", edid=_edid(name="B"))
    replugged = drm.enumerate_cards(sysfs_root=sysfs_tree.sysfs_root(tmp_path),
                                    dev_root=sysfs_tree.dev_root(tmp_path))

    async def scenario(client: AsyncClient) -> slices.Sync:
        publisher = slices.Publisher(client, node=NODE, backoff=FAST)
        publisher.update(slices.build_devices(replugged))
        publisher.set_tainted(True)
        return await publisher.sync()

    assert _run(fake, scenario) == "updated"
    times = {d["name"]: d["taints"][0]["timeAdded"] for d in _stored(fake)["spec"]["devices"]}
    assert times["card0-hdmi-a-1"] == old
    assert times["card0-dp-1"] != old


def test_an_idle_publisher_sends_nothing_and_a_change_only_its_write(
        fake: ApiServer, tmp_path: Path) -> None:
    cards = _tree(tmp_path, sysfs_tree.SimConnector(type="HDMI-A", edid=_edid()),
                  sysfs_tree.SimConnector(type="DP", status="disconnected"))
    sysfs = sysfs_tree.sysfs_root(tmp_path)
    passes = 0

    def passed() -> None:
        nonlocal passes
        passes += 1

    async def scenario(client: AsyncClient) -> tuple[list[str], list[str]]:
        publisher = slices.Publisher(client, node=NODE, resync=0.01, backoff=FAST,
                                     on_pass=passed)
        publisher.update(slices.build_devices(cards))
        task = asyncio.create_task(publisher.run())
        try:
            while publisher.publishes < 1 or fake.open_watches < 1:
                await asyncio.sleep(0.01)
            fake.requests.clear()
            start = passes
            while passes < start + 20:  # twenty resync checks
                await asyncio.sleep(0.01)
            idle = [f"{r.method} {r.path}" for r in fake.request_log()]
            sysfs_tree.hotplug(tmp_path, "card0-DP-1", status="connected", edid=_edid(name="B"))
            publisher.update(slices.build_devices(
                drm.enumerate_cards(sysfs_root=sysfs, dev_root=sysfs_tree.dev_root(tmp_path))))
            assert await publisher.sync() == "updated"
            start = passes
            while passes < start + 5:
                await asyncio.sleep(0.01)
            return idle, [f"{r.method} {r.path}" for r in fake.request_log()]
        finally:
            task.cancel()

    idle, changed = _run(fake, scenario)
    assert idle == []
    assert changed == [f"PUT /apis/resource.k8s.io/v1/resourceslices/{slices.slice_name(NODE)}"]
