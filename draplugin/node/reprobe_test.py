"""reprobe: when a connector change restarts the compositor, and what is published after it.

The compositor is a stand-in: `outputs` is what it shows, and its restart "probes" the
simulated card the way a new DRM master does on virtio-gpu (refreshing a stale status).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from pathlib import Path

from draplugin import compositor as operator_compositor
from draplugin.node import hotplug, reprobe
from libdisplay.hardware import drm
from libdisplay.sim import sysfs as sysfs_tree
from libdisplay.sim.edid import EdidParams, build_edid

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
