"""derive_ini: the one derivation of weston.ini that declare and the operator both call."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from libdisplay.compositor.outputs import derive_ini
from libdisplay.compositor.weston import WestonIni
from libdisplay.display import DisplaySpec
from libdisplay.hardware import drm
from libdisplay.hardware.modes import Mode
from libdisplay.sim.edid import EdidParams, build_edid
from libdisplay.sim.sysfs import SimCard, SimConnector, write_tree

KIOSK = build_edid(EdidParams(name="Kiosk A", serial_number=1, preferred=Mode(1920, 1080, 60000),
                              detailed=(Mode(1280, 720, 60000),)))
WALL = build_edid(EdidParams(name="Wall B", serial_number=2, preferred=Mode(1280, 1024, 60000)))


@pytest.fixture
def cards(tmp_path: Path) -> tuple[drm.Card, ...]:
    write_tree(tmp_path, SimCard(connectors=(
        SimConnector(type="HDMI-A", index=1, edid=KIOSK, modes=("1920x1080", "1280x720")),
        SimConnector(type="DP", index=1, edid=WALL, modes=("1280x1024",)),
        SimConnector(type="DP", index=2, status="disconnected"),
    )))
    return tuple(drm.enumerate_cards(sysfs_root=tmp_path / "sys", dev_root=tmp_path / "dev"))


def _outputs(text: str) -> dict[str, dict[str, str]]:
    ini = WestonIni.parse(text)
    sections = ({e.key: e.value for e in s.entries()} for s in ini.sections if s.name == "output")
    return {o["name"]: o for o in sections}


def test_a_claim_mode_wins_over_the_display_and_an_unoffered_mode_falls_back_with_a_warning(
    cards: tuple[drm.Card, ...], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    specs = {"card0-hdmi-a-1": DisplaySpec(mode=Mode(1920, 1080, 60000)),
             "card0-dp-1": DisplaySpec(mode=Mode(800, 600, 60000))}
    with caplog.at_level(logging.WARNING):
        choices, text = derive_ini(cards, specs=specs,
                                   claim_modes={"card0-hdmi-a-1": Mode(1280, 720, 60000)},
                                   config=tmp_path / "etc" / "weston.ini",
                                   runtime_dir=tmp_path / "run")
    outputs = _outputs(text)
    assert outputs["HDMI-A-1"]["mode"] == "1280x720@60"
    assert outputs["DP-1"]["mode"] == "1280x1024@60"
    assert outputs["DP-2"]["mode"] == "preferred"  # lights when a monitor is plugged in
    assert {c.output.name: c.source for c in choices} == {
        "HDMI-A-1": "claim", "DP-1": "preferred", "DP-2": "disconnected"}
    assert any("800x600" in r.getMessage() and "Wall B" in r.getMessage()
               for r in caplog.records), caplog.text


def test_the_layout_sockets_sit_beside_the_config_and_claims_under_the_runtime_dir(
    cards: tuple[drm.Card, ...], tmp_path: Path
) -> None:
    _, text = derive_ini(cards, specs={}, config=tmp_path / "etc" / "weston.ini",
                         runtime_dir=tmp_path / "run", shell="kiosk-shell.so",
                         aliases={"HDMI-A-1": "X1"})
    assert f"control-socket={tmp_path}/etc/layout.sock" in text
    assert f"claims-dir={tmp_path}/run/claims" in text
    assert "shell=kiosk-shell.so" in text
    assert "X1" in _outputs(text)
