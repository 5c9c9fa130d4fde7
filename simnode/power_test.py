"""A Display's power on the simulated node: `simnode display DEVICE --power Off|On`, as a person
(or a schedule) sets `spec.power`.

One node of three monitors, card0-dp-2's with its DDC/CI off (`up --no-ddc`). The monitors'
power feature (VCP 0xD6) is read back over their own i2c sockets, as ddcutil beside the
operator would. The simulated node's compositor is weston's x11 backend, which has no DPMS:
its KMS step is `Unsupported` here (the layout module says so, and nothing restarts), so the
DDC/CI monitor is powered by DDC/CI alone and the one without DDC/CI is not powered at all,
which status and SpecApplied say. KMS on a real card is the VM tier's (tests/vm).
The claimed output's tenant (simnode's demo client) stays connected through Off and On.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from libdisplay import display
from libdisplay.hardware import mccs
from libdisplay.hardware.ddc import DdcClient
from libdisplay.hardware.ddc_socket import SocketI2c
from simnode.cli.state import alive
from simnode.cluster.api import Access, Api
from tests.support.simnode_up import Sim, running

WAIT_S = 60.0
NO_DDC = "card0-dp-2"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    with running(tmp_path_factory.mktemp("power"), f"--no-ddc={NO_DDC}") as node:
        yield node


def _display(sim: Sim, device: str) -> dict[str, Any]:
    state = sim.state()
    kubeconfig = state.get("kubeconfig")
    api = Api(Access.from_kubeconfig(Path(kubeconfig), context=state.get("context"))
              if kubeconfig else Access(server=state["api_url"]))
    name = f"{state['node_name']}.{device}"
    (found,) = (o for o in api.objects(display.API_VERSION, display.KIND)
                if o["metadata"]["name"] == name)
    return dict(found)


def _acted_on(sim: Sim, device: str, state: str) -> dict[str, Any] | None:
    """The Display once the operator reported its current generation with `state` applied."""
    found = _display(sim, device)
    status = found.get("status") or {}
    if (status.get("observedGeneration") == found["metadata"]["generation"]
            and (status.get("power") or {}).get("state") == state):
        return found
    return None


def _set(sim: Sim, device: str, power: str) -> dict[str, Any]:
    sim.run("display", device, f"--power={power}")
    sim.wait(lambda: _acted_on(sim, device, power) is not None, timeout=WAIT_S,
             what=f"{device}: spec.power {power} acted on")
    found = _acted_on(sim, device, power)
    assert found is not None
    return found


def _spec_applied(found: dict[str, Any]) -> dict[str, Any]:
    (condition,) = (c for c in found["status"]["conditions"] if c["type"] == "SpecApplied")
    return dict(condition)


def _power_feature(path: Path) -> int:
    with SocketI2c(path) as bus:
        return DdcClient(bus).get_vcp(mccs.POWER_MODE).current & 0xFF


def _metric(sim: Sim, state: str) -> float:
    with urllib.request.urlopen(sim.state()["metrics_url"], timeout=10) as answer:
        text = answer.read().decode()
    line = f'display_outputs_by_power_state{{state="{state}"}} '
    (value,) = (ln.removeprefix(line) for ln in text.splitlines() if ln.startswith(line))
    return float(value)


def _ddc_probed(sim: Sim) -> bool:
    ddc = {name: d["attributes"].get("ddc", {}).get("bool") for name, d in sim.devices().items()}
    return ddc == {"card0-hdmi-a-1": True, "card0-dp-1": True, NO_DDC: False}


def test_a_ddc_monitor_is_powered_off_and_on_and_its_tenant_stays(sim: Sim) -> None:
    sim.wait(lambda: _ddc_probed(sim), timeout=WAIT_S, what="DDC/CI probed on every monitor")
    bus = sim.i2c("card0-HDMI-A-1")
    uid = sim.run("claim", "card0-hdmi-a-1").split()[-1]
    (record,) = (r for r in sim.layout.clients.glob("*.json") if uid in r.read_text())
    client = int(json.loads(record.read_text())["client_pid"])
    assert _power_feature(bus) == 0x01

    off = _set(sim, "card0-hdmi-a-1", "Off")
    assert _power_feature(bus) == 0x04, "the monitor reads back Off on its own bus"
    assert _power_feature(sim.i2c("card0-DP-1")) == 0x01, "only that monitor"
    assert off["status"]["power"] == {"state": "Off", "appliedBy": ["DDC/CI"],
                                      "source": "Display", "kms": "Unsupported",
                                      "ddc": "Applied"}
    condition = _spec_applied(off)
    assert (condition["status"], condition["reason"]) == ("True", "Applied")
    assert "power Off through DDC/CI (KMS unsupported: X1 cannot be powered off" in \
        condition["message"]
    assert _metric(sim, "Off") == 1.0
    assert alive(client), "the tenant keeps its connection"

    on = _set(sim, "card0-hdmi-a-1", "On")
    assert _power_feature(bus) == 0x01
    assert on["status"]["power"]["appliedBy"] == ["KMS", "DDC/CI"]
    assert _spec_applied(on)["status"] == "True"
    assert _metric(sim, "Off") == 0.0
    assert alive(client), "the tenant keeps its connection"
    assert "power: On by KMS, DDC/CI" in sim.run("status")
    sim.run("release", uid)


def test_a_monitor_without_ddc_says_what_powered_it_and_what_could_not(sim: Sim) -> None:
    sim.wait(lambda: _ddc_probed(sim), timeout=WAIT_S, what="DDC/CI probed on every monitor")
    off = _set(sim, NO_DDC, "Off")
    assert off["status"]["power"] == {"state": "Off", "appliedBy": [], "source": "Display",
                                      "kms": "Unsupported", "ddc": "Unsupported"}
    condition = _spec_applied(off)
    assert (condition["status"], condition["reason"]) == ("False", "PowerNotApplied")
    assert condition["message"] == (
        "power Off not applied (KMS unsupported: X3 cannot be powered off (the backend has no "
        "DPMS); DDC/CI none: the monitor: it does not answer DDC/CI)")
    assert _metric(sim, "Off") == 0.0, "an output nothing powered off counts as On"

    on = _set(sim, NO_DDC, "On")
    assert on["status"]["power"]["appliedBy"] == ["KMS"]
    condition = _spec_applied(on)
    assert (condition["status"], condition["reason"]) == ("True", "Applied")
    assert condition["message"].endswith(
        "power On through KMS (DDC/CI none: the monitor: it does not answer DDC/CI)")
