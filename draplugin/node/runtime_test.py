"""runtime: the whole publisher on the fake apiserver, a simulated card and a real weston."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any, cast

from draplugin.claims import ClaimRef
from draplugin.compositor import Compositor, Followed
from draplugin.driver.claimconfig import DisplayConfig
from draplugin.node import ddcmap, hotplug, runtime, slices, watchdog
from draplugin.node.settings import NodeSettings
from draplugin.testing import WAIT_SECONDS, until
from fakekube.client import async_client
from fakekube.server import FakeKube
from libdisplay import display
from libdisplay.compositor.wayland import Liveness
from libdisplay.hardware import drm
from libdisplay.hardware.ddc import DdcClient, Transport
from libdisplay.sim import sysfs as sysfs_tree
from libdisplay.sim.ddc import FakeClock, SimulatedMonitor
from libdisplay.sim.edid import EdidParams, build_edid
from tests.support import weston
from tests.support.crds import display_crd

NODE = "kiosk-1"
A = build_edid(EdidParams(serial_number=1, name="A"))
B = build_edid(EdidParams(serial_number=2, name="B"))
CAPS = "(prot(monitor)type(lcd)vcp(10 12 60(0F 11) D6(01 04))mccs_ver(2.2))"


def _buses(monitors: dict[int, SimulatedMonitor]) -> ddcmap.Buses:
    clock = FakeClock()

    def open_bus(bus: int) -> Transport:
        if bus not in monitors:
            raise FileNotFoundError(f"/dev/i2c-{bus}")
        return monitors[bus]

    return ddcmap.Buses(open_bus=open_bus,
                        client=lambda t: DdcClient(t, sleep=clock.sleep, clock=clock))


def _slice(fake: FakeKube) -> dict[str, Any]:
    return fake.get("resource.k8s.io/v1", "ResourceSlice", slices.slice_name(NODE)) or {}


def _devices(fake: FakeKube) -> list[dict[str, Any]]:
    return list((_slice(fake).get("spec") or {}).get("devices") or [])


def _compositor(socket: Path, pid_file: Path) -> Compositor:
    return Compositor(socket=socket, pid_file=pid_file, restarts_dir=pid_file.parent / "r",
                      control=None, restart_timeout=5.0, probe_timeout=0.5)


def _display_status(fake: FakeKube, device: str) -> dict[str, Any]:
    found = fake.get(display.API_VERSION, display.KIND, display.display_name(NODE, device))
    return dict((found or {}).get("status") or {})


def test_publishes_follows_hotplug_and_taints_a_hung_compositor(tmp_path: Path) -> None:
    sysfs_tree.write_tree(tmp_path, sysfs_tree.SimCard(connectors=(
        sysfs_tree.SimConnector(type="HDMI-A", edid=A, i2c_bus=3),
        sysfs_tree.SimConnector(type="DP", status="disconnected"),
    )))
    pid_file = tmp_path / "weston.pid"
    heard: list[watchdog.Availability] = []
    followed: list[tuple[str, ...]] = []
    shown: list[tuple[str, ...]] = []  # the connected devices of the inventory each was given
    with FakeKube() as fake, weston.headless(renderer="noop") as w:
        fake.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
        fake.register_crd(display_crd())
        pid_file.write_text(f"{w.process.pid}\n")
        config = NodeSettings(
            name=NODE, sysfs_root=sysfs_tree.sysfs_root(tmp_path),
            dev_root=sysfs_tree.dev_root(tmp_path),
            watchdog_interval=0.1, probe_timeout=0.5, aliases={"HDMI-A-1": "headless"})
        compositor = _compositor(w.socket, pid_file)
        source = hotplug.QueueEvents()

        def follow(plugged: tuple[str, ...], cards: tuple[drm.Card, ...]) -> Followed:
            """The driver's follow-up of a connector change: "not yet" once, then done (the
            Displays' creation, an edit of theirs, is followed too: with nothing plugged)."""
            if plugged:
                followed.append(plugged)
                shown.append(tuple(sorted(c.device_name for card in cards
                                          for c in card.connectors if c.connected)))
            return "failed" if len(followed) == 1 else "changed"

        async def main() -> tuple[runtime.NodeRuntime, dict[str, Any], dict[str, Any], str]:
            client = async_client(fake.url)
            node = runtime.NodeRuntime(client, config, compositor, source=source,
                                       buses=_buses({3: SimulatedMonitor(capabilities=CAPS)}))
            node.add_availability_listener(heard.append)
            node.follow_connectors_with(follow)
            task = asyncio.create_task(node.run())
            try:
                await until(lambda: any(
                    d["attributes"]["ddc"] == {"bool": True} for d in _devices(fake)),
                    "the slice says DDC/CI answers")
                await until(lambda: node.compositor_available, "weston answers")
                await until(lambda: "currentMode" in _display_status(fake, "card0-hdmi-a-1"),
                             "the Display shows the mode weston runs")
                running = _display_status(fake, "card0-hdmi-a-1")
                # A claim's settings, applied on a gRPC thread, show in the status at the
                # refresh that follows a prepare, without a new probe.
                assert node.hotplug is not None
                (hdmi,) = (c for card in node.hotplug.cards for c in card.connectors
                           if c.connected)
                hook = node.ddc_hook()
                plan = hook.plan(hdmi, DisplayConfig(brightness=40, power="off"))
                assert plan is not None
                await asyncio.to_thread(hook.apply, plan)
                await until(lambda: node._observed.ddc["card0-hdmi-a-1"].brightness == 40,
                             "the applied brightness is observed")
                await node.refresh()
                applied = _display_status(fake, "card0-hdmi-a-1")["ddc"]
                unplugged = node.metrics.exposition().decode()
                sysfs_tree.hotplug(tmp_path, "card0-DP-1", status="connected", edid=B)
                source.inject()
                await until(lambda: len(_devices(fake)) == 2, "the plugged monitor is listed")
                await until(lambda: len(followed) == 2, "the change followed, once retried")
                w.process.send_signal(signal.SIGSTOP)
                await until(lambda: all(d.get("taints") for d in _devices(fake)),
                             "every device is tainted")
                await until(lambda: node.watchdog.kills == 1, "the hung weston is killed")
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                await client.close()
            return node, running, applied, unplugged

        node, running, applied, unplugged = asyncio.run(main())
        assert (applied["brightness"], applied["power"]) == (40, "off")
        assert w.process.wait(timeout=10) == -signal.SIGKILL
        assert running["currentMode"].startswith("1024x640")
        assert running["currentTransform"] == "normal" and running["currentScale"] == 1
        assert _display_status(fake, "card0-hdmi-a-1")["ddc"]["supported"] is True
    assert [a.available for a in heard] == [True, False]
    # Only the plug was a connector change; the retry still says a monitor was plugged.
    assert followed == [("card0-dp-1",), ("card0-dp-1",)]
    # Each follow-up is given the inventory the slice was published from, the plug in it.
    assert shown == [("card0-dp-1", "card0-hdmi-a-1")] * 2
    text = node.metrics.exposition().decode()
    assert "display_watchdog_kills_total 1.0" in text
    assert "display_connected_outputs 2.0" in text
    # Each connector by weston's name for it: the alias, else the connector's own.
    assert 'display_output_connected{output="headless"} 1.0' in unplugged
    assert 'display_output_connected{output="DP-1"} 0.0' in unplugged
    assert 'display_output_connected{output="DP-1"} 1.0' in text
    assert "display_compositor_up 0.0" in text


def test_thread_runs_the_runtime_for_a_sync_main(tmp_path: Path) -> None:
    sysfs_tree.write_tree(tmp_path, sysfs_tree.SimCard(connectors=(
        sysfs_tree.SimConnector(type="HDMI-A", edid=A),)))
    heard: list[watchdog.Availability] = []
    with FakeKube() as fake:
        fake.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
        fake.register_crd(display_crd())
        config = NodeSettings(
            name=NODE, sysfs_root=sysfs_tree.sysfs_root(tmp_path),
            dev_root=sysfs_tree.dev_root(tmp_path), watchdog_interval=0.1, probe_timeout=0.5)

        def make() -> runtime.NodeRuntime:
            node = runtime.NodeRuntime(runtime.async_client(api_server=fake.url), config,
                                       _compositor(tmp_path / "no-weston",
                                                   tmp_path / "weston.pid"),
                                       source=hotplug.QueueEvents(), buses=_buses({}))
            node.add_availability_listener(heard.append)
            return node

        thread = runtime.NodeThread(make)
        node = thread.start()
        try:
            deadline = time.monotonic() + WAIT_SECONDS
            while not all(d.get("taints") for d in _devices(fake)) or not _devices(fake):
                assert time.monotonic() < deadline, "no tainted slice: the compositor is absent"
                time.sleep(0.02)
            node.set_claims({"card0-hdmi-a-1": ClaimRef("ns", "c", "uid-1")})
            thread.submit(node.refresh()).result(timeout=WAIT_SECONDS)
            assert _display_status(fake, "card0-hdmi-a-1")["claim"]["uid"] == "uid-1"
        finally:
            thread.stop()
        assert thread.error is None
    assert [(a.available, a.state) for a in heard] == [(False, Liveness.ABSENT)]


class _Failing:
    """A runtime whose run fails at once, as one does on a fatal API error."""

    async def run(self) -> None:
        raise ValueError("403 from the API")

    async def close(self) -> None:
        """Nothing to release."""


def _still_running(thread: runtime.NodeThread) -> bool:
    try:
        thread.submit(asyncio.sleep(0))
    except runtime.NodeThreadError:
        return False
    return True


def test_stopping_a_thread_whose_runtime_failed_by_itself_is_quiet() -> None:
    heard: list[BaseException] = []
    thread = runtime.NodeThread(lambda: cast(runtime.NodeRuntime, _Failing()),
                                on_fatal=heard.append)
    thread.start()
    deadline = time.monotonic() + WAIT_SECONDS
    while _still_running(thread):
        assert time.monotonic() < deadline, "the failed runtime's thread did not end"
        time.sleep(0.01)
    thread.stop()  # its loop is closed by now: no RuntimeError
    assert isinstance(thread.error, ValueError) and heard == [thread.error]


def test_a_display_pass_follows_only_a_follow_up_that_changed_an_output(tmp_path: Path) -> None:
    """The follow-up of a connector change asks for a Display pass only when the compositor
    changed: the change itself brought one, which shows outputs that ran on unchanged."""
    answers: list[Followed] = ["unchanged", "changed", "unchanged", "unchanged"]
    due_at_call: list[bool] = []  # whether a pass was due when each follow-up started

    async def main() -> None:
        client = async_client("http://127.0.0.1:1")
        config = NodeSettings(name=NODE, sysfs_root=tmp_path / "sys", dev_root=tmp_path / "dev")
        node = runtime.NodeRuntime(client, config, _compositor(tmp_path / "none",
                                                               tmp_path / "weston.pid"))
        calls = asyncio.Queue[None]()
        loop = asyncio.get_running_loop()

        def follow(_plugged: tuple[str, ...], _cards: tuple[drm.Card, ...]) -> Followed:
            due_at_call.append(node._displays_due.is_set())
            node._displays_due.clear()
            loop.call_soon_threadsafe(calls.put_nowait, None)
            return answers[len(due_at_call) - 1]

        node.follow_connectors_with(follow)
        task = asyncio.create_task(node._follow_loop())
        try:
            # Each follow-up shows whether the one before it asked for a pass.
            for _ in answers:
                node._connectors_due.set()
                await asyncio.wait_for(calls.get(), WAIT_SECONDS)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.close()

    asyncio.run(main())
    assert due_at_call == [False, False, True, False]
