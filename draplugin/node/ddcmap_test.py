"""ddcmap: bus mapping, capability probes and claim settings on libdisplay's simulated monitor."""

from __future__ import annotations

import asyncio
import contextlib
import errno
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from draplugin.driver.claimconfig import ClaimConfigError, DisplayConfig
from draplugin.driver.power import DdcPower
from draplugin.node import ddcmap
from draplugin.node.displays import DdcState
from libdisplay.hardware import drm, mccs
from libdisplay.hardware.ddc import DdcClient, LinuxI2c, Transport, TransportError
from libdisplay.hardware.ddc_socket import MonitorServer, SocketI2c
from libdisplay.sim import sysfs as sysfs_tree
from libdisplay.sim.ddc import FakeClock, Feature, SimulatedMonitor
from libdisplay.sim.edid import EdidParams, build_edid

CAPS = (
    "(prot(monitor)type(lcd)model(SIM)cmds(01 02 03 0C F3)"
    "vcp(10 12 60(0F 11 12) D6(01 04))mccs_ver(2.2))"
)
A = build_edid(EdidParams(serial_number=1, name="A"))
B = build_edid(EdidParams(serial_number=2, name="B"))


def _missing(bus: int) -> Exception:
    return FileNotFoundError(f"/dev/i2c-{bus}")


def _access(monitors: dict[int, SimulatedMonitor], clock: FakeClock, *,
            missing: Callable[[int], Exception] = _missing) -> ddcmap.Buses:
    def open_bus(bus: int) -> Transport:
        if bus not in monitors:
            raise missing(bus)
        return monitors[bus]

    return ddcmap.Buses(open_bus=open_bus,
                        client=lambda t: DdcClient(t, sleep=clock.sleep, clock=clock))


def _client(monitor: SimulatedMonitor, clock: FakeClock) -> DdcClient:
    return DdcClient(monitor, sleep=clock.sleep, clock=clock)


def test_buses_map_by_sysfs_link_then_by_edid(tmp_path: Path) -> None:
    sysfs_tree.write_tree(tmp_path, sysfs_tree.SimCard(connectors=(
        sysfs_tree.SimConnector(type="HDMI-A", edid=A, i2c_bus=3),
        sysfs_tree.SimConnector(type="DP", edid=B),
    )))
    cards = drm.enumerate_cards(sysfs_root=sysfs_tree.sysfs_root(tmp_path),
                                dev_root=sysfs_tree.dev_root(tmp_path))
    clock = FakeClock()
    monitors = {3: SimulatedMonitor(edid=A, clock=clock), 7: SimulatedMonitor(edid=B, clock=clock),
                8: SimulatedMonitor(edid=build_edid(EdidParams(serial_number=9)), clock=clock)}
    found = ddcmap.map_buses(cards, [3, 7, 8, 9], access=_access(monitors, clock))
    assert found == {"card0-hdmi-a-1": 3, "card0-dp-1": 7}
    assert ddcmap.delivered_buses(sysfs_tree.dev_root(tmp_path)) == (3,)


def test_probe_reads_capabilities_and_current_values() -> None:
    clock = FakeClock()
    monitor = SimulatedMonitor(capabilities=CAPS, clock=clock, values={
        mccs.BRIGHTNESS: Feature(40, 100), mccs.CONTRAST: Feature(75, 100),
        mccs.INPUT_SOURCE: Feature(0x11, 0x12, allowed=(0x0F, 0x11, 0x12)),
        mccs.POWER_MODE: Feature(0x01, 0x05, allowed=(0x01, 0x04))})
    state = ddcmap.probe(_client(monitor, clock))
    assert state.supported and state.capabilities == CAPS
    assert state.vcp_codes == (0x10, 0x12, 0x60, 0xD6)
    assert state.inputs == ("DisplayPort-1", "HDMI-1", "HDMI-2")
    assert (state.brightness, state.contrast, state.input, state.power) == (40, 75, "HDMI-1", "on")


def test_probe_of_a_silent_monitor_says_unsupported() -> None:
    clock = FakeClock()
    monitor = SimulatedMonitor(capabilities=CAPS, clock=clock)
    monitor.faults.unsupported_reply = "null"
    monitor.faults.null_replies = 1000
    assert ddcmap.probe(_client(monitor, clock)).supported is False


def _cannot_open(bus: int) -> Exception:
    return TransportError(f"cannot open /dev/i2c-{bus}: No such file", errno=errno.ENOENT)


@pytest.mark.parametrize("missing", [_missing, _cannot_open], ids=["os-error", "transport-error"])
def test_probe_all_leaves_out_unopenable_buses(missing: Callable[[int], Exception]) -> None:
    clock = FakeClock()
    access = _access({3: SimulatedMonitor(capabilities=CAPS, clock=clock)}, clock,
                     missing=missing)
    found = asyncio.run(ddcmap.probe_all({"card0-hdmi-a-1": 3, "card0-dp-1": 4}, access=access,
                                         timeout=30))
    assert list(found) == ["card0-hdmi-a-1"] and found["card0-hdmi-a-1"].supported


@pytest.mark.parametrize(
    ("settings", "values"),
    [
        ({"brightness": 30}, {mccs.BRIGHTNESS: 30}),
        ({"contrast": 100, "input": "HDMI-1"}, {mccs.CONTRAST: 100, mccs.INPUT_SOURCE: 0x11}),
        ({"power": "off"}, {mccs.POWER_MODE: 0x04}),
    ],
    ids=["brightness", "contrast-and-input", "power-off"],
)
def test_settings_are_applied_and_read_back(settings: dict[str, Any],
                                            values: dict[int, int]) -> None:
    clock = FakeClock()
    monitor = SimulatedMonitor(clock=clock)
    ddcmap.apply_settings(_client(monitor, clock), **settings)
    assert {code: monitor.value(code) for code in values} == values


def test_brightness_is_scaled_to_the_monitors_maximum() -> None:
    clock = FakeClock()
    monitor = SimulatedMonitor(clock=clock, values={mccs.BRIGHTNESS: Feature(10, 200)})
    assert ddcmap.apply_settings(_client(monitor, clock), brightness=50) == {"brightness": 100}


@pytest.mark.parametrize(
    ("values", "settings", "setting", "message"),
    [
        ({mccs.BRIGHTNESS: 50}, {"contrast": 50}, "contrast", "does not support"),
        ({mccs.INPUT_SOURCE: Feature(0x0F, 0x12, allowed=(0x0F,))}, {"input": "HDMI-2"},
         "input", "reads back 15"),
        ({mccs.INPUT_SOURCE: 0x0F}, {"input": "Nowhere"}, "input", "not an MCCS input"),
    ],
    ids=["unsupported-feature", "value-not-taken", "unknown-input"],
)
def test_failing_setting_is_named(values: dict[int, int | Feature], settings: dict[str, Any],
                                  setting: str, message: str) -> None:
    clock = FakeClock()
    monitor = SimulatedMonitor(clock=clock, values=values)
    with pytest.raises(ddcmap.DdcSettingError, match=message) as err:
        ddcmap.apply_settings(_client(monitor, clock), **settings)
    assert err.value.setting == setting


def test_claim_hook_applies_or_fails_the_claim(tmp_path: Path) -> None:
    sysfs_tree.write_tree(tmp_path, sysfs_tree.SimCard(connectors=(
        sysfs_tree.SimConnector(type="HDMI-A", edid=A, i2c_bus=3),
        sysfs_tree.SimConnector(type="DP", edid=B),
    )))
    (card,) = drm.enumerate_cards(sysfs_root=sysfs_tree.sysfs_root(tmp_path),
                                  dev_root=sysfs_tree.dev_root(tmp_path))
    hdmi, dp = sorted(card.connectors, key=lambda c: c.type, reverse=True)
    clock = FakeClock()
    monitor = SimulatedMonitor(clock=clock, values={mccs.BRIGHTNESS: 50})
    hook = ddcmap.ClaimDdc(_access({3: monitor}, clock), buses=dict)
    plan = hook.plan(hdmi, DisplayConfig(brightness=20))
    assert plan is not None and monitor.value(mccs.BRIGHTNESS) == 50  # planning writes nothing
    hook.apply(plan)
    assert monitor.value(mccs.BRIGHTNESS) == 20
    off = hook.plan(hdmi, DisplayConfig(power="off"))
    assert off is not None
    with pytest.raises(ddcmap.DdcApplyError, match="card0-HDMI-A-1: DDC/CI power: .*not support"):
        hook.apply(off)
    with pytest.raises(ClaimConfigError, match="no i2c bus"):
        hook.plan(dp, DisplayConfig(brightness=20))
    assert hook.plan(dp, DisplayConfig()) is None  # nothing stated: no bus needed



def _hdmi_on_bus(root: Path, bus: int) -> drm.Connector:
    """The HDMI connector of a simulated card whose `ddc` link names i2c-`bus`; its /dev node
    is left for the test to put there."""
    sysfs_tree.write_tree(root, sysfs_tree.SimCard(connectors=(
        sysfs_tree.SimConnector(type="HDMI-A", edid=A, i2c_bus=bus),)))
    sysfs_tree.dev_root(root).joinpath(f"i2c-{bus}").unlink()
    (card,) = drm.enumerate_cards(sysfs_root=sysfs_tree.sysfs_root(root),
                                  dev_root=sysfs_tree.dev_root(root))
    (connector,) = card.connectors
    return connector


def test_a_bus_that_cannot_be_opened_is_not_the_claims_fault(tmp_path: Path) -> None:
    hook = ddcmap.ClaimDdc(_access({}, FakeClock(), missing=_cannot_open), buses=dict)
    plan = hook.plan(_hdmi_on_bus(tmp_path, 3), DisplayConfig(brightness=20))
    assert plan is not None
    with pytest.raises(ddcmap.DdcApplyError, match="cannot open i2c-3: cannot open /dev/i2c-3"):
        hook.apply(plan)


@pytest.mark.parametrize(
    ("node", "transport"),
    [("socket", SocketI2c), ("file", LinuxI2c)],
    ids=["socket-is-simulated", "device-is-linux-i2c"],
)
def test_the_default_opener_picks_the_transport_by_file_type(tmp_path: Path, node: str,
                                                             transport: type[object]) -> None:
    path = tmp_path / "i2c-6"
    with contextlib.ExitStack() as stack:
        if node == "socket":
            stack.enter_context(MonitorServer(path, SimulatedMonitor()))
        else:
            path.touch()  # what libdisplay.sim.sysfs leaves for a device node
        opened = ddcmap.open_i2c(tmp_path, 6)
        assert isinstance(opened, SocketI2c | LinuxI2c)
        stack.callback(opened.close)
        assert type(opened) is transport


def test_the_default_opener_names_a_missing_node_under_the_dev_root(tmp_path: Path) -> None:
    with pytest.raises(TransportError, match=f"cannot open {tmp_path}/i2c-6") as caught:
        ddcmap.Buses(dev_root=tmp_path).run(6, lambda client: client.get_vcp(mccs.BRIGHTNESS))
    assert caught.value.errno == errno.ENOENT


def test_a_claim_sets_a_monitor_served_on_the_dev_roots_socket(tmp_path: Path) -> None:
    connector = _hdmi_on_bus(tmp_path, 3)
    monitor = SimulatedMonitor(capabilities=CAPS, values={mccs.BRIGHTNESS: 50})
    dev = sysfs_tree.dev_root(tmp_path)
    with MonitorServer(dev / "i2c-3", monitor):
        assert ddcmap.delivered_buses(dev) == (3,)
        hook = ddcmap.ClaimDdc(ddcmap.Buses(dev_root=dev), buses=dict)
        plan = hook.plan(connector, DisplayConfig(brightness=40))
        assert plan is not None
        hook.apply(plan)
    assert monitor.value(mccs.BRIGHTNESS) == 40


# --- a Display's power (draplugin.driver.power) ----------------------------------------


def _power_hook(monitor: SimulatedMonitor, clock: FakeClock, *, caps: str | None = CAPS,
                supported: bool = True) -> ddcmap.ClaimDdc:
    state = DdcState(supported=supported, capabilities=caps)
    return ddcmap.ClaimDdc(_access({3: monitor}, clock), buses=lambda: {"card0-hdmi-a-1": 3},
                           states=lambda: {"card0-hdmi-a-1": state})


def test_display_power_is_set_and_read_back_on_vcp_d6() -> None:
    clock = FakeClock()
    monitor = SimulatedMonitor(capabilities=CAPS, clock=clock, values={
        mccs.POWER_MODE: Feature(0x01, 0x05, allowed=(0x01, 0x04))})
    hook = _power_hook(monitor, clock)
    assert hook.set_power("card0-hdmi-a-1", "Off") == DdcPower("applied", "VCP 0xD6 reads 0x04")
    assert monitor.value(mccs.POWER_MODE) == 0x04
    assert hook.set_power("card0-hdmi-a-1", "On").result == "applied"
    assert monitor.value(mccs.POWER_MODE) == 0x01


def test_display_power_without_ddc_or_without_the_value_is_none_and_says_why() -> None:
    clock = FakeClock()
    monitor = SimulatedMonitor(capabilities=CAPS, clock=clock)
    silent = _power_hook(monitor, clock, supported=False).set_power("card0-hdmi-a-1", "Off")
    assert silent == DdcPower("none", "the monitor: it does not answer DDC/CI")
    # CAPS lists D6(01 04): no standby (02).
    standby = _power_hook(monitor, clock).set_power("card0-hdmi-a-1", "Standby")
    assert standby == DdcPower(
        "none", "the monitor's power feature has no Standby (0x02; it lists 01 04)")
    unknown = ddcmap.ClaimDdc(_access({}, clock), buses=dict).set_power("card0-dp-1", "Off")
    assert unknown == DdcPower("none", "the monitor: no i2c bus is known for it")
    assert monitor.value(mccs.POWER_MODE) == 0x01  # nothing was written


def test_display_power_a_monitor_that_does_not_take_it_fails_naming_the_feature() -> None:
    clock = FakeClock()
    # It lists D6(01 04) but refuses 04: the read back says so.
    monitor = SimulatedMonitor(capabilities=CAPS, clock=clock, values={
        mccs.POWER_MODE: Feature(0x01, 0x05, allowed=(0x01,))})
    done = _power_hook(monitor, clock).set_power("card0-hdmi-a-1", "Off")
    assert done.result == "failed" and done.detail.startswith("VCP 0xD6 ")
    assert monitor.value(mccs.POWER_MODE) == 0x01
