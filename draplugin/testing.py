"""Tests only: the settings of an operator on a simulated card in a temporary directory, and
a claim's checkpoint entry, shared by draplugin's tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from draplugin.driver import modes
from draplugin.driver.checkpoint import Checkpoint, ClaimEntry, PreparedDevice
from draplugin.node.settings import NodeSettings
from draplugin.settings import KubeAccess, Settings
from libdisplay.hardware.modes import Mode
from libdisplay.sim.edid import EdidParams, build_edid
from libdisplay.sim.sysfs import SimCard, SimConnector, dev_root, sysfs_root, write_tree

NODE = "n1"

ENTRY = ClaimEntry(
    uid="3f1c-uid",
    name="kiosk",
    namespace="shop",
    state="started",
    devices=(PreparedDevice(request="screen", pool="n1", device="card0-dp-1", output="DP-1",
                            cdi_ids=("k8s.display.liken.sh/display=3f1c-uid-card0-dp-1",)),),
    config={"card0-dp-1": {"mode": "1280x720@60"}},
)


def settings(root: Path, *, restart_timeout_s: float = 1.0) -> Settings:
    """An operator's settings under `root`, on a simulated card with one HDMI monitor (1080p
    preferred, 720p, 1024x768)."""
    edid = build_edid(EdidParams(name="M", serial_number=1, preferred=Mode(1920, 1080, 60000),
                                 detailed=(Mode(1280, 720, 60000), Mode(1024, 768, 60000))))
    write_tree(root, SimCard(connectors=(
        SimConnector(type="HDMI-A", index=1, edid=edid,
                     modes=("1920x1080", "1280x720", "1024x768")),)))
    etc = root / "etc"
    return Settings(
        node=NodeSettings(name=NODE, sysfs_root=sysfs_root(root), dev_root=dev_root(root)),
        plugin_dir=root / "plugin", registry_dir=root / "reg",
        cdi_dir=root / "cdi", weston_ini=etc / "weston.ini",
        restarts_dir=etc / "restarts", pid_file=etc / "weston.pid", socket_dir=root / "run",
        container_socket_dir=root / "run", socket_name="wayland-0",
        restart_timeout_s=restart_timeout_s, kube=KubeAccess(),
    )


WAIT_SECONDS = 60.0
"""The longest a test waits for the publisher's loop to reach a state."""


async def until(check: Callable[[], bool], what: str) -> None:
    """Poll `check` on the running loop until it holds; AssertionError naming `what` after
    WAIT_SECONDS."""
    try:
        async with asyncio.timeout(WAIT_SECONDS):
            while not check():
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"not done after {WAIT_SECONDS:g} s: {what}") from None


class Refusing:
    """A node publisher (the driver's `NodePublisher`) that only judges: its refusal is what
    `refuse` says now; it hears the claims and the derivations and keeps nothing."""

    def __init__(self, refuse: Callable[[], str | None]) -> None:
        self._refuse = refuse

    def refusal(self) -> str | None:
        return self._refuse()

    def claims_changed(self, checkpoint: Checkpoint) -> None:
        pass

    def specs_applied(self, applied: modes.Applied, checkpoint: Checkpoint) -> None:
        pass
