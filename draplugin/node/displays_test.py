"""displays: Display objects on the fake apiserver with the real CRD from deploy/base (with
DISPLAY_OPERATOR_REAL_API=1, on a real kube-apiserver 1.37: `tests.support.realapi`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from lightkube import AsyncClient
from lightkube.types import PatchType

from draplugin.claims import ClaimRef
from draplugin.node import displays
from draplugin.node.retry import Backoff
from fakekube.client import run_async
from fakekube.server import FakeKube
from libdisplay import display
from libdisplay.hardware import drm
from libdisplay.hardware.modes import parse_mode
from libdisplay.sim import sysfs as sysfs_tree
from libdisplay.sim.edid import EdidParams, build_edid
from tests.support import realapi
from tests.support.crds import display_crd
from tests.support.realapi import ApiServer, real_kube  # noqa: F401 - a fixture

NODE = "kiosk-1"
HDMI = display.display_name(NODE, "card0-hdmi-a-1")
DP = display.display_name(NODE, "card0-dp-1")
WAIT_SECONDS = 30.0
FAST = Backoff(first=0.01, cap=0.05, attempts=6)
APPLIED = displays.SpecOutcome.applied(mode="1280x720@60", transform="normal", scale=1)
T = TypeVar("T")


@pytest.fixture
def fake(real_kube: realapi.RealKube | None) -> Iterator[ApiServer]:  # noqa: F811
    """The fake, or with DISPLAY_OPERATOR_REAL_API=1 a real kube-apiserver 1.37."""
    with realapi.api_server(real_kube) as server:
        server.register_crd(display_crd())
        yield server


def _run(fake: ApiServer, scenario: Callable[[AsyncClient], Awaitable[T]]) -> T:
    return run_async(fake.url, scenario, timeout=WAIT_SECONDS, **realapi.client_options(fake))


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


def _get(fake: ApiServer, name: str) -> dict[str, Any]:
    found = fake.get(display.API_VERSION, display.KIND, name)
    assert found is not None
    return found


def test_creates_a_display_per_connector_with_status(fake: ApiServer, tmp_path: Path) -> None:
    cards = _machine(tmp_path)
    observed = displays.Observed(
        ddc={"card0-hdmi-a-1": displays.DdcState(supported=True, capabilities="(vcp(10 60))",
                                                  vcp_codes=(0x60, 0x10), inputs=("hdmi1",),
                                                  brightness=70, power="on")},
        claims={"card0-hdmi-a-1": ClaimRef("ns", "screen", "uid-1")},
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


def test_second_pass_writes_nothing(fake: ApiServer, tmp_path: Path) -> None:
    cards = _machine(tmp_path)

    async def scenario(client: AsyncClient) -> dict[str, displays.Result]:
        publisher = displays.Displays(client, node=NODE, backoff=FAST)
        await publisher.reconcile(cards)
        return await publisher.reconcile(cards)

    assert _run(fake, scenario) == {HDMI: "unchanged", DP: "unchanged"}
    patches = [r for r in fake.request_log() if r.method == "PATCH"]
    assert len(patches) == 2  # one status write per Display, at creation


def test_spec_a_person_wrote_is_kept_and_labels_added(fake: ApiServer, tmp_path: Path) -> None:
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
    # Observing the monitor is not acting on the spec: only a spec report says it was.
    assert "observedGeneration" not in hdmi["status"]


def test_unplugged_monitor_keeps_its_display_disconnected(fake: ApiServer,
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


@realapi.fake_only("fail_next_writes, a fault hook")
def test_conflicting_and_throttled_writes_are_retried(fake: ApiServer, tmp_path: Path) -> None:
    cards = _machine(tmp_path)
    assert isinstance(fake, FakeKube)
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
    fake: ApiServer, tmp_path: Path
) -> None:
    cards = _machine(tmp_path)

    async def scenario(client: AsyncClient) -> list[str]:
        publisher = displays.Displays(client, node=NODE, backoff=FAST)
        await publisher.reconcile(cards)
        for name in (HDMI, DP):
            await publisher.report_spec(name, 1, APPLIED)
        woken: asyncio.Queue[str] = asyncio.Queue()
        watcher = asyncio.create_task(publisher.watch(woken.put_nowait))
        try:
            # The watch lists both Displays first: their spec is observed, so they wake nothing.
            await client.patch(displays.DisplayResource, HDMI, {"spec": {"mode": "1280x720@60"}},
                               patch_type=PatchType.MERGE)
            first = await woken.get()
            # The report records the new generation: its own status write wakes nothing,
            # so (events arrive in order) the next wake-up is the delete's.
            await publisher.report_spec(HDMI, 2, APPLIED)
            await client.delete(displays.DisplayResource, DP)
            return [first, await woken.get()]
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)

    assert _run(fake, scenario) == [HDMI, DP]
    assert _get(fake, HDMI)["status"]["observedGeneration"] == 2


def _spec_applied(status: dict[str, Any]) -> dict[str, Any]:
    (found,) = (c for c in status["conditions"] if c["type"] == displays.SPEC_APPLIED_CONDITION)
    return dict(found)


def _status_patches(fake: ApiServer, name: str) -> int:
    return len([r for r in fake.request_log()
                if r.method == "PATCH" and r.path.endswith(f"/{name}/status")])


def test_a_spec_report_sets_observed_generation_and_spec_applied_once(
    fake: ApiServer, tmp_path: Path
) -> None:
    cards = _machine(tmp_path)
    fake.create({"apiVersion": display.API_VERSION, "kind": display.KIND,
                 "metadata": {"name": HDMI}, "spec": {"mode": "800x600@60"}})
    not_offered = displays.SpecOutcome.mode_not_offered("800x600@60",
                                                        ["1920x1080@60", "1280x720@60"])

    async def scenario(client: AsyncClient) -> list[displays.SpecResult]:
        publisher = displays.Displays(client, node=NODE, backoff=FAST)
        await publisher.reconcile(cards)
        first = await publisher.report_spec(HDMI, 1, not_offered)
        again = await publisher.report_spec(HDMI, 1, not_offered)
        await publisher.reconcile(cards)  # observing keeps the outcome as it is
        return [first, again]

    assert _run(fake, scenario) == ["updated", "unchanged"]
    # The first reconcile's write and the report's; the repeated report and the second
    # reconcile write nothing.
    assert _status_patches(fake, HDMI) == 2
    status = _get(fake, HDMI)["status"]
    assert status["observedGeneration"] == 1
    condition = _spec_applied(status)
    assert (condition["status"], condition["reason"], condition["observedGeneration"]) == (
        "False", "ModeNotOffered", 1)
    assert condition["message"].endswith("offered: 1920x1080@60, 1280x720@60")
    assert [c["type"] for c in status["conditions"]] == ["Connected", "SpecApplied"]


def test_a_spec_report_with_power_writes_it_and_observing_keeps_it(
    fake: ApiServer, tmp_path: Path
) -> None:
    cards = _machine(tmp_path)
    fake.create({"apiVersion": display.API_VERSION, "kind": display.KIND,
                 "metadata": {"name": HDMI}, "spec": {"power": "Off"}})
    power = {"state": "Off", "appliedBy": ["KMS"], "source": "Display", "kms": "Applied",
             "ddc": "Unsupported"}
    outcome = displays.SpecOutcome.applied(mode="1920x1080@60", transform="normal", scale=1,
                                           power="power Off through KMS")

    async def scenario(client: AsyncClient) -> None:
        publisher = displays.Displays(client, node=NODE, backoff=FAST)
        await publisher.reconcile(cards)
        await publisher.report_spec(HDMI, 1, outcome, power=power)
        await publisher.reconcile(cards)  # the observed fields leave the power as reported

    _run(fake, scenario)
    status = _get(fake, HDMI)["status"]
    assert status["power"] == power
    assert _spec_applied(status)["message"].endswith("; power Off through KMS")


def test_last_transition_time_moves_only_when_the_status_does(fake: ApiServer,
                                                               tmp_path: Path) -> None:
    cards = _machine(tmp_path)
    held = displays.SpecOutcome.held_by_claim(ClaimRef("ns", "screen", "uid-1"))
    # A stored time in the past shows whether the next write keeps or renews it.
    old_time = "2020-01-01T00:00:00Z"

    async def age(client: AsyncClient) -> None:
        conditions = _get(fake, HDMI)["status"]["conditions"]
        for c in conditions:
            c["lastTransitionTime"] = old_time
        await client.patch(displays.DisplayResource.Status, HDMI,
                           {"status": {"conditions": conditions}}, patch_type=PatchType.MERGE)

    async def scenario(client: AsyncClient) -> list[dict[str, Any]]:
        publisher = displays.Displays(client, node=NODE, backoff=FAST)
        await publisher.reconcile(cards)
        await publisher.report_spec(HDMI, 1, held)
        await age(client)
        await publisher.report_spec(HDMI, 1, displays.SpecOutcome.monitor_disconnected())
        same_status = _spec_applied(_get(fake, HDMI)["status"])
        await publisher.report_spec(HDMI, 1, APPLIED)
        return [same_status, _spec_applied(_get(fake, HDMI)["status"])]

    same_status, changed = _run(fake, scenario)
    assert (same_status["reason"], same_status["lastTransitionTime"]) == (
        "MonitorDisconnected", old_time)
    assert (changed["status"], changed["reason"]) == ("True", "Applied")
    assert changed["lastTransitionTime"] != old_time


def test_a_report_older_than_the_display_is_dropped(fake: ApiServer, tmp_path: Path) -> None:
    cards = _machine(tmp_path)

    async def scenario(client: AsyncClient) -> list[displays.SpecResult]:
        publisher = displays.Displays(client, node=NODE, backoff=FAST)
        await publisher.reconcile(cards)
        await client.patch(displays.DisplayResource, HDMI, {"spec": {"mode": "1280x720@60"}},
                           patch_type=PatchType.MERGE)
        newer = await publisher.report_spec(HDMI, 2, APPLIED)
        older = await publisher.report_spec(HDMI, 1, displays.SpecOutcome.monitor_disconnected())
        ahead = await publisher.report_spec(HDMI, 3, displays.SpecOutcome.monitor_disconnected())
        gone = await publisher.report_spec("nobody.card0-dp-9", 1, APPLIED)
        return [newer, older, ahead, gone]

    assert _run(fake, scenario) == ["updated", "stale", "stale", "missing"]
    status = _get(fake, HDMI)["status"]
    assert status["observedGeneration"] == 2 and _spec_applied(status)["reason"] == "Applied"


def test_a_status_write_between_read_and_patch_is_not_lost(fake: ApiServer,
                                                            tmp_path: Path) -> None:
    """The report computed from a stale read is refused (409) and made again from a fresh one:
    the other writer's field stays."""
    cards = _machine(tmp_path)

    class StaleOnce(displays.Displays):
        stale: dict[str, Any] | None = None

        async def _get(self, name: str) -> dict[str, Any] | None:
            if self.stale is not None:
                stale, self.stale = self.stale, None
                return stale
            return await super()._get(name)

    async def scenario(client: AsyncClient) -> int:
        publisher = StaleOnce(client, node=NODE, backoff=FAST)
        await publisher.reconcile(cards)
        publisher.stale = _get(fake, HDMI)
        await client.patch(displays.DisplayResource.Status, HDMI,
                           {"status": {"currentMode": "1920x1080@60"}},
                           patch_type=PatchType.MERGE)
        await publisher.report_spec(HDMI, 1, APPLIED)
        return publisher.api_errors

    assert _run(fake, scenario) == 1  # the one 409
    status = _get(fake, HDMI)["status"]
    assert status["currentMode"] == "1920x1080@60"
    assert _spec_applied(status)["reason"] == "Applied"


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: displays.SpecOutcome("True", "not a reason", "m"), "reason"),
        (lambda: displays.SpecOutcome("True", "", "m"), "reason"),
        (lambda: displays.SpecOutcome("Yes", "Applied", "m"), "status"),  # type: ignore[arg-type]
        (lambda: displays.SpecOutcome("True", "Applied", "m" * 40000), "message"),
    ],
    ids=["spaces", "empty", "status", "long-message"],
)
def test_an_outcome_the_api_would_refuse_names_its_field(build: Callable[[], object],
                                                          field: str) -> None:
    with pytest.raises(displays.SpecOutcomeError) as raised:
        build()
    assert raised.value.field == field


@pytest.mark.parametrize("generation", [0, -1, True])
def test_a_generation_below_one_is_refused_before_any_call(fake: ApiServer,
                                                           generation: int) -> None:
    async def scenario(client: AsyncClient) -> None:
        await displays.Displays(client, node=NODE, backoff=FAST).report_spec(HDMI, generation,
                                                                             APPLIED)

    with pytest.raises(displays.SpecOutcomeError) as raised:
        _run(fake, scenario)
    assert raised.value.field == "generation"
    assert fake.request_log() == []


def _display_requests(fake: ApiServer) -> list[str]:
    """The Display requests since the log was cleared, the watch's own list and watch aside."""
    return [f"{r.method} {r.path.rsplit('/displays', 1)[-1] or '/'}"
            for r in fake.request_log()
            if "/displays" in r.path and not (r.method == "GET" and r.path.endswith("/displays"))]


def test_a_listed_node_reads_its_displays_from_the_watch_cache(fake: ApiServer,
                                                                tmp_path: Path) -> None:
    """Once the watch has listed, a hotplug, a claim, a spec report and idle passes read no
    Display from the API: only what changed is written."""
    cards = _machine(tmp_path)
    claimed = displays.Observed(claims={"card0-hdmi-a-1": ClaimRef("ns", "s", "u1")})

    async def scenario(client: AsyncClient) -> tuple[list[str], list[str], list[str]]:
        publisher = displays.Displays(client, node=NODE, backoff=FAST)
        await publisher.reconcile(cards)
        watcher = asyncio.create_task(publisher.watch(lambda _name: None))
        try:
            await publisher.informer.synced.wait()
            fake.requests.clear()
            for _ in range(20):  # idle resyncs
                await publisher.reconcile(cards)
            idle = _display_requests(fake)
            sysfs_tree.hotplug(tmp_path, "card0-HDMI-A-1", status="disconnected")
            await publisher.reconcile(_cards(tmp_path))
            sysfs_tree.hotplug(tmp_path, "card0-HDMI-A-1", status="connected",
                               edid=build_edid(EdidParams(name="B")))
            await publisher.reconcile(_cards(tmp_path))
            hotplugs = _display_requests(fake)
            fake.requests.clear()
            await publisher.reconcile(_cards(tmp_path), observed=claimed)
            await publisher.report_spec(HDMI, 1, APPLIED)
            return idle, hotplugs, _display_requests(fake)
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)

    idle, hotplugs, claim = _run(fake, scenario)
    assert idle == []
    assert hotplugs == [f"PATCH /{HDMI}/status"] * 2
    assert claim == [f"PATCH /{HDMI}/status"] * 2


def test_a_display_the_cache_does_not_hold_is_read_from_the_api(fake: ApiServer,
                                                                 tmp_path: Path) -> None:
    """A Display a person made without the node label is not in the watch's selection: the
    create is refused (409) and the retry reads it from the API, then labels it."""
    cards = _machine(tmp_path)

    async def scenario(client: AsyncClient) -> tuple[dict[str, displays.Result], int]:
        publisher = displays.Displays(client, node=NODE, backoff=FAST)
        watcher = asyncio.create_task(publisher.watch(lambda _name: None))
        try:
            await publisher.informer.synced.wait()
            fake.create({"apiVersion": display.API_VERSION, "kind": display.KIND,
                         "metadata": {"name": HDMI}, "spec": {"mode": "1280x720@60"}})
            return await publisher.reconcile(cards), publisher.api_errors
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)

    assert _run(fake, scenario) == ({HDMI: "updated", DP: "created"}, 1)
    hdmi = _get(fake, HDMI)
    assert hdmi["spec"] == {"mode": "1280x720@60"}
    assert hdmi["metadata"]["labels"][display.NODE_LABEL] == NODE


class _HeldEvents:
    """A watch source whose events wait for `release`: the writes' answers reach the cache
    before the watch brings the same writes back."""

    def __init__(self, source: Any) -> None:
        self._source = source
        self.what = source.what
        self.release = asyncio.Event()

    async def list(self) -> tuple[list[dict[str, Any]], str]:
        result: tuple[list[dict[str, Any]], str] = await self._source.list()
        return result

    async def watch(self, resource_version: str,
                    timeout_s: int) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        async for event in self._source.watch(resource_version, timeout_s):
            await self.release.wait()
            yield event


def test_a_display_that_enters_the_selection_by_the_operator_s_write_wakes_it(
        fake: ApiServer, tmp_path: Path) -> None:
    """A Display the operator creates, or one made by hand that it labels, comes into the
    watch's selection with its spec unobserved; the watch takes the write's event as already
    seen, so the write itself wakes the operator to act on the spec. A reported Display wakes
    nothing on the next pass."""
    cards = _machine(tmp_path)

    async def scenario(client: AsyncClient) -> tuple[set[str], set[str]]:
        publisher = displays.Displays(client, node=NODE, backoff=FAST)
        held = _HeldEvents(publisher.informer.source)
        publisher.informer.source = held
        woken: set[str] = set()
        watcher = asyncio.create_task(publisher.watch(woken.add))
        try:
            await publisher.informer.synced.wait()
            fake.create({"apiVersion": display.API_VERSION, "kind": display.KIND,
                         "metadata": {"name": HDMI}, "spec": {"mode": "1280x720@60"}})
            await publisher.reconcile(cards)
            first = set(woken)
            for name in (HDMI, DP):
                await publisher.report_spec(name, 1, APPLIED)
            held.release.set()
            woken.clear()
            await publisher.reconcile(cards)
            return first, woken
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)

    assert _run(fake, scenario) == ({HDMI, DP}, set())


def test_held_writes_wait_until_let_go(fake: ApiServer, tmp_path: Path) -> None:
    cards = _machine(tmp_path)

    async def scenario(client: AsyncClient) -> tuple[list[str], dict[str, displays.Result]]:
        writer = displays.Displays(client, node=NODE, backoff=FAST)
        writer.hold_writes(True)
        fake.requests.clear()
        pass_ = asyncio.create_task(writer.reconcile(cards))
        # Long enough for both Displays' reads and writes, were they not held.
        done, _ = await asyncio.wait({pass_}, timeout=1.0)
        held = [f"{r.method} {r.path}" for r in fake.request_log()]
        assert not done, "the pass ended while its writes were held"
        writer.hold_writes(False)
        return held, await pass_

    held, results = _run(fake, scenario)
    assert [r for r in held if not r.startswith("GET ")] == []
    assert results == {HDMI: "created", DP: "created"}
    assert _get(fake, HDMI)["status"]["connected"] is True
