"""runtime: what the node publisher asks of the API once its watches have listed.

The whole runtime on the fake apiserver with a simulated card and no compositor (its devices
tainted, which changes no read): a hotplug and a claim write what changed and read no Display;
idle resyncs of sysfs and of the slice send nothing at all.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from draplugin.claims import ClaimRef
from draplugin.compositor import Compositor
from draplugin.node import hotplug, runtime, slices
from draplugin.node.settings import NodeSettings
from draplugin.testing import until
from fakekube.client import async_client
from fakekube.server import FakeKube
from libdisplay import display
from libdisplay.sim import sysfs as sysfs_tree
from libdisplay.sim.edid import EdidParams, build_edid
from tests.support.crds import display_crd

NODE = "kiosk-1"
WAIT_SECONDS = 60.0
IDLE_RESYNCS = 20
A = build_edid(EdidParams(serial_number=1, name="A"))
B = build_edid(EdidParams(serial_number=2, name="B"))


def _status(fake: FakeKube, device: str) -> dict[str, Any]:
    found = fake.get(display.API_VERSION, display.KIND, display.display_name(NODE, device))
    return dict((found or {}).get("status") or {})


def _devices(fake: FakeKube) -> list[dict[str, Any]]:
    found = fake.get("resource.k8s.io/v1", "ResourceSlice", slices.slice_name(NODE)) or {}
    return list((found.get("spec") or {}).get("devices") or [])


def _requests(fake: FakeKube) -> list[str]:
    """method, path and answer of each request since the log was cleared."""
    return [f"{r.method} {r.path} {r.status}" for r in fake.request_log()]


def _display_gets(requests: list[str]) -> list[str]:
    return [r for r in requests if r.startswith("GET ") and "/displays" in r]


def test_a_hotplug_and_a_claim_read_no_display_and_idle_resyncs_send_nothing(
        tmp_path: Path) -> None:
    sysfs_tree.write_tree(tmp_path, sysfs_tree.SimCard(connectors=(
        sysfs_tree.SimConnector(type="HDMI-A", edid=A),
        sysfs_tree.SimConnector(type="DP", status="disconnected"),
    )))
    config = NodeSettings(
        name=NODE, sysfs_root=sysfs_tree.sysfs_root(tmp_path),
        dev_root=sysfs_tree.dev_root(tmp_path), hotplug_resync=0.02, slice_resync=0.02,
        watchdog_interval=10.0, probe_timeout=0.2)
    # No weston: the compositor's socket is absent.
    compositor = Compositor(socket=tmp_path / "no-weston", pid_file=tmp_path / "weston.pid",
                            restarts_dir=tmp_path / "restarts", control=None,
                            restart_timeout=5.0, probe_timeout=0.2)
    source = hotplug.QueueEvents()
    with FakeKube() as fake:
        fake.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
        fake.register_crd(display_crd())

        async def main() -> tuple[list[str], list[str], list[str]]:
            client = async_client(fake.url)
            node = runtime.NodeRuntime(client, config, compositor, source=source)
            task = asyncio.create_task(node.run())
            try:
                await until(lambda: node.displays.informer.synced.is_set()
                             and node.publisher.informer.synced.is_set()
                             and all("conditions" in _status(fake, d)
                                     for d in ("card0-hdmi-a-1", "card0-dp-1")),
                             "the watches listed and both Displays made")
                await until(lambda: all(d.get("taints") for d in _devices(fake))
                             and fake.open_watches >= 2, "the devices tainted, watches open")
                fake.requests.clear()
                sysfs_tree.hotplug(tmp_path, "card0-DP-1", status="connected", edid=B)
                source.inject()
                await until(lambda: len(_devices(fake)) == 2
                             and _status(fake, "card0-dp-1").get("connected") is True,
                             "the plug in the slice and the Display")
                plugged = _requests(fake)
                fake.requests.clear()
                node.set_claims({"card0-hdmi-a-1": ClaimRef("ns", "screen", "u1")})
                await node.refresh()
                claimed = _requests(fake)
                fake.requests.clear()
                assert node.hotplug is not None
                rescans = node.hotplug.rescans
                await until(lambda: node.hotplug is not None
                             and node.hotplug.rescans >= rescans + IDLE_RESYNCS,
                             f"{IDLE_RESYNCS} idle resyncs of sysfs")
                return plugged, claimed, _requests(fake)
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                await client.close()

        plugged, claimed, idle = asyncio.run(main())
    displays_path = f"/apis/{display.API_VERSION}/displays/{NODE}"
    dp_status = f"PATCH {displays_path}.card0-dp-1/status 200"
    hdmi_status = f"PATCH {displays_path}.card0-hdmi-a-1/status 200"
    assert _display_gets(plugged) == []
    assert dp_status in plugged
    assert claimed == [hdmi_status]
    assert idle == []
