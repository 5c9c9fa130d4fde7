"""The driver as the operator wires it reads each claimed monitor's Display from the node
publisher's informer: once that has listed, a prepare sends the API no Display GET; and its
hooks reach the publisher and the claim's status.

In-process: the publisher (`start_publisher`, its watches on the fake apiserver, the real
headless weston as its compositor so prepares are not refused, and a stand-in of the layout
module's control socket that applies a claim's transform) and the driver `draplugin.operator`
builds beside it, on a simulated card of one monitor.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from draplugin import operator
from draplugin.claims import ClaimRef
from draplugin.driver.state import Driver
from draplugin.kube import LightkubeKube
from draplugin.node.displays import NotCachedError
from draplugin.node.settings import NodeSettings
from draplugin.publisher import Publisher, start_publisher
from draplugin.settings import KubeAccess, Settings
from fakekube.server import FakeKube
from libdisplay import display
from libdisplay.sim import sysfs as sysfs_tree
from libdisplay.sim.edid import EdidParams, build_edid
from tests.support import weston
from tests.support.crds import display_crd
from tests.support.fake_layout import FakeModule, serving, state_line
from tests.support.operator_process import config, make_claim

NODE = "kiosk-1"
DEVICE = "card0-hdmi-a-1"
WAIT_SECONDS = 60.0


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not done after {WAIT_SECONDS:g} s: {what}")
        time.sleep(0.02)


@pytest.fixture
def wired(tmp_path: Path) -> Iterator[tuple[FakeKube, Publisher, Driver]]:
    sysfs_tree.write_tree(tmp_path, sysfs_tree.SimCard(connectors=(
        sysfs_tree.SimConnector(type="HDMI-A", edid=build_edid(EdidParams(name="M"))),)))
    with FakeKube() as fake, weston.headless(log_dir=tmp_path) as compositor:
        fake.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
        fake.register_crd(display_crd())
        etc = tmp_path / "etc"
        etc.mkdir()
        (etc / "weston.pid").write_text(f"{compositor.process.pid}\n")
        settings = Settings(
            node=NodeSettings(name=NODE, sysfs_root=sysfs_tree.sysfs_root(tmp_path),
                              dev_root=sysfs_tree.dev_root(tmp_path),
                              aliases={"HDMI-A-1": "headless"}),
            plugin_dir=tmp_path / "plugin", registry_dir=tmp_path / "reg",
            cdi_dir=tmp_path / "cdi", weston_ini=etc / "weston.ini",
            restarts_dir=etc / "restarts", pid_file=etc / "weston.pid",
            socket_dir=compositor.runtime_dir, container_socket_dir=compositor.runtime_dir,
            socket_name=compositor.socket.name, restart_timeout_s=5.0,
            kube=KubeAccess(api_server=fake.url), delivery="shared")
        publisher = start_publisher(settings, metrics_addr="127.0.0.1:0")
        try:
            with serving(settings.layout_control, FakeModule({"headless": state_line()})):
                driver = operator._driver(settings, settings.kube.endpoint(), publisher)
                yield fake, publisher, driver
        finally:
            publisher.stop()


def test_a_prepare_reads_the_display_from_the_watch_not_the_api(
        wired: tuple[FakeKube, Publisher, Driver]) -> None:
    fake, publisher, driver = wired
    name = display.display_name(NODE, DEVICE)
    _until(lambda: publisher.runtime.displays.informer.get(name) is not None
           and publisher.runtime.compositor_available,
           "the Display listed by the watch and the compositor answering")
    # Output settings: the prepare derives every output's, reading each claimed Display.
    claim = make_claim(fake, "kiosk", devices=(DEVICE,), params=config(transform="rotate-90"),
                       pool=NODE)
    fake.requests.clear()
    prepared = driver.prepare([ClaimRef(uid=claim.uid, namespace="default", name="kiosk")])
    assert prepared[claim.uid].error == ""
    requests = [f"{r.method} {r.path}" for r in fake.request_log()]
    assert "GET /apis/resource.k8s.io/v1/namespaces/default/resourceclaims/kiosk" in requests
    assert _display_gets(requests) == [], requests


def test_the_operator_s_driver_tells_the_publisher_and_the_claim_s_status(
        wired: tuple[FakeKube, Publisher, Driver], monkeypatch: pytest.MonkeyPatch) -> None:
    """The hooks `draplugin.operator` hands the driver: the publisher hears which claim holds
    the monitor (its Display's status says so), the claim's status what it got, and the
    publisher is asked before a prepare."""
    fake, publisher, driver = wired
    _until(lambda: publisher.runtime.compositor_available, "the compositor answering")
    claim = make_claim(fake, "kiosk", devices=(DEVICE,), params=config(transform="rotate-90"),
                       pool=NODE)
    ref = ClaimRef(uid=claim.uid, namespace="default", name="kiosk")
    assert driver.prepare([ref])[claim.uid].error == ""
    name = display.display_name(NODE, DEVICE)
    _until(lambda: ((fake.get(display.API_VERSION, display.KIND, name) or {}).get("status")
                    or {}).get("claim", {}).get("uid") == claim.uid,
           "the Display's status naming the claim that holds it")
    stored = fake.get("resource.k8s.io/v1", "ResourceClaim", "kiosk", namespace="default")
    assert [d["device"] for d in (stored or {})["status"]["devices"]] == [DEVICE]
    assert driver.unprepare([ref]) == {claim.uid: ""}
    # Its watchdog's verdict, planted: a real hang takes seconds (watchdog_test has those).
    monkeypatch.setattr(publisher.runtime.watchdog, "refusal",
                        lambda *, wait: "planted by the test")
    assert "planted by the test" in driver.prepare([ref])[claim.uid].error


class _Unlisted:
    def cached(self, name: str) -> dict[str, object] | None:
        raise NotCachedError(f"Display {name}: not listed yet")


def test_before_the_watch_has_listed_a_display_is_read_from_the_api() -> None:
    with FakeKube() as fake:
        fake.register_crd(display_crd())
        name = display.display_name(NODE, DEVICE)
        fake.create({"apiVersion": display.API_VERSION, "kind": display.KIND,
                     "metadata": {"name": name}, "spec": {"mode": "1024x768"}})
        kube = LightkubeKube(KubeAccess(api_server=fake.url).endpoint(), displays=_Unlisted())
        found = kube.get_display(name)
        assert found is not None and found["spec"] == {"mode": "1024x768"}
        assert _display_gets([f"{r.method} {r.path}" for r in fake.request_log()]) == [
            f"GET /apis/{display.API_VERSION}/displays/{name}"]


def _display_gets(requests: list[str]) -> list[str]:
    return [r for r in requests if r.startswith("GET ") and "/displays" in r]
