"""declare against a simulated card and the fake apiserver over real HTTP."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner, Result

from declare.main import cli
from declare.run import Settings, plan, write
from fakekube.server import FakeKube
from libdisplay.display import API_VERSION, display_name
from libdisplay.hardware import drm
from libdisplay.hardware.modes import Mode
from libdisplay.kube import stdlib_client as kubeapi
from libdisplay.sim.edid import EdidParams, build_edid
from libdisplay.sim.sysfs import SimCard, SimConnector, write_tree
from tests.support.crds import display_crd

NODE = "kiosk-1"
DAEMONSET = Path(__file__).resolve().parents[1] / "deploy" / "base" / "namespaced" / \
    "daemonset.yaml"
KIOSK = build_edid(
    EdidParams(
        name="Kiosk A",
        serial_number=1,
        preferred=Mode(1920, 1080, 60000),
        detailed=(Mode(1280, 720, 60000),),
    )
)
WALL = build_edid(EdidParams(name="Wall B", serial_number=2, preferred=Mode(1280, 1024, 60000)))


@pytest.fixture
def card_root(tmp_path: Path) -> Path:
    root = tmp_path / "node"
    write_tree(
        root,
        SimCard(
            connectors=(
                SimConnector(type="HDMI-A", index=1, edid=KIOSK, modes=("1920x1080", "1280x720")),
                SimConnector(type="DP", index=1, edid=WALL, modes=("1280x1024",)),
                SimConnector(type="DP", index=2, status="disconnected"),
            )
        ),
    )
    return root


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as fake:
        fake.register_crd(display_crd())
        yield fake


def _display(kube: FakeKube, device: str, spec: dict[str, object]) -> None:
    kube.create(
        {
            "apiVersion": API_VERSION,
            "kind": "Display",
            "metadata": {"name": display_name(NODE, device)},
            "spec": spec,
        }
    )


def _settings(root: Path, endpoint: kubeapi.Endpoint | None, **kw: object) -> Settings:
    values: dict[str, object] = {
        "sysfs_root": root / "sys",
        "dev_root": root / "dev",
        "config": root / "etc" / "weston.ini",
        "node_name": NODE,
        "endpoint": endpoint,
        "api_timeout_s": 5.0,
        "aliases": {},
    }
    values.update(kw)
    return Settings(**values)  # type: ignore[arg-type]


def _outputs(text: str) -> dict[str, dict[str, str]]:
    """[output] sections of a weston.ini text, by name."""
    outputs: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in text.splitlines():
        if line.startswith("["):
            current = {} if line == "[output]" else None
        elif current is not None and "=" in line:
            key, _, value = line.partition("=")
            current[key] = value
            if key == "name":
                outputs[value] = current
    return outputs


def test_each_output_starts_at_its_display_mode_and_unplugged_connectors_get_a_section(
    card_root: Path, kube: FakeKube
) -> None:
    _display(kube, "card0-hdmi-a-1", {"mode": "1280x720@60", "transform": "rotate-90"})
    choices = write(_settings(card_root, kubeapi.Endpoint(kube.url)))
    text = (card_root / "etc" / "weston.ini").read_text()
    outputs = _outputs(text)
    assert outputs["HDMI-A-1"] == {
        "name": "HDMI-A-1",
        "mode": "1280x720@60",
        "transform": "rotate-90",
    }
    assert outputs["DP-1"] == {"name": "DP-1", "mode": "1280x1024@60"}
    assert outputs["DP-2"] == {"name": "DP-2", "mode": "preferred"}
    assert "require-outputs=none" in text
    assert "require-input=false" in text
    assert "shell=layout-shell.so" in text
    assert f"control-socket={card_root / 'etc' / 'layout.sock'}" in text
    # Where the layout module accepts claims' sockets: weston's runtime dir, as weston sees it.
    assert "claims-dir=/var/run/display.liken.sh/claims\n" in text
    assert {c.output.name: c.source for c in choices} == {
        "HDMI-A-1": "display",
        "DP-1": "preferred",
        "DP-2": "disconnected",
    }


def test_a_mode_the_monitor_does_not_offer_falls_back_to_preferred_naming_monitor_and_value(
    card_root: Path, kube: FakeKube, caplog: pytest.LogCaptureFixture
) -> None:
    _display(kube, "card0-dp-1", {"mode": "3840x2160@60"})
    text, _ = plan(_settings(card_root, kubeapi.Endpoint(kube.url)))
    assert _outputs(text)["DP-1"]["mode"] == "1280x1024@60"
    assert (
        "monitor card0-DP-1 (Wall B) does not offer the display's mode 3840x2160@60" in caplog.text
    )


def test_missing_display_and_bad_spec_are_warnings_not_failures(
    card_root: Path, kube: FakeKube, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    _display(kube, "card0-hdmi-a-1", {"mode": "preferred"})
    text, _ = plan(_settings(card_root, kubeapi.Endpoint(kube.url)))
    assert _outputs(text)["HDMI-A-1"]["mode"] == "1920x1080@60"
    assert f"no Display {display_name(NODE, 'card0-dp-1')}" in caplog.text


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_api_gives_preferred_modes_without_waiting_per_monitor(
    card_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    endpoint = kubeapi.Endpoint(f"http://127.0.0.1:{_closed_port()}")
    began = time.monotonic()
    text, _ = plan(_settings(card_root, endpoint, api_timeout_s=30.0))
    assert time.monotonic() - began < 10.0
    assert _outputs(text)["HDMI-A-1"]["mode"] == "1920x1080@60"
    assert caplog.text.count("API unreachable") == 1


def test_no_card_delivered_is_an_error_and_writes_nothing(card_root: Path) -> None:
    for node in (card_root / "dev" / "dri").iterdir():
        node.unlink()
    settings = _settings(card_root, None)
    with pytest.raises(drm.NoCardDeliveredError, match="no DRM card was delivered"):
        write(settings)
    assert not settings.config.exists()


def _declare(card_root: Path, *args: str) -> Result:
    """`declare declare` on the simulated card, writing etc/weston.ini unless --dry-run."""
    return CliRunner().invoke(cli, [
        "declare",
        f"--sysfs-root={card_root / 'sys'}",
        f"--dev-root={card_root / 'dev'}",
        f"--config={card_root / 'etc' / 'weston.ini'}",
        *args,
    ])


def test_cli_dry_run_prints_the_file_and_writes_nothing(card_root: Path, kube: FakeKube) -> None:
    _display(kube, "card0-hdmi-a-1", {"mode": "1280x720@60"})
    config = card_root / "etc" / "weston.ini"
    result = _declare(card_root, f"--node-name={NODE}", f"--api-server={kube.url}",
                      "--output-alias=HDMI-A-1=X1", "--dry-run")
    assert result.exit_code == 0, result.output
    assert _outputs(result.output)["X1"]["mode"] == "1280x720@60"
    assert not config.exists()


def test_cli_reads_displays_through_a_kubeconfig(card_root: Path, kube: FakeKube) -> None:
    _display(kube, "card0-hdmi-a-1", {"mode": "1280x720@60"})
    kubeconfig = card_root / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: '{kube.url}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    result = _declare(card_root, f"--node-name={NODE}", f"--kubeconfig={kubeconfig}", "--dry-run")
    assert result.exit_code == 0, result.output
    assert _outputs(result.output)["HDMI-A-1"]["mode"] == "1280x720@60"


def test_cli_without_a_card_exits_non_zero_with_the_reason(card_root: Path) -> None:
    for node in (card_root / "dev" / "dri").iterdir():
        node.unlink()
    result = _declare(card_root)
    assert result.exit_code == 1
    assert "no DRM card was delivered" in result.output
    assert not (card_root / "etc" / "weston.ini").exists()


def _manifest_env(container: str, pod: dict[str, Any]) -> dict[str, str]:
    """The env the DaemonSet states for `container`, downward-API fields read from `pod`."""
    docs = [d for d in yaml.safe_load_all(DAEMONSET.read_text()) if d]
    (daemonset,) = (d for d in docs if d.get("kind") == "DaemonSet")
    spec = daemonset["spec"]["template"]["spec"]
    (found,) = (c for c in (*spec.get("initContainers", ()), *spec["containers"])
                if c["name"] == container)
    env: dict[str, str] = {}
    for var in found.get("env", ()):
        if "value" in var:
            env[var["name"]] = var["value"]
            continue
        value: Any = pod
        for key in var["valueFrom"]["fieldRef"]["fieldPath"].split("."):
            value = value[key]
        env[var["name"]] = str(value)
    return env


def test_declare_reads_the_display_mode_with_only_the_env_the_manifest_gives(
    card_root: Path, kube: FakeKube
) -> None:
    """The pod's declare container: its env is the manifest's (NODE_NAME from the downward
    API), every other variable declare reads is unset. The API URL stands in for in-cluster
    discovery, which the pod runner covers."""
    _display(kube, "card0-hdmi-a-1", {"mode": "1280x720@60"})
    env = _manifest_env("declare", {"spec": {"nodeName": NODE}, "metadata": {"name": "p"}})
    command = cli.commands["declare"]
    read = {p.envvar for p in command.params if isinstance(p, click.Option)
            and isinstance(p.envvar, str)}
    runner = CliRunner(env={**dict.fromkeys(read), **env})
    result = runner.invoke(cli, [
        "declare", f"--sysfs-root={card_root / 'sys'}", f"--dev-root={card_root / 'dev'}",
        f"--config={card_root / 'etc' / 'weston.ini'}", f"--api-server={kube.url}",
    ])
    assert result.exit_code == 0, result.output
    text = (card_root / "etc" / "weston.ini").read_text()
    assert _outputs(text)["HDMI-A-1"]["mode"] == "1280x720@60"
