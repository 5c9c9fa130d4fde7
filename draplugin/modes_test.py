from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from draplugin import modes
from draplugin.claimconfig import DisplayConfig
from draplugin.settings import KubeAccess, Settings
from libdisplay.display import display_name
from libdisplay.edid_build import EdidParams, build_edid
from libdisplay.modes import Mode
from libdisplay.sysfs_tree import SimCard, SimConnector, dev_root, sysfs_root, write_tree

NODE = "n1"
HDMI = "card0-hdmi-a-1"


class FakeDisplays:
    """Display specs in a dict; the `Kube` calls modes makes."""

    def __init__(self, specs: dict[str, dict[str, Any]]) -> None:
        self.specs = specs

    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    def get_display_spec(self, name: str) -> dict[str, Any] | None:
        spec = self.specs.get(name)
        return None if spec is None else dict(spec)

    def patch_display_spec(self, name: str, patch: Mapping[str, object]) -> None:
        spec = self.specs[name]
        for key, value in patch.items():
            if value is None:
                spec.pop(key, None)
            else:
                spec[key] = value


def settings(root: Path) -> Settings:
    edid = build_edid(EdidParams(name="M", serial_number=1, preferred=Mode(1920, 1080, 60000),
                                 detailed=(Mode(1280, 720, 60000),)))
    write_tree(root, SimCard(connectors=(
        SimConnector(type="HDMI-A", index=1, edid=edid, modes=("1920x1080", "1280x720")),)))
    etc = root / "etc"
    return Settings(
        node_name=NODE, plugin_dir=root / "plugin", registry_dir=root / "reg",
        cdi_dir=root / "cdi", weston_ini=etc / "weston.ini", mode_records_dir=etc / "claims",
        restarts_dir=etc / "restarts", pid_file=etc / "weston.pid", socket_dir=root / "run",
        container_socket_dir=root / "run", socket_name="wayland-0",
        sysfs_root=sysfs_root(root), dev_root=dev_root(root), aliases={},
        restart_timeout_s=1.0, kube=KubeAccess(),
    )


def test_record_round_trip_and_listing_skips_temporaries(tmp_path: Path) -> None:
    record = modes.ModeRecord(
        claim_uid="u-1",
        outputs={HDMI: DisplayConfig(mode=Mode(1280, 720, 60000), scale=2)},
        previous={HDMI: {"mode": "1920x1080@60"}},
    )
    modes.write_record(tmp_path, record)
    (tmp_path / ".u-2.json.77.tmp").write_text("{")
    assert modes.list_records(tmp_path) == ("u-1",)
    assert modes.read_record(tmp_path, "u-1") == record
    assert modes.remove_record(tmp_path, "u-1")
    assert modes.read_record(tmp_path, "u-1") is None


def test_claim_record_wins_over_display_spec_and_is_put_back(tmp_path: Path) -> None:
    s = settings(tmp_path)
    name = display_name(NODE, HDMI)
    kube = FakeDisplays({name: {"mode": "1920x1080@60", "transform": "rotate-180"}})
    assert modes.regenerate(s, kube)
    first = s.weston_ini.read_text()
    assert "mode=1920x1080@60" in first
    # What declare writes too: the layout shell, its sockets beside weston.ini.
    assert "shell=layout-shell.so" in first
    assert f"claims-dir={s.socket_dir / 'claims'}\n" in first
    assert f"control-socket={s.weston_ini.parent / 'layout.sock'}" in first
    assert not modes.regenerate(s, kube)

    claimed = DisplayConfig(mode=Mode(1280, 720, 60000))
    record = modes.ModeRecord(claim_uid="u-1", outputs={HDMI: claimed},
                              previous={HDMI: modes.read_previous(kube, name)})
    modes.write_record(s.mode_records_dir, record)
    modes.write_claimed(kube, node=NODE, record=record)
    assert kube.specs[name] == {"mode": "1280x720@60", "transform": "rotate-180"}
    assert modes.regenerate(s, kube)
    ini = s.weston_ini.read_text()
    assert "mode=1280x720@60" in ini and "transform=rotate-180" in ini

    modes.restore_previous(kube, node=NODE, record=record)
    modes.remove_record(s.mode_records_dir, "u-1")
    assert kube.specs[name] == {"mode": "1920x1080@60", "transform": "rotate-180"}
    assert modes.regenerate(s, kube)
    assert "mode=1920x1080@60" in s.weston_ini.read_text()


def test_restart_without_a_running_weston_orders_nothing(tmp_path: Path) -> None:
    s = settings(tmp_path)
    s.pid_file.parent.mkdir(parents=True)
    s.pid_file.write_text("999999999\n")  # beyond pid_max: no such process
    modes.restart_compositor(s, reason="test")
    assert not s.restarts_dir.exists()


def test_records_are_read_leniently_within_a_known_version(tmp_path: Path) -> None:
    def stored(data: object) -> modes.ModeRecord | None:
        (tmp_path / "u1.json").write_text(json.dumps(data) if not isinstance(data, str)
                                          else data)
        return modes.read_record(tmp_path, "u1")

    unversioned = {"claimUID": "u1", "outputs": {HDMI: {"mode": "1280x720@60", "scale": 9}},
                   "previous": {HDMI: None}, "later": "ignored"}
    record = stored(unversioned)
    assert record is not None
    # scale 9 no longer validates: left out, the rest of the record stands.
    assert record.outputs[HDMI] == DisplayConfig(mode=Mode(1280, 720, 60000))
    assert json.loads(record.to_json())["version"] == modes.RECORD_VERSION
    for bad, why in (("{not json", "not valid"), ({**unversioned, "version": 7}, "version 7"),
                     ({"outputs": {}}, "claimUID")):
        with pytest.raises(modes.ModeRecordError, match=f"claim u1 .*{why}"):
            stored(bad)
