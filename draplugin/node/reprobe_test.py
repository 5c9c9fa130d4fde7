"""reprobe: when a connector change restarts the compositor, and what is published after it.

The compositor is a stand-in: `outputs` is what it shows, and its restart "probes" the
simulated card the way a new DRM master does on virtio-gpu (refreshing a stale status).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from pathlib import Path

import pytest

from draplugin import compositor as operator_compositor
from draplugin.node import hotplug, reprobe
from libdisplay.compositor import layout
from libdisplay.hardware import drm
from libdisplay.hardware.modes import Mode
from libdisplay.sim import sysfs as sysfs_tree
from libdisplay.sim.edid import EdidParams, build_edid
from tests.support.fake_layout import FakeModule, serving, stand_in_weston, state_line

A = build_edid(EdidParams(serial_number=1, name="A"))
B = build_edid(EdidParams(serial_number=2, name="B"))
WAIT_SECONDS = 30.0


class Compositor:
    """Outputs it shows; a restart runs `on_restart` (the new master's probe) first."""

    def __init__(self, outputs: set[str] | None, on_restart: Callable[[], None] = lambda: None):
        self.outputs = outputs
        self.on_restart = on_restart
        self.restarts: list[str] = []

    def read(self) -> frozenset[str] | None:
        return None if self.outputs is None else frozenset(self.outputs)

    def restart(self, reason: str, _moved: Callable[[], bool]) -> bool:
        self.restarts.append(reason)
        self.on_restart()
        return True


def _machine(root: Path) -> hotplug.Scan:
    sysfs_tree.write_tree(root, sysfs_tree.SimCard(connectors=(
        sysfs_tree.SimConnector(type="HDMI-A", edid=A),
        sysfs_tree.SimConnector(type="DP", edid=B),
    )))
    return functools.partial(drm.enumerate_cards, sysfs_root=sysfs_tree.sysfs_root(root),
                             dev_root=sysfs_tree.dev_root(root))


def _connector(root: Path, name: str) -> Path:
    return sysfs_tree.sysfs_root(root) / "class" / "drm" / name


def _stale_unplug(root: Path, name: str) -> None:
    """virtio-gpu with a master: the EDID goes at once, the status stays `connected`."""
    (_connector(root, name) / "edid").write_bytes(b"")


def _probe_unplugged(root: Path, name: str) -> None:
    (_connector(root, name) / "status").write_text("disconnected\n")


class Published:
    def __init__(self) -> None:
        self.seen: list[tuple[frozenset[str], hotplug.Changes]] = []

    async def __call__(self, cards: tuple[drm.Card, ...], changes: hotplug.Changes) -> None:
        self.seen.append((reprobe.connected_outputs(cards), changes))


def _run(scan: hotplug.Scan, compositor: Compositor, steps: Callable[[], None],
         published: Published) -> hotplug.Hotplug:
    async def main() -> hotplug.Hotplug:
        watcher = hotplug.Hotplug(hotplug.QueueEvents(), scan, published,
                                  reprobe=reprobe.Reprobe(compositor.read, compositor.restart))
        await watcher.start()
        steps()
        await watcher.rescan()
        return watcher

    return asyncio.run(asyncio.wait_for(main(), WAIT_SECONDS))


def test_a_stale_unplug_restarts_and_only_the_probed_read_is_published(tmp_path: Path) -> None:
    scan = _machine(tmp_path)
    compositor = Compositor({"HDMI-A-1", "DP-1"},
                            on_restart=lambda: _probe_unplugged(tmp_path, "card0-DP-1"))
    published = Published()
    _run(scan, compositor, lambda: _stale_unplug(tmp_path, "card0-DP-1"), published)
    assert len(compositor.restarts) == 1
    # Never the stale read (DP-1 "connected" without its EDID): the one after the probe.
    assert published.seen == [(frozenset({"HDMI-A-1"}), hotplug.Changes(removed=("card0-dp-1",)))]


def test_a_kernel_that_redetects_first_restarts_the_compositor_too(tmp_path: Path) -> None:
    scan = _machine(tmp_path)
    compositor = Compositor({"HDMI-A-1", "DP-1"})
    published = Published()

    def unplug() -> None:
        sysfs_tree.hotplug(tmp_path, "card0-DP-1", status="disconnected")

    _run(scan, compositor, unplug, published)
    assert len(compositor.restarts) == 1, "weston in a pod hears no uevent: it must restart"
    assert published.seen == [(frozenset({"HDMI-A-1"}), hotplug.Changes(removed=("card0-dp-1",)))]


def test_an_event_with_nothing_changed_restarts_nothing(tmp_path: Path) -> None:
    """The uevent a new master's probe may raise finds sysfs as it was and outputs matching."""
    scan = _machine(tmp_path)
    compositor = Compositor({"HDMI-A-1", "DP-1"})
    published = Published()
    _run(scan, compositor, lambda: None, published)
    assert compositor.restarts == [] and published.seen == []


def test_outputs_that_never_match_restart_once_per_sysfs_state(tmp_path: Path) -> None:
    scan = _machine(tmp_path)
    compositor = Compositor({"HDMI-A-1"})  # declines to light DP-1, whatever happens

    async def main() -> None:
        watcher = hotplug.Hotplug(hotplug.QueueEvents(), scan, Published(),
                                  reprobe=reprobe.Reprobe(compositor.read, compositor.restart))
        await watcher.start()
        for _ in range(3):
            await watcher.rescan()

    asyncio.run(asyncio.wait_for(main(), WAIT_SECONDS))
    assert len(compositor.restarts) == 1
    assert "sysfs has ['DP-1', 'HDMI-A-1']" in compositor.restarts[0]


def test_no_restart_while_no_compositor_answers(tmp_path: Path) -> None:
    scan = _machine(tmp_path)
    compositor = Compositor(None)
    published = Published()

    def unplug() -> None:
        sysfs_tree.hotplug(tmp_path, "card0-DP-1", status="disconnected")

    _run(scan, compositor, unplug, published)
    assert compositor.restarts == []
    assert published.seen == [(frozenset({"HDMI-A-1"}), hotplug.Changes(removed=("card0-dp-1",)))]


def test_the_restarter_without_a_compositor_pid_restarts_nothing(tmp_path: Path) -> None:
    restart = reprobe.restarter(operator_compositor.Compositor(
        socket=tmp_path / "wayland-0", pid_file=tmp_path / "weston.pid",
        restarts_dir=tmp_path / "restarts", control=None, restart_timeout=1.0))
    assert restart("test", lambda: False) is False
    assert not (tmp_path / "restarts").exists()


# ---------- with a compositor that probes (the DRM backend's layout module) ----------

class Probing(Compositor):
    """A compositor whose PROBE runs `kernel` (the master's re-detection, which brings sysfs
    up to date) and answers; its outputs stay what it drove (no restart, no udev)."""

    def __init__(self, outputs: set[str], kernel: Callable[[], None] = lambda: None):
        super().__init__(outputs)
        self.kernel = kernel
        self.probes = 0
        self.dark: list[str] = []

    def probe(self) -> tuple[layout.ConnectorProbe, ...]:
        self.probes += 1
        self.kernel()
        self.kernel = lambda: None
        return ()

    def power_off(self, output: str, _decided_at: int | None) -> bool:
        self.dark.append(output)
        return True


def _probing(scan: hotplug.Scan, compositor: Probing, published: Published
             ) -> tuple[hotplug.Hotplug, reprobe.Reprobe]:
    check = reprobe.Reprobe(compositor.read, compositor.restart, probe=compositor.probe,
                            power_off=compositor.power_off)
    return hotplug.Hotplug(hotplug.QueueEvents(), scan, published, reprobe=check), check


def _unplug_seen_only_by_the_master(root: Path, name: str) -> Callable[[], None]:
    """virtio-gpu: nothing in sysfs moves until the master probes (16 heads: not even the
    EDID), then the connector reads disconnected."""
    return lambda: sysfs_tree.hotplug(root, name, status="disconnected")


def _plug_seen_only_by_the_master(root: Path, name: str, edid: bytes) -> Callable[[], None]:
    return lambda: sysfs_tree.hotplug(root, name, status="connected", edid=edid,
                                      modes=("1920x1080",))


def test_a_replug_of_the_same_monitor_restarts_nothing(tmp_path: Path) -> None:
    """Unplug: the probe makes sysfs show it, the output is powered off, the slice drops the
    device. Plug the same monitor: published as added (the driver's modeset lights it).
    The compositor is never restarted, and the periodic resync between the two (no probe)
    leaves the dark output alone."""
    scan = _machine(tmp_path)
    compositor = Probing({"HDMI-A-1", "DP-1"})
    published = Published()

    async def main() -> None:
        watcher, check = _probing(scan, compositor, published)
        await watcher.start()
        compositor.kernel = _unplug_seen_only_by_the_master(tmp_path, "card0-DP-1")
        await watcher.rescan()
        await watcher.rescan(probe=False)
        compositor.kernel = _plug_seen_only_by_the_master(tmp_path, "card0-DP-1", B)
        await watcher.rescan()
        assert check.powered_off == 1

    asyncio.run(asyncio.wait_for(main(), WAIT_SECONDS))
    assert compositor.restarts == []
    assert compositor.dark == ["DP-1"]
    assert published.seen == [
        (frozenset({"HDMI-A-1"}), hotplug.Changes(removed=("card0-dp-1",))),
        (frozenset({"HDMI-A-1", "DP-1"}), hotplug.Changes(added=("card0-dp-1",))),
    ]


def test_a_different_monitor_on_a_driven_connector_restarts_once(tmp_path: Path) -> None:
    """weston's mode list for DP-1 is monitor B's; only a restart re-reads the head."""
    scan = _machine(tmp_path)
    compositor = Probing({"HDMI-A-1", "DP-1"})
    published = Published()

    async def main() -> None:
        watcher, _ = _probing(scan, compositor, published)
        await watcher.start()
        compositor.kernel = _unplug_seen_only_by_the_master(tmp_path, "card0-DP-1")
        await watcher.rescan()
        compositor.kernel = _plug_seen_only_by_the_master(tmp_path, "card0-DP-1", A)
        await watcher.rescan()
        await watcher.rescan()  # the uevent of the new master's probe: nothing more

    asyncio.run(asyncio.wait_for(main(), WAIT_SECONDS))
    assert len(compositor.restarts) == 1
    assert "a different monitor on DP-1" in compositor.restarts[0]
    assert published.seen[-1] == (frozenset({"HDMI-A-1", "DP-1"}),
                                  hotplug.Changes(added=("card0-dp-1",)))


def test_a_monitor_on_a_connector_weston_never_drove_restarts(tmp_path: Path) -> None:
    scan = _machine(tmp_path)
    sysfs_tree.hotplug(tmp_path, "card0-DP-1", status="disconnected")
    compositor = Probing({"HDMI-A-1"})
    published = Published()

    async def main() -> None:
        watcher, _ = _probing(scan, compositor, published)
        await watcher.start()
        compositor.kernel = _plug_seen_only_by_the_master(tmp_path, "card0-DP-1", B)
        await watcher.rescan()

    asyncio.run(asyncio.wait_for(main(), WAIT_SECONDS))
    assert compositor.probes == 1
    assert len(compositor.restarts) == 1
    assert "DP-1, which weston never drove and did not enable" in compositor.restarts[0]


def test_a_monitor_on_a_connector_weston_never_drove_joins_where_the_probe_enables_it(
        tmp_path: Path) -> None:
    """The patched DRM backend re-reads the head in PROBE and weston enables its output: no
    restart, the device is published; its unplug powers the output off; a different monitor
    there later is one weston cannot follow live (its output keeps the first one's modes)."""
    scan = _machine(tmp_path)
    sysfs_tree.hotplug(tmp_path, "card0-DP-1", status="disconnected")
    compositor = Probing({"HDMI-A-1"})
    published = Published()

    def plug_and_join(edid: bytes) -> Callable[[], None]:
        def run() -> None:
            _plug_seen_only_by_the_master(tmp_path, "card0-DP-1", edid)()
            assert compositor.outputs is not None
            compositor.outputs.add("DP-1")

        return run

    async def main() -> None:
        watcher, _ = _probing(scan, compositor, published)
        await watcher.start()
        compositor.kernel = plug_and_join(B)
        await watcher.rescan()
        assert compositor.restarts == []
        compositor.kernel = _unplug_seen_only_by_the_master(tmp_path, "card0-DP-1")
        await watcher.rescan()
        compositor.kernel = _plug_seen_only_by_the_master(tmp_path, "card0-DP-1", B)
        await watcher.rescan()
        assert compositor.restarts == [], "the same monitor back: the modeset lights it"
        compositor.kernel = _unplug_seen_only_by_the_master(tmp_path, "card0-DP-1")
        await watcher.rescan()
        compositor.kernel = _plug_seen_only_by_the_master(tmp_path, "card0-DP-1", A)
        await watcher.rescan()

    asyncio.run(asyncio.wait_for(main(), WAIT_SECONDS))
    assert compositor.dark == ["DP-1", "DP-1"]
    assert published.seen[:3] == [
        (frozenset({"HDMI-A-1", "DP-1"}), hotplug.Changes(added=("card0-dp-1",))),
        (frozenset({"HDMI-A-1"}), hotplug.Changes(removed=("card0-dp-1",))),
        (frozenset({"HDMI-A-1", "DP-1"}), hotplug.Changes(added=("card0-dp-1",))),
    ]
    assert len(compositor.restarts) == 1
    assert "a different monitor on DP-1" in compositor.restarts[0]


@pytest.mark.parametrize("answer", ["unsupported", "no-answer"])
def test_where_the_compositor_cannot_probe_sysfs_alone_decides(tmp_path: Path,
                                                              answer: str) -> None:
    """PROBE unsupported (x11, headless) or unanswered (a stock shell): the rule before PROBE,
    a restart on a change sysfs shows; an unsupported PROBE is not asked again."""
    scan = _machine(tmp_path)
    compositor = Compositor({"HDMI-A-1", "DP-1"})
    asked: list[str] = []

    def probe() -> tuple[layout.ConnectorProbe, ...] | None:
        asked.append(answer)
        if answer == "unsupported":
            return None
        raise layout.LayoutConnectError(tmp_path / "control.sock", 111)

    async def main() -> None:
        watcher = hotplug.Hotplug(
            hotplug.QueueEvents(), scan, Published(),
            reprobe=reprobe.Reprobe(compositor.read, compositor.restart, probe=probe))
        await watcher.start()
        await watcher.rescan()
        sysfs_tree.hotplug(tmp_path, "card0-DP-1", status="disconnected")
        await watcher.rescan()

    asyncio.run(asyncio.wait_for(main(), WAIT_SECONDS))
    assert len(compositor.restarts) == 1
    assert asked == ([answer] if answer == "unsupported" else [answer] * 2)


def test_a_claims_reconfigure_between_a_hotplug_read_and_its_power_off_wins(
        tmp_path: Path) -> None:
    """The follow-up reads DP-1 unplugged; before it acts, the monitor is back and a claim's
    reconfigure of DP-1 goes through the compositor's owner. The follow-up's power-off, decided
    on the older read, is dropped: DP-1 ends at the claim's settings, lit, with no restart."""
    scan = _machine(tmp_path)
    module = FakeModule({"HDMI-A-1": state_line(), "DP-1": state_line()}, probes=True)
    restarts: list[str] = []

    def restart(reason: str, _moved: Callable[[], bool]) -> bool:
        restarts.append(reason)
        return True

    with stand_in_weston(tmp_path) as weston, serving(tmp_path / "layout.sock", module):
        (tmp_path / "weston.pid").write_text(f"{weston.pid}\n")
        owner = operator_compositor.Compositor(
            socket=tmp_path / "wayland-0", pid_file=tmp_path / "weston.pid",
            restarts_dir=tmp_path / "restarts", control=tmp_path / "layout.sock",
            restart_timeout=0.3)
        follow = reprobe.Reprobe(
            lambda: frozenset({"HDMI-A-1", "DP-1"}),
            restart,
            probe=reprobe.prober(owner), power_off=reprobe.power_off(owner),
            ticket=owner.ticket)

        async def main() -> bool:
            before = scan()
            follow.adopted(before, hotplug.fingerprint(before))
            follow.begin()  # the hotplug pass begins: its read comes next
            assert await follow.probe()
            _probe_unplugged(tmp_path, "card0-DP-1")
            read = scan()
            (_connector(tmp_path, "card0-DP-1") / "status").write_text("connected\n")
            await asyncio.to_thread(owner.apply, [operator_compositor.Wanted(
                "DP-1", Mode(1280, 720, 60000))], why="claim kiosk states 1280x720@60")
            return await follow(read, hotplug.fingerprint(read), sysfs_changed=True,
                                moved=lambda: False)

        restarted = asyncio.run(asyncio.wait_for(main(), WAIT_SECONDS))
        assert weston.poll() is None
    assert not restarted and restarts == [] and follow.powered_off == 0
    state = layout.parse_output_state(f"DP-1 {module.outputs['DP-1']}")
    assert (state.width, state.height, state.powered) == (1280, 720, True)
