"""state: prepare is a plan without side effects, then the writes; one claim's failure is its own;
what each prepare did is in the metrics.

The driver runs in-process on a simulated sysfs card, a dict standing in for the API and
libdisplay's simulated DDC/CI monitor, so what a refused claim did not write can be read back.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import pytest

from draplugin import testing
from draplugin.claims import ClaimRef
from draplugin.compositor import Outcome
from draplugin.driver import modes
from draplugin.driver.checkpoint import ClaimEntry
from draplugin.driver.state import Driver
from draplugin.node import ddcmap
from draplugin.node.metrics import Metrics
from draplugin.node.settings import NodeSettings
from draplugin.settings import KubeAccess, Settings
from libdisplay.compositor.layout import LayoutError, OutputState
from libdisplay.display import display_name
from libdisplay.hardware import drm, mccs
from libdisplay.hardware.ddc import DdcClient
from libdisplay.hardware.modes import Mode
from libdisplay.sim import sysfs as sysfs_tree
from libdisplay.sim.ddc import FakeClock, SimulatedMonitor
from libdisplay.sim.edid import EdidParams, build_edid

NODE = "kiosk-1"
DRIVER = "display.liken.sh"
HDMI = "card0-hdmi-a-1"
DP = "card0-dp-1"


class DictKube:
    """The Kube protocol over dicts: claims by (namespace, name), no Displays."""

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.broken: set[str] = set()
        self.displays: dict[str, dict[str, Any]] = {}

    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        if name in self.broken:
            raise RuntimeError(f"a bug reading claim {name}")
        return self.claims.get((namespace, name))

    def get_display(self, name: str) -> dict[str, Any] | None:
        return self.displays.get(name)

    def add(self, name: str, devices: Sequence[str], params: Sequence[Mapping[str, object]]
            ) -> ClaimRef:
        uid = f"uid-{name}"
        configs = [{"source": "FromClaim", "requests": [],
                    "opaque": {"driver": DRIVER, "parameters": {
                        "apiVersion": "display.liken.sh/v1alpha1", "kind": "DisplayConfig",
                        **p}}} for p in params]
        self.claims[("default", name)] = {
            "metadata": {"name": name, "namespace": "default", "uid": uid},
            "status": {"allocation": {"devices": {
                "results": [{"request": "screen", "driver": DRIVER, "pool": NODE, "device": d}
                            for d in devices],
                "config": configs}}},
        }
        return ClaimRef(uid=uid, namespace="default", name=name)


def _settings(root: Path) -> Settings:
    return Settings(
        node=NodeSettings(name=NODE, sysfs_root=sysfs_tree.sysfs_root(root),
                          dev_root=sysfs_tree.dev_root(root)),
        plugin_dir=root / "plugin", registry_dir=root / "registry",
        cdi_dir=root / "cdi", weston_ini=root / "etc" / "weston.ini",
        restarts_dir=root / "etc" / "restarts",
        pid_file=root / "etc" / "weston.pid", socket_dir=root / "run",
        container_socket_dir=root / "run", socket_name="wayland-0",
        restart_timeout_s=1.0, kube=KubeAccess(), shell="kiosk-shell.so",
        delivery="shared",
    )


def _card(root: Path) -> None:
    def monitor(kind: str, serial: int, preferred: Mode, bus: int) -> sysfs_tree.SimConnector:
        edid = build_edid(EdidParams(name=f"{kind} {serial}", serial_number=serial,
                                     preferred=preferred))
        return sysfs_tree.SimConnector(type=kind, edid=edid, i2c_bus=bus,
                                       modes=(f"{preferred.width}x{preferred.height}",))

    sysfs_tree.write_tree(root, sysfs_tree.SimCard(connectors=(
        monitor("HDMI-A", 1, Mode(1920, 1080, 60000), 3),
        monitor("DP", 2, Mode(1280, 1024, 60000), 4),
    )))


def _written(settings: Settings) -> dict[str, list[str]]:
    """Every file prepare may write, by place."""
    def names(path: Path) -> list[str]:
        return sorted(p.name for p in path.iterdir()) if path.exists() else []

    checkpoint = settings.plugin_dir / "checkpoint.json"
    claims = json.loads(checkpoint.read_text())["claims"] if checkpoint.exists() else {}
    return {"checkpoint": sorted(claims), "cdi": names(settings.cdi_dir),
            "weston.ini": names(settings.weston_ini.parent)}


def _scrape(metrics: Metrics) -> dict[str, float]:
    """Every sample of the exposition, by its name and labels as written."""
    samples = {}
    for line in metrics.exposition().decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def test_a_batch_answers_every_claim_and_a_failing_one_fails_alone(tmp_path: Path) -> None:
    _card(tmp_path)
    settings = _settings(tmp_path)
    kube = DictKube()
    first = kube.add("first", [HDMI], [{"mode": "1920x1080@60"}])
    second = kube.add("second", [DP], [{"mode": "1280x1024@60"}])
    third = kube.add("third", [DP], [{"transform": "rotate-90"}])
    fourth = kube.add("fourth", [DP], [{"mode": "1280x1024@60"}])
    kube.broken.add("second")
    # Where the fourth claim's CDI spec goes, a directory: a disk that refuses the write.
    (settings.cdi_dir / f"k8s.display.liken.sh-display_{fourth.uid}.yaml").mkdir(parents=True)
    metrics = Metrics()
    driver = Driver(settings, kube, metrics=metrics)
    answers = driver.prepare([first, second, third, fourth])
    assert answers[first.uid].error == "" and answers[third.uid].error == ""
    error = answers[second.uid].error
    assert error == f"claim {second.uid}: prepare failed: RuntimeError: a bug reading claim "\
                    "second", error
    assert answers[fourth.uid].error.startswith(f"claim {fourth.uid}: prepare failed: "), \
        answers[fourth.uid].error
    assert _written(settings)["checkpoint"] == [first.uid, fourth.uid, third.uid]
    samples = _scrape(metrics)
    assert samples["display_prepare_duration_seconds_count"] == 4
    assert samples['display_prepare_errors_total{reason="internal"}'] == 1
    assert samples['display_prepare_errors_total{reason="failure"}'] == 1


def test_prepare_errors_are_counted_by_reason(tmp_path: Path) -> None:
    _card(tmp_path)
    settings = _settings(tmp_path)
    kube = DictKube()
    bad = kube.add("bad", [HDMI], [{"mode": "640x480@60"}])
    metrics = Metrics()
    assert "field 'mode'" in Driver(settings, kube, metrics=metrics).prepare([bad])[bad.uid].error
    refusing = Driver(settings, kube, metrics=metrics,
                      publisher=testing.Refusing(lambda: "no compositor"))
    assert refusing.prepare([bad])[bad.uid].error == "no compositor"
    samples = _scrape(metrics)
    assert samples['display_prepare_errors_total{reason="claim"}'] == 1
    assert samples['display_prepare_errors_total{reason="refused"}'] == 1
    # A refused claim did no work: only the first one was timed.
    assert samples["display_prepare_duration_seconds_count"] == 1


def test_a_checkpointed_config_that_no_longer_validates_does_not_stop_recovery(
        tmp_path: Path) -> None:
    _card(tmp_path)
    settings = _settings(tmp_path)
    kube = DictKube()
    claim = kube.add("kiosk", [HDMI], [{"mode": "1920x1080@60"}])
    driver = Driver(settings, kube)
    assert driver.prepare([claim])[claim.uid].error == ""
    path = settings.plugin_dir / "checkpoint.json"
    data = json.loads(path.read_text())
    data["claims"][claim.uid]["state"] = "unpreparing"
    data["claims"][claim.uid]["config"][HDMI] = {"mode": "1920x1080@60", "scale": 9}
    path.write_text(json.dumps(data))
    Driver(settings, kube).recover()
    assert _written(settings)["checkpoint"] == []


def test_a_two_device_claim_whose_second_mode_is_not_offered_changes_nothing(
        tmp_path: Path) -> None:
    _card(tmp_path)
    settings = _settings(tmp_path)
    kube = DictKube()
    clock = FakeClock()
    monitors = {3: SimulatedMonitor(clock=clock, values={mccs.BRIGHTNESS: 50}),
                4: SimulatedMonitor(clock=clock, values={mccs.BRIGHTNESS: 50})}
    buses = ddcmap.Buses(open_bus=monitors.__getitem__,
                         client=lambda t: DdcClient(t, sleep=clock.sleep, clock=clock))
    hook = ddcmap.ClaimDdc(buses, buses=dict)
    # One config for both devices: the HDMI monitor offers 1920x1080, the DP one does not.
    claim = kube.add("wall", [HDMI, DP], [{"mode": "1920x1080@60", "brightness": 20}])
    driver = Driver(settings, kube, ddc=hook)
    before = _written(settings)
    error = driver.prepare([claim])[claim.uid].error
    assert "field 'mode'" in error and DP in error and claim.uid in error, error
    # Read back over the simulated bus: the first monitor was never touched.
    reading = buses.run(3, lambda client: client.get_vcp(mccs.BRIGHTNESS))
    assert reading.current == 50
    assert _written(settings) == before


def test_a_displays_power_wins_over_the_claims_which_is_not_sent_to_the_monitor(
        tmp_path: Path) -> None:
    """One precedence (draplugin.driver.power): where the Display states `spec.power`, a
    claim's `power` is left out of its DDC/CI settings; its other settings still apply, and
    on a Display that states none the claim's power is set as before."""
    _card(tmp_path)
    settings = _settings(tmp_path)
    kube = DictKube()
    clock = FakeClock()
    monitors = {3: SimulatedMonitor(clock=clock), 4: SimulatedMonitor(clock=clock)}
    buses = ddcmap.Buses(open_bus=monitors.__getitem__,
                         client=lambda t: DdcClient(t, sleep=clock.sleep, clock=clock))
    hook = ddcmap.ClaimDdc(buses, buses=dict)
    kube.displays[display_name(NODE, HDMI)] = {"metadata": {"generation": 1},
                                               "spec": {"power": "Off"}}
    claim = kube.add("kiosk", [HDMI, DP], [{"power": "off", "brightness": 20}])
    assert Driver(settings, kube, ddc=hook).prepare([claim])[claim.uid].error == ""
    assert monitors[3].value(mccs.POWER_MODE) == 0x01, "the Display's power wins"
    assert monitors[3].value(mccs.BRIGHTNESS) == 20
    assert monitors[4].value(mccs.POWER_MODE) == 0x04, "no Display power: the claim's"


def test_a_claims_mode_outlives_the_pod_and_leaves_the_displays_alone(tmp_path: Path) -> None:
    """The checkpoint (kubelet-plugin hostPath) holds the claim; the emptyDir dies with the
    pod, so a new operator's start derives weston.ini again from the checkpoint."""
    _card(tmp_path)
    settings = _settings(tmp_path)
    kube = DictKube()
    claim = kube.add("kiosk", [HDMI], [{"transform": "rotate-90"}])
    metrics = Metrics()
    assert Driver(settings, kube, metrics=metrics).prepare([claim])[claim.uid].error == ""
    assert "transform=rotate-90" in settings.weston_ini.read_text()
    # The roll: a new pod's emptyDir, where declare wrote weston.ini from the Displays alone.
    shutil.rmtree(settings.weston_ini.parent)
    settings.weston_ini.parent.mkdir()
    settings.weston_ini.write_text("[core]\n")
    rolled = Driver(settings, kube, metrics=metrics,
                    compositor=settings.compositor(recorder=metrics))
    rolled.recover()
    assert "transform=rotate-90" in settings.weston_ini.read_text()
    assert rolled.unprepare([claim]) == {claim.uid: ""}
    assert "transform" not in settings.weston_ini.read_text()
    # No weston runs here, so nothing was ordered.
    scraped = _scrape(metrics)
    assert [scraped[f'display_compositor_restarts_total{{reason="{r}"}}']
            for r in ("unsupported", "new-connector", "start")] == [0, 0, 0]


def test_the_claims_status_hears_each_prepare_and_release(tmp_path: Path) -> None:
    """What each prepared claim got goes to the claim's status writer, and its release takes
    it out; with no compositor running there is no state to tell, only the device."""
    _card(tmp_path)
    settings = _settings(tmp_path)
    kube = DictKube()
    claim = kube.add("kiosk", [HDMI], [{"mode": "1920x1080@60"}])
    heard: list[tuple[str, str, dict[str, object]]] = []

    class Heard:
        def applied(self, entry: ClaimEntry, states: Mapping[str, OutputState | None]) -> None:
            heard.append(("got", entry.uid, dict(states)))

        def released(self, entry: ClaimEntry) -> None:
            heard.append(("released", entry.uid, {}))

    driver = Driver(settings, kube, claim_status=Heard())
    assert driver.prepare([claim])[claim.uid].error == ""
    assert driver.prepare([claim])[claim.uid].error == ""  # once: it was prepared already
    assert driver.unprepare([claim]) == {claim.uid: ""}
    assert heard == [("got", claim.uid, {HDMI: None}), ("released", claim.uid, {})]


def test_following_the_connectors_says_whether_the_compositor_changed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The publisher runs a second Display pass only for "changed": an output changed live,
    the compositor restarted, or a change failed; "unchanged" when it ran on as it was."""
    _card(tmp_path)
    settings = _settings(tmp_path)
    driver = Driver(settings, DictKube())
    cards = drm.enumerate_cards(sysfs_root=settings.node.sysfs_root,
                                dev_root=settings.node.dev_root)
    outcomes = iter([Outcome(), Outcome(changed=("X1",)), Outcome(restarted="new-connector"),
                     Outcome(failed={"X1": LayoutError("refused")})])
    given: list[object] = []

    def apply(*_args: object, cards: object = None, **_kwargs: object) -> modes.Applied:
        given.append(cards)
        return modes.Applied(derivation=cast(Any, None), outcome=next(outcomes))

    monkeypatch.setattr(modes, "apply", apply)
    assert [driver.follow_connectors(cards=cards) for _ in range(4)] == [
        "unchanged", "changed", "changed", "changed"]
    # The outputs are derived from the inventory the publisher gave, not a second read.
    assert given == [cards] * 4

    def broken(*_args: object, **_kwargs: object) -> modes.Applied:
        raise modes.ModesError("the Display cannot be read")

    monkeypatch.setattr(modes, "apply", broken)
    assert driver.follow_connectors(cards=cards) == "failed"
