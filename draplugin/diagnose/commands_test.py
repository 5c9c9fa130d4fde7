"""draplugin's diagnosis subcommands on a simulated card and monitor: what they print is what
the operator would read or write, they name bad input, and they write nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner, Result

from draplugin.driver import checkpoint
from draplugin.driver.checkpoint import ClaimEntry, PreparedDevice
from draplugin.main import cli
from libdisplay.hardware.ddc_socket import MonitorServer
from libdisplay.hardware.modes import Mode
from libdisplay.sim import sysfs as sysfs_tree
from libdisplay.sim.ddc import Feature, SimulatedMonitor
from libdisplay.sim.edid import EdidParams, build_edid

NODE = "kiosk-1"
DRIVER = "display.liken.sh"
HDMI = "card0-hdmi-a-1"
DP = "card0-dp-1"
CAPS = ("(prot(monitor)type(lcd)model(SIM 1)cmds(01 02 03 0C E3 F3)"
        "vcp(02 10 12 60(0F 11 12) D6(01 04 05))mccs_ver(2.2))")


def _tree(root: Path) -> None:
    """HDMI-A-1 on i2c-3 and DP-1 on i2c-4 (plain files: no monitor answers there)."""
    def monitor(kind: str, serial: int, preferred: Mode, bus: int) -> sysfs_tree.SimConnector:
        edid = build_edid(EdidParams(name=f"{kind} {serial}", serial_number=serial,
                                     preferred=preferred, standard=(Mode(1024, 768, 60000),)))
        return sysfs_tree.SimConnector(type=kind, edid=edid, i2c_bus=bus,
                                       modes=(f"{preferred.width}x{preferred.height}",
                                              "1024x768"))

    sysfs_tree.write_tree(root, sysfs_tree.SimCard(connectors=(
        monitor("HDMI-A", 1, Mode(1920, 1080, 60000), 3),
        monitor("DP", 2, Mode(1280, 1024, 60000), 4),
    )))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "node"
    _tree(root)
    return root


@pytest.fixture
def answering_bus(tree: Path) -> Iterator[Path]:
    """A simulated monitor answering DDC/CI on HDMI-A-1's bus, i2c-3."""
    bus = sysfs_tree.dev_root(tree) / "i2c-3"
    bus.unlink()
    monitor = SimulatedMonitor(capabilities=CAPS, values={
        0x10: Feature(40, 100), 0x12: Feature(140, 200),
        0x60: Feature(0x11, 0x12, allowed=(0x0F, 0x11, 0x12)),
        0xD6: Feature(0x04, 0x05, allowed=(0x01, 0x04, 0x05))})
    with MonitorServer(bus, monitor):
        yield bus


def _run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def _tree_args(root: Path) -> list[str]:
    return [f"--sysfs-root={sysfs_tree.sysfs_root(root)}",
            f"--dev-root={sysfs_tree.dev_root(root)}"]


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_ddc_reads_what_the_operator_reads(answering_bus: Path) -> None:
    shown = _run("ddc", str(answering_bus), "--json")
    assert shown.exit_code == 0, shown.stderr
    assert json.loads(shown.stdout) == {
        "bus": str(answering_bus), "supported": True, "capabilities": CAPS,
        "vcpCodes": [0x02, 0x10, 0x12, 0x60, 0xD6],
        "inputs": ["DisplayPort-1", "HDMI-1", "HDMI-2"],
        # Percent of the monitor's maximum, as a claim states them; input and power by name.
        "brightness": 40, "contrast": 70, "input": "HDMI-1", "power": "off",
    }
    text = _run("ddc", "3", f"--dev-root={answering_bus.parent}")
    assert text.exit_code == 0, text.stderr
    assert "brightness: 40 %\ncontrast: 70 %\ninput source: HDMI-1\npower: off\n" in text.stdout


def test_ddc_refuses_a_path_that_is_not_a_bus_and_says_which(tree: Path) -> None:
    plain = sysfs_tree.dev_root(tree) / "i2c-4"
    shown = _run("ddc", str(plain))
    assert shown.exit_code == 2
    assert f"bus {plain}: neither an i2c-dev character device" in shown.stderr
    missing = _run("ddc", "9", f"--dev-root={sysfs_tree.dev_root(tree)}")
    assert missing.exit_code == 2
    assert f"bus {sysfs_tree.dev_root(tree) / 'i2c-9'}: No such file or directory" in (
        missing.stderr)


def test_ddc_exits_1_when_the_monitor_does_not_answer(tree: Path) -> None:
    bus = sysfs_tree.dev_root(tree) / "i2c-3"
    bus.unlink()
    silent = SimulatedMonitor(capabilities=CAPS)
    silent.faults.silent = "nack"
    with MonitorServer(bus, silent):
        shown = _run("ddc", str(bus), "--json")
    assert shown.exit_code == 1
    assert json.loads(shown.stdout) == {"bus": str(bus), "supported": False}


def test_weston_ini_is_the_operators_and_nothing_is_written(tree: Path) -> None:
    before = _files(tree)
    etc = tree / "etc"
    shown = _run("dry-run", "weston-ini", *_tree_args(tree), f"--config={etc}/weston.ini",
                 f"--runtime-dir={tree}/run")
    assert shown.exit_code == 0, shown.stderr
    assert "[output]\nname=HDMI-A-1\nmode=1920x1080@60" in shown.stdout
    assert "[output]\nname=DP-1\nmode=1280x1024@60" in shown.stdout
    assert f"control-socket={etc}/layout.sock" in shown.stdout
    assert "shell=layout-shell.so" in shown.stdout
    assert _files(tree) == before


def test_weston_ini_takes_a_prepared_claims_mode_from_the_checkpoint(
        tree: Path, tmp_path: Path) -> None:
    plugin = tmp_path / "plugin"
    entry = ClaimEntry(uid="u-1", name="kiosk", namespace="shop", state="prepared",
                       devices=(PreparedDevice(request="screen", pool=NODE, device=HDMI,
                                               output="HDMI-A-1", cdi_ids=()),),
                       config={HDMI: {"mode": "1024x768@60"}})
    checkpoint.save(checkpoint.path_in(plugin), checkpoint.EMPTY.with_claim(entry))
    shown = _run("dry-run", "weston-ini", *_tree_args(tree), f"--plugin-dir={plugin}")
    assert shown.exit_code == 0, shown.stderr
    assert "name=HDMI-A-1\nmode=1024x768@60" in shown.stdout
    checkpoint.path_in(plugin).write_text("{")
    broken = _run("dry-run", "weston-ini", *_tree_args(tree), f"--plugin-dir={plugin}")
    assert broken.exit_code == 1
    assert f"checkpoint {checkpoint.path_in(plugin)} is not valid" in broken.stderr


def test_weston_ini_takes_a_displays_spec_mode(tree: Path, tmp_path: Path) -> None:
    displays = tmp_path / "displays.yaml"
    displays.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "display.liken.sh/v1alpha1", "kind": "Display",
         "metadata": {"name": f"{NODE}.{DP}"}, "spec": {"transform": "rotate-90"}}]}))
    shown = _run("dry-run", "weston-ini", *_tree_args(tree), f"--node-name={NODE}",
                 f"--displays={displays}")
    assert shown.exit_code == 0, shown.stderr
    assert "name=DP-1\nmode=1280x1024@60\ntransform=rotate-90" in shown.stdout


def test_weston_ini_names_a_file_that_holds_no_display(tree: Path, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("kind: ConfigMap\nmetadata: {name: x}\n")
    shown = _run("dry-run", "weston-ini", *_tree_args(tree), f"--node-name={NODE}",
                 f"--displays={wrong}")
    assert shown.exit_code == 1
    assert f"{wrong}: kind 'ConfigMap' is not a Display" in shown.stderr


def test_slice_has_one_device_per_monitor_and_ddc_where_it_answers(
        tree: Path, answering_bus: Path) -> None:
    shown = _run("dry-run", "slice", *_tree_args(tree), f"--node-name={NODE}",
                 "--node-uid=u-1")
    assert shown.exit_code == 0, shown.stderr
    obj = json.loads(shown.stdout)
    assert obj["metadata"]["name"] == f"{NODE}-{DRIVER}"
    assert obj["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert obj["spec"]["pool"] == {"name": NODE, "generation": 0, "resourceSliceCount": 1}
    devices = {d["name"]: d["attributes"] for d in obj["spec"]["devices"]}
    assert sorted(devices) == [DP, HDMI]
    assert devices[HDMI]["ddc"] == {"bool": True}
    assert devices[DP]["ddc"] == {"bool": False}
    assert devices[HDMI]["preferredWidth"] == {"int": 1920}
    assert not any("taints" in d for d in obj["spec"]["devices"])


def _claim(tmp_path: Path, parameters: dict[str, object], *, pool: str = NODE) -> Path:
    claim = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "kiosk", "namespace": "shop", "uid": "0a1b-uid"},
        "status": {"allocation": {"devices": {
            "results": [{"request": "screen", "driver": DRIVER, "pool": pool, "device": HDMI}],
            "config": [{"source": "FromClaim", "requests": [], "opaque": {
                "driver": DRIVER, "parameters": {
                    "apiVersion": "display.liken.sh/v1alpha1", "kind": "DisplayConfig",
                    **parameters}}}]}}},
    }
    path = tmp_path / "claim.yaml"
    path.write_text(yaml.safe_dump(claim))
    return path


def test_cdi_is_the_spec_prepare_writes_and_nothing_is_written(
        tree: Path, tmp_path: Path) -> None:
    claim = _claim(tmp_path, {"mode": "1920x1080@60"})
    before = _files(tree)
    shown = _run("dry-run", "cdi", str(claim), *_tree_args(tree), f"--node-name={NODE}",
                 f"--runtime-dir={tree}/run", "--container-runtime-dir=/run/display")
    assert shown.exit_code == 0, shown.stderr
    spec = json.loads(shown.stdout)
    assert spec["kind"] == "k8s.display.liken.sh/display"
    [device] = spec["devices"]
    assert device["name"] == f"0a1b-uid-{HDMI}"
    edits = device["containerEdits"]
    assert edits["mounts"][0]["hostPath"] == f"{tree}/run/claims/0a1b-uid"
    assert edits["mounts"][0]["containerPath"] == "/run/display/claims/0a1b-uid"
    assert "WAYLAND_DISPLAY=/run/display/claims/0a1b-uid/wayland-0" in edits["env"]
    assert "DISPLAY_OUTPUT=HDMI-A-1" in edits["env"]
    assert _files(tree) == before


def test_cdi_fails_as_prepare_would_naming_the_field(tree: Path, tmp_path: Path) -> None:
    claim = _claim(tmp_path, {"mode": "800x600@60"})
    shown = _run("dry-run", "cdi", str(claim), *_tree_args(tree), f"--node-name={NODE}")
    assert shown.exit_code == 1
    assert "field 'mode' value '800x600@60'" in shown.stderr
    other_pool = _claim(tmp_path, {}, pool="elsewhere")
    refused = _run("dry-run", "cdi", str(other_pool), *_tree_args(tree), f"--node-name={NODE}")
    assert refused.exit_code == 1
    assert "is in pool 'elsewhere', not this node's pool 'kiosk-1'" in refused.stderr


def test_cdi_names_a_file_that_is_not_a_claim(tree: Path, tmp_path: Path) -> None:
    broken = tmp_path / "claim.yaml"
    broken.write_text("kind: ResourceClaim\nmetadata: {name: kiosk}\n")
    shown = _run("dry-run", "cdi", str(broken), *_tree_args(tree), f"--node-name={NODE}")
    assert shown.exit_code == 1
    assert f"{broken}: {broken}: metadata.uid is missing" in shown.stderr
    garbage = tmp_path / "garbage.yaml"
    garbage.write_text("{: [")
    bad = _run("dry-run", "cdi", str(garbage), *_tree_args(tree), f"--node-name={NODE}")
    assert bad.exit_code == 1
    assert f"{garbage}: not YAML or JSON" in bad.stderr


@pytest.mark.parametrize("command", [["ddc"], ["dry-run"], ["dry-run", "weston-ini"],
                                     ["dry-run", "slice"], ["dry-run", "cdi"]])
def test_every_subcommand_has_help(command: list[str]) -> None:
    shown = _run(*command, "--help")
    assert shown.exit_code == 0
    assert "Usage: " in shown.stdout


def test_cdi_checks_ddc_settings_against_the_monitors_bus(tree: Path, tmp_path: Path) -> None:
    settable = _claim(tmp_path, {"brightness": 30, "input": "HDMI-1"})
    shown = _run("dry-run", "cdi", str(settable), *_tree_args(tree), f"--node-name={NODE}")
    assert shown.exit_code == 0, shown.stderr
    unknown = _claim(tmp_path, {"input": "SCART-9"})
    refused = _run("dry-run", "cdi", str(unknown), *_tree_args(tree), f"--node-name={NODE}")
    assert refused.exit_code == 1
    assert "'SCART-9'" in refused.stderr


def _flags(command: click.Command) -> dict[str, tuple[object, ...]]:
    return {p.name: (tuple(p.opts), getattr(p, "envvar", None), p.default,
                     p.type.to_info_dict()) for p in command.params if p.name}


@pytest.mark.parametrize("name", ["weston-ini", "slice", "cdi"])
def test_a_dry_runs_flags_are_the_operators(name: str) -> None:
    """The same pod environment gives the dry run the node the operator reads: each flag the
    operator has is the operator's, by name, variable, default and type."""
    assert isinstance(cli, click.Group)
    operator = _flags(cli.commands["operator"])
    dry_run = cli.commands["dry-run"]
    assert isinstance(dry_run, click.Group)
    flags = _flags(dry_run.commands[name])
    shared = {n: f for n, f in flags.items() if n in operator}
    assert {"sysfs_root", "dev_root", "output_alias", "shell", "runtime_dir", "weston_config",
            "plugin_dir", "container_runtime_dir", "socket", "delivery"} <= set(shared)
    assert shared == {n: operator[n] for n in shared}
