"""declare and westonctl, as built PEXes, bring a simulated card's monitors up at the right modes.

weston runs with the config exactly as declare writes it for the pod, the layout module as
its shell included (built from westonctl/layout as the weston image builds it).

A simulated card with three monitors (sysfs in the kernel's format, EDIDs from the builder),
their Display objects in the fake apiserver, and real weston 14 on the x11 backend over Xvfb,
whose outputs X1..X3 stand for the connectors (declare's --output-alias maps them). Each
output must come up at its Display's mode, or at the monitor's preferred mode where the
Display's mode is not offered or there is no Display.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakekube.server import FakeKube
from libdisplay.compositor.wayland import Liveness, list_outputs, probe
from libdisplay.display import API_VERSION, display_name
from libdisplay.hardware.modes import Mode
from libdisplay.processes import running
from libdisplay.sim.edid import EdidParams, build_edid
from libdisplay.sim.sysfs import SimCard, SimConnector, write_tree
from tests.binaries import pex_env, pex_path
from tests.support.crds import display_crd
from tests.support.layout_build import build_layout
from tests.support.weston import xvfb

NODE = "wall-1"
MONITORS = {
    # connector -> (EDID preferred mode, other modes, Display spec.mode or None, x11 output)
    "HDMI-A-1": (Mode(1920, 1080, 60000), (Mode(1280, 720, 60000),), "1280x720@60", "X3"),
    "DP-1": (Mode(1280, 1024, 60000), (), "3840x2160@60", "X1"),
    "DP-2": (Mode(1024, 768, 60000), (), None, "X2"),
}
EXPECTED = {"X3": "1280x720@60", "X1": "1280x1024@60", "X2": "1024x768@60"}


def _connector(name: str, serial: int) -> SimConnector:
    preferred, others, _, _ = MONITORS[name]
    type_name, _, index = name.rpartition("-")
    edid = build_edid(
        EdidParams(
            name=f"Monitor {serial}", serial_number=serial, preferred=preferred, detailed=others
        )
    )
    modes = tuple(f"{m.width}x{m.height}" for m in (preferred, *others))
    return SimConnector(type=type_name, index=int(index), edid=edid, modes=modes)


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as fake:
        fake.register_crd(display_crd())
        for connector, (_, _, mode, _) in MONITORS.items():
            if mode is not None:
                device = f"card0-{connector.lower()}"
                fake.create(
                    {
                        "apiVersion": API_VERSION,
                        "kind": "Display",
                        "metadata": {"name": display_name(NODE, device)},
                        "spec": {"mode": mode},
                    }
                )
        yield fake


@pytest.fixture(scope="module")
def layout_shell(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The layout module, built from source as the weston image builds it."""
    return build_layout(tmp_path_factory.mktemp("layout"))


def test_outputs_come_up_at_their_display_modes_or_preferred(
    kube: FakeKube, pex_root: Path, tmp_path: Path, layout_shell: Path
) -> None:
    root = tmp_path / "node"
    write_tree(root, SimCard(connectors=tuple(_connector(n, i) for i, n in enumerate(MONITORS, 1))))
    config = tmp_path / "etc" / "weston.ini"
    aliases = [f"--output-alias={c}={out}" for c, (_, _, _, out) in MONITORS.items()]
    declared = subprocess.run(
        [
            str(pex_path("declare")),
            "declare",
            f"--sysfs-root={root / 'sys'}",
            f"--dev-root={root / 'dev'}",
            f"--config={config}",
            f"--node-name={NODE}",
            f"--api-server={kube.url}",
            f"--shell={layout_shell}",
            *aliases,
        ],
        env=pex_env(pex_root),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert declared.returncode == 0, declared.stderr
    assert "does not offer the display's mode 3840x2160@60" in declared.stderr

    with (
        xvfb(screen=(4096, 2160), log_dir=tmp_path) as x,
        tempfile.TemporaryDirectory(prefix="dw-") as runtime,
    ):
        socket = Path(runtime) / "wayland-0"
        argv = [
            str(pex_path("westonctl")),
            "weston",
            f"--config={config}",
            f"--runtime-dir={runtime}",
            f"--restarts-dir={tmp_path / 'etc' / 'restarts'}",
            f"--pid-file={tmp_path / 'etc' / 'weston.pid'}",
            "--backend=x11",
            "--",
            "--output-count=3",
            "--renderer=pixman",
        ]
        with running(
            argv,
            log_path=tmp_path / "westonctl.log",
            env=pex_env(pex_root, DISPLAY=x.display),
            ready=lambda _: probe(socket, timeout=1.0).state is Liveness.ANSWERING,
            ready_timeout=60.0,
            what="weston answering",
        ):
            outputs = {o.name: str(o.mode) for o in list_outputs(socket, timeout=10.0)}
            # The layout module runs as the shell, with its sockets beside weston.ini.
            assert (config.parent / "layout.sock").is_socket()
    assert outputs == EXPECTED
