"""DDC/CI for the node's monitors: which i2c bus is whose, what each monitor can do, claim settings.

Buses: a connector's sysfs `ddc` link (or DP AUX child) names its bus; a delivered `/dev/i2c-N`
that no connector names is matched by reading the EDID at 0x50 and comparing it with the
connectors' sysfs EDIDs. Capabilities are probed in threads, each bounded in time, so a silent
monitor never delays the slice. `apply_settings` sets a claim's brightness, contrast, input and
power and reads each back; `ClaimDdc` is part 1's `DdcHook` (`plan`, then `apply`) and the
power step of a Display's `spec.power` (`set_power`, `draplugin.driver.power`).

One `DdcClient` per bus, used under that bus's lock: the client tracks the quiet time a display
needs between commands, and a prepare and a background probe may reach the same bus.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import re
import stat
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Final, TypeVar

from draplugin.driver.claimconfig import ClaimConfigError, DdcPlan, DisplayConfig, Power
from draplugin.driver.power import DDC_VALUES, DdcPower
from draplugin.node.displays import DdcState
from draplugin.node.displays import Power as StatusPower
from libdisplay.display import DisplayPower
from libdisplay.hardware import mccs
from libdisplay.hardware.ddc import (
    DdcClient,
    DdcError,
    LinuxI2c,
    Transport,
    UnsupportedVcpError,
    VcpReading,
)
from libdisplay.hardware.drm import Card, Connector

log = logging.getLogger(__name__)

T = TypeVar("T")
POWER_VALUES: Final[Mapping[Power, int]] = {"on": 0x01, "standby": 0x02, "suspend": 0x03,
                                            "off": 0x04}
# The Display status has three power states (its CRD's enum): suspend reads as standby and a
# hard off (0x05, the power button) as off.
_STATUS_POWER: Final[Mapping[int, StatusPower]] = {0x01: "on", 0x02: "standby", 0x03: "standby",
                                                   0x04: "off", 0x05: "off"}
_INPUT_CODES: Final = {name: code for code, name in mccs.INPUT_SOURCES.items()}
_I2C_NODE = re.compile(r"^i2c-(?P<bus>[0-9]+)$")

OpenBus = Callable[[int], Transport]
ClientFactory = Callable[[Transport], DdcClient]


class DdcMapError(Exception):
    """Base of every error this module raises."""


class DdcSettingError(DdcMapError):
    """A claim's setting the monitor does not support or did not take; names the setting."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"{setting}: {message}")
        self.setting = setting


def delivered_buses(dev_root: Path) -> tuple[int, ...]:
    """The `/dev/i2c-N` nodes present (the ones the claim delivered), by number."""
    try:
        names = [p.name for p in dev_root.iterdir()]
    except FileNotFoundError:
        return ()
    return tuple(sorted(int(m["bus"]) for m in map(_I2C_NODE.match, names) if m))


def open_i2c(dev_root: Path, bus: int) -> Transport:
    """The transport for `dev_root/i2c-N`. A unix socket there is a simulated monitor: the
    simulated node serves one per bus (`libdisplay.hardware.ddc_socket`) where it has no i2c-dev; a
    real
    node only ever has the character device."""
    path = dev_root / f"i2c-{bus}"
    try:
        is_socket = stat.S_ISSOCK(path.stat().st_mode)
    except OSError:
        is_socket = False  # LinuxI2c's open names the path and the errno
    if not is_socket:
        return LinuxI2c(path)
    # Only here: the operator on a real node never loads the simulation's transport.
    from libdisplay.hardware.ddc_socket import SocketI2c

    return SocketI2c(path)


class Buses:
    """One DdcClient per bus, opened on first use and used under the bus's lock. Buses are the
    `i2c-N` nodes under `dev_root` unless `open_bus` opens them otherwise."""

    def __init__(self, *, dev_root: Path = Path("/dev"), open_bus: OpenBus | None = None,
                 client: ClientFactory = DdcClient) -> None:
        self._open_bus = open_bus or functools.partial(open_i2c, dev_root)
        self._client = client
        self._clients: dict[int, DdcClient] = {}
        self._locks: dict[int, threading.Lock] = {}
        self._guard = threading.Lock()

    def run(self, bus: int, operation: Callable[[DdcClient], T]) -> T:
        """`operation(client)` on bus `bus`, alone on that bus. A bus that cannot be opened
        raises the opener's error: TransportError from LinuxI2c and SocketI2c, or OSError."""
        with self._guard:
            lock = self._locks.setdefault(bus, threading.Lock())
        with lock:
            client = self._clients.get(bus)
            if client is None:
                client = self._clients[bus] = self._client(self._open_bus(bus))
            return operation(client)


def map_buses(cards: Iterable[Card], buses: Iterable[int], *,
              access: Buses) -> dict[str, int]:
    """Connected device name → bus: sysfs links first, then EDIDs read at 0x50."""
    connected = [c for card in cards for c in card.connectors if c.connected]
    found = {c.device_name: c.i2c_bus for c in connected if c.i2c_bus is not None}
    by_edid = {c.edid[:128]: c.device_name for c in connected
               if c.edid and c.device_name not in found}
    for bus in buses:
        if not by_edid or bus in found.values():
            continue
        try:
            edid = access.run(bus, lambda client: client.read_edid())
        except (DdcError, OSError) as err:
            log.debug("i2c-%d: no EDID at 0x50: %s", bus, err)
            continue
        device = by_edid.pop(edid[:128], None)
        if device is not None:
            found[device] = bus
    return found


def probe(client: DdcClient) -> DdcState:
    """Capabilities and current values; `supported=False` when the monitor does not answer."""
    try:
        text = client.capabilities()
    except DdcError as err:
        log.info("no DDC/CI answer: %s", err)
        return DdcState(supported=False)
    caps = mccs.parse_capabilities(text)
    inputs = caps.feature(mccs.INPUT_SOURCE)
    return DdcState(
        supported=True,
        capabilities=text,
        vcp_codes=tuple(f.code for f in caps.vcp),
        inputs=tuple(_input_name(v) for v in (inputs.allowed if inputs else ())),
        brightness=_percent(client, mccs.BRIGHTNESS),
        contrast=_percent(client, mccs.CONTRAST),
        input=_current(client, mccs.INPUT_SOURCE, _input_name),
        power=_current(client, mccs.POWER_MODE, _power_name),
    )


async def probe_all(devices: Mapping[str, int], *, access: Buses,
                    timeout: float = 10.0) -> dict[str, DdcState]:
    """`probe` every device's bus in a thread; a bus that takes longer than `timeout` is left
    out (its thread finishes on its own) so the caller is never held up longer."""

    async def one(bus: int) -> DdcState:
        return await asyncio.to_thread(access.run, bus, probe)

    tasks = {device: asyncio.create_task(asyncio.wait_for(one(bus), timeout))
             for device, bus in devices.items()}
    found: dict[str, DdcState] = {}
    for device, task in tasks.items():
        try:
            found[device] = await task
        except (TimeoutError, OSError, DdcError) as err:
            log.warning("DDC/CI probe of %s gave no result: %s", device, err or "timed out")
    return found


def apply_settings(
    client: DdcClient,
    *,
    brightness: int | None = None,
    contrast: int | None = None,
    input: str | None = None,
    power: Power | None = None,
) -> dict[str, int]:
    """Set each stated setting and read it back; the raw values read. DdcSettingError names
    the first setting the monitor does not support or did not take."""
    done: dict[str, int] = {}
    for setting, code, percent in (("brightness", mccs.BRIGHTNESS, brightness),
                                   ("contrast", mccs.CONTRAST, contrast)):
        if percent is not None:
            maximum = _read(client, setting, code).maximum
            done[setting] = _set(client, setting, code, round(percent * maximum / 100))
    if input is not None:
        source = _INPUT_CODES.get(input)
        if source is None:
            raise DdcSettingError("input", f"{input!r} is not an MCCS input source name")
        _read(client, "input", mccs.INPUT_SOURCE)
        done["input"] = _set(client, "input", mccs.INPUT_SOURCE, source)
    if power is not None:
        _read(client, "power", mccs.POWER_MODE)
        done["power"] = _set(client, "power", mccs.POWER_MODE, POWER_VALUES[power])
    return done


def _read(client: DdcClient, setting: str, code: int) -> VcpReading:
    try:
        return client.get_vcp(code)
    except UnsupportedVcpError as err:
        raise DdcSettingError(setting, f"the monitor does not support it ({err})") from err
    except DdcError as err:
        raise DdcSettingError(setting, f"the monitor did not answer: {err}") from err


def _set(client: DdcClient, setting: str, code: int, value: int) -> int:
    try:
        client.set_vcp(code, value)
        got = client.get_vcp(code).current
    except DdcError as err:
        raise DdcSettingError(setting, f"setting 0x{code:02X} to {value} failed: {err}") from err
    # Non-continuous features keep their value in the low byte; the high byte is the monitor's.
    read = got & 0xFF if code in (mccs.INPUT_SOURCE, mccs.POWER_MODE) else got
    if read != value:
        raise DdcSettingError(setting, f"set to {value}, the monitor reads back {read}")
    return read


class DdcApplyError(DdcMapError):
    """A planned setting could not be applied: the bus or the monitor failed, not the claim."""


class ClaimDdc:
    """The claim driver's `DdcHook` (draplugin.driver.state): checks a claim's DDC/CI settings
    (`plan`, no I/O) and applies them once the claim is checkpointed (`apply`)."""

    def __init__(self, access: Buses, *, buses: Callable[[], Mapping[str, int]],
                 on_applied: Callable[[str, DisplayConfig], None] | None = None,
                 states: Callable[[], Mapping[str, DdcState]] | None = None) -> None:
        self._access = access
        self._buses = buses
        self._on_applied = on_applied
        # What the probes found per device: whether the monitor answers, its capabilities.
        self._states = states or dict

    def plan(self, connector: Connector, config: DisplayConfig) -> DdcPlan | None:
        """The settings to apply, or None when the config states none; ClaimConfigError (the
        claim's error) when they cannot apply here."""
        if not config.ddc_settings:
            return None
        bus = self._buses().get(connector.device_name, connector.i2c_bus)
        if bus is None:
            raise ClaimConfigError(
                f"{connector.name}: DDC/CI settings ({', '.join(config.ddc_settings)}) "
                "cannot be applied: no i2c bus was delivered for this monitor")
        if config.input is not None and config.input not in _INPUT_CODES:
            raise ClaimConfigError(f"{connector.name}: DDC/CI input {config.input!r} is not an "
                                   "MCCS input source name")
        return DdcPlan(device=connector.device_name, connector=connector.name, bus=bus,
                       config=config)

    def apply(self, plan: DdcPlan) -> None:
        """Set and read back each setting; DdcApplyError names the bus or the setting."""
        config = plan.config
        try:
            self._access.run(plan.bus, lambda client: apply_settings(
                client, brightness=config.brightness, contrast=config.contrast,
                input=config.input, power=config.power))
        except DdcSettingError as err:
            raise DdcApplyError(f"{plan.connector}: DDC/CI {err}") from err
        except (DdcError, OSError) as err:
            raise DdcApplyError(f"{plan.connector}: cannot open i2c-{plan.bus}: {err}") from err
        if self._on_applied is not None:
            self._on_applied(plan.device, config)


    def set_power(self, device: str, state: DisplayPower) -> DdcPower:
        """A Display's power on its monitor's VCP 0xD6, set and read back (not written when
        it reads so already). `none` where the monitor does not speak DDC/CI (no bus, no
        answer to the probe) or its capabilities list the power feature without this value;
        `failed` with the error where it should have worked."""
        bus = self._buses().get(device)
        found = self._states().get(device)
        if bus is None or found is None or not found.supported:
            why = ("no i2c bus is known for it" if bus is None
                   else "its DDC/CI has not been probed yet" if found is None
                   else "it does not answer DDC/CI")
            return DdcPower("none", f"the monitor: {why}")
        value = DDC_VALUES[state]
        if found.capabilities is not None:
            feature = mccs.parse_capabilities(found.capabilities).feature(mccs.POWER_MODE)
            if feature is None:
                return DdcPower("none", "the monitor lists no power feature (VCP 0xD6)")
            if feature.allowed and value not in feature.allowed:
                listed = " ".join(f"{v:02X}" for v in feature.allowed)
                return DdcPower("none", f"the monitor's power feature has no {state} "
                                        f"(0x{value:02X}; it lists {listed})")

        def set_and_read(client: DdcClient) -> int:
            if _read(client, "power", mccs.POWER_MODE).current & 0xFF == value:
                return value
            return _set(client, "power", mccs.POWER_MODE, value)

        try:
            self._access.run(bus, set_and_read)
        except DdcSettingError as err:
            return DdcPower("failed", f"VCP 0xD6 {err.args[0].partition(': ')[2]}")
        except (DdcError, OSError) as err:
            return DdcPower("failed", f"cannot open i2c-{bus}: {err}")
        if self._on_applied is not None:
            self._on_applied(device, DisplayConfig(power=_CLAIM_POWER[state]))
        return DdcPower("applied", f"VCP 0xD6 reads 0x{value:02X}")


# A Display's state in the claim's words, for the observed DDC/CI state.
_CLAIM_POWER: Final[Mapping[DisplayPower, Power]] = {"On": "on", "Standby": "standby",
                                                     "Off": "off"}


def applied(state: DdcState, config: DisplayConfig) -> DdcState:
    """The monitor's state once `config`'s settings were applied and read back."""
    power = _STATUS_POWER[POWER_VALUES[config.power]] if config.power else state.power
    return dataclasses.replace(
        state,
        brightness=state.brightness if config.brightness is None else config.brightness,
        contrast=state.contrast if config.contrast is None else config.contrast,
        input=config.input or state.input,
        power=power,
    )


def _percent(client: DdcClient, code: int) -> int | None:
    try:
        reading = client.get_vcp(code)
    except DdcError:
        return None
    return round(reading.current * 100 / reading.maximum) if reading.maximum else None


def _current(client: DdcClient, code: int, name: Callable[[int], T | None]) -> T | None:
    try:
        return name(client.get_vcp(code).current & 0xFF)
    except DdcError:
        return None


def _input_name(value: int) -> str:
    return mccs.INPUT_SOURCES.get(value, f"0x{value:02X}")


def _power_name(value: int) -> StatusPower | None:
    return _STATUS_POWER.get(value)
