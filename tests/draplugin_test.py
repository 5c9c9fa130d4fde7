"""The operator's kubelet plugin, as a process, driven by a kubelet stand-in over unix sockets.

The plugin runs as the built PEX under Pants (`draplugin/draplugin.pex` is in the sandbox)
and as `python -m draplugin.main` in a plain pytest run. Claims live in the fake apiserver; a
simulated sysfs card holds the monitors; a real headless weston, supervised by westonctl,
is restarted for the mode change. Crash points kill the plugin with SIGKILL at each step.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from lightkube.generic_resource import create_global_resource
from lightkube.resources.resource_v1 import ResourceClaim
from lightkube.types import PatchType

from draplugin.driver.state import FAULT_POINTS
from draplugin.service import WORKERS
from fakekube.client import sync_client
from fakekube.server import FakeKube
from libdisplay import cdi
from libdisplay.compositor.layout import LayoutCapture, LayoutControl
from libdisplay.compositor.outputs import LayoutSockets
from libdisplay.compositor.wayland import list_outputs
from libdisplay.display import GROUP, KIND, PLURAL, VERSION, display_name
from libdisplay.hardware.modes import Mode, parse_mode
from libdisplay.pod import DRIVER
from libdisplay.processes import Process
from libdisplay.sim.sysfs import (
    SimCard,
    dev_root,
    hotplug,
    sysfs_root,
    write_tree,
)
from simnode.kubelet.plugin import Claim, Kubelet, get_info
from tests.support.layout import SolidClient
from tests.support.layout_build import build_layout
from tests.support.operator_node import (  # noqa: F401  (fake_fixture, node_fixture: `fake`, `node`)
    DP,
    HDMI,
    NODE,
    Node,
    fake_fixture,
    make_kube,
    make_node,
    node_fixture,
    sim_monitor,
)
from tests.support.operator_process import (
    INITIAL_INI,
    SHELL,
    START_TIMEOUT_S,
    binary_argv,
    binary_env,
    check_invariants,
    config,
    dies,
    display_spec,
    free_port,
    make_claim,
    plugin,
    slice_devices,
    weston,
)
from tests.support.weston import xvfb

DisplayResource = create_global_resource(GROUP, VERSION, KIND, PLURAL)


# --- registration ----------------------------------------------------------------------------


def test_registration_and_socket_lifecycle(node: Node, fake: FakeKube, pex_root: Path) -> None:
    node.registry_dir.mkdir(parents=True)
    node.registration_socket.write_text("stale")
    with plugin(node, fake, pex_root) as process:
        info = get_info(node.registration_socket)
        assert (info.type, info.name, info.endpoint) == (
            "DRAPlugin", DRIVER, str(node.plugin_dir / "dra.sock")
        )
        assert list(info.supported_versions) == [
            "v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth",
            "v1alpha1.DRAResourceHealth"
        ]
        with Kubelet(node.registration_socket, driver=DRIVER) as kubelet:
            assert (kubelet.service, kubelet.health_service) == (
                "v1.DRAPlugin", "v1.DRAResourceHealth")
            assert kubelet.prepare([]) == {}
            # No compositor answers on this node, so every connected monitor is unhealthy.
            assert kubelet.health() == {HDMI: "UNHEALTHY", DP: "UNHEALTHY"}
        stopped = process.stop()
    assert stopped.returncode == 0 and not stopped.killed
    assert not node.registration_socket.exists()
    assert not (node.plugin_dir / "dra.sock").exists()


# --- prepare and unprepare -------------------------------------------------------------------


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_prepare_unprepare_and_idempotency(
    node: Node, fake: FakeKube, pex_root: Path, version: Any
) -> None:
    claim = make_claim(fake, "kiosk", devices=(HDMI, DP))
    with plugin(node, fake, pex_root), Kubelet(node.registration_socket, driver=DRIVER) as k:
        first = k.prepare([claim], version=version)[claim.uid]
        assert first.error == ""
        assert [(d.device_name, d.pool_name, d.request_names) for d in first.devices] == [
            (HDMI, NODE, ("screen",)), (DP, NODE, ("screen",))
        ]
        assert [d.cdi_device_ids for d in first.devices] == [
            (f"k8s.display.liken.sh/display={claim.uid}-{HDMI}",),
            (f"k8s.display.liken.sh/display={claim.uid}-{DP}",),
        ]
        spec = json.loads(cdi.spec_path(claim.uid, cdi_dir=node.cdi_dir).read_text())
        edits = spec["devices"][0]["containerEdits"]
        assert edits["mounts"][0]["hostPath"] == str(node.runtime_dir)
        assert f"XDG_RUNTIME_DIR={node.runtime_dir}" in edits["env"]
        assert "WAYLAND_DISPLAY=wayland-0" in edits["env"]
        assert "DISPLAY_OUTPUT_CARD0_HDMI_A_1=HDMI-A-1" in edits["env"]
        assert node.checkpoint()[claim.uid]["state"] == "prepared"

        assert k.prepare([claim], version=version)[claim.uid] == first

        assert k.unprepare([claim], version=version) == {claim.uid: ""}
        assert not cdi.spec_path(claim.uid, cdi_dir=node.cdi_dir).exists()
        assert node.checkpoint() == {}
        never = Claim(uid="0f0e0d0c-never-prepared", name="never")
        assert k.unprepare([never, claim], version=version) == {never.uid: "", claim.uid: ""}


BAD_CLAIMS: dict[str, tuple[dict[str, Any], str]] = {
    # id: (make_claim arguments, text the error must contain)
    "unknown-field": ({"params": config(colour="red")}, "unknown field 'colour'"),
    "wrong-kind": ({"params": {"apiVersion": "display.liken.sh/v1alpha1", "kind": "GpuConfig"}},
                   "'GpuConfig' is not display.liken.sh/v1alpha1/DisplayConfig"),
    "mode-type": ({"params": config(mode=1080)}, "field 'mode' must be a string"),
    "mode-syntax": ({"params": config(mode="big")}, "field 'mode' value 'big'"),
    "mode-not-offered": ({"params": config(mode="3840x2160@60")},
                         "field 'mode' value '3840x2160@60'"),
    "transform": ({"params": config(transform="sideways")},
                  "field 'transform' value 'sideways'"),
    "scale-range": ({"params": config(scale=9)}, "field 'scale' value 9 is out of range 1-4"),
    "scale-type": ({"params": config(scale="2")}, "field 'scale' must be a whole number"),
    "brightness-range": ({"params": config(brightness=101)},
                         "field 'brightness' value 101 is out of range 0-100"),
    "input": ({"params": config(input="SCART")}, "field 'input' value 'SCART'"),
    "power": ({"params": config(power="maybe")}, "field 'power' value 'maybe'"),
    "class-config": ({"class_params": config(contrast=-1)},
                     "class config 0: field 'contrast' value -1"),
    "ddc-not-supported": ({"params": config(brightness=40)},
                          "DDC/CI settings (brightness) for card0-HDMI-A-1 need the node "
                          "publisher"),
    "absent-device": ({"devices": ("card0-dp-2",)},
                      "device card0-dp-2 has no connected monitor on this node now"),
    "other-pool": ({"pool": "kiosk-2"}, "is in pool 'kiosk-2', not this node's pool"),
}


@pytest.fixture(scope="module")
def shared_plugin(
    tmp_path_factory: pytest.TempPathFactory, pex_root: Path
) -> Iterator[tuple[Node, FakeKube, Kubelet]]:
    node = make_node(tmp_path_factory.mktemp("node"))
    kube = make_kube()
    try:
        with plugin(node, kube, pex_root), Kubelet(node.registration_socket,
                                                   driver=DRIVER) as kubelet:
            yield node, kube, kubelet
    finally:
        kube.stop()


@pytest.mark.parametrize("case", list(BAD_CLAIMS), ids=list(BAD_CLAIMS))
def test_bad_claim_fails_alone_and_writes_nothing(
    shared_plugin: tuple[Node, FakeKube, Kubelet], case: str
) -> None:
    node, kube, kubelet = shared_plugin
    arguments, message = BAD_CLAIMS[case]
    bad = make_claim(kube, f"bad-{case}", **arguments)
    good = make_claim(kube, f"good-{case}", devices=(DP,))
    answers = kubelet.prepare([bad, good])
    assert message in answers[bad.uid].error
    assert answers[bad.uid].devices == ()
    assert answers[good.uid].error == "" and len(answers[good.uid].devices) == 1
    assert bad.uid not in node.checkpoint()
    assert bad.uid not in cdi.list_specs(cdi_dir=node.cdi_dir)
    assert kubelet.unprepare([good]) == {good.uid: ""}


@pytest.mark.parametrize(
    ("case", "message"),
    [("missing", "ResourceClaim default/ghost not found"), ("replaced", "it was replaced")],
    ids=["missing", "replaced"],
)
def test_claim_that_is_gone_or_replaced(
    shared_plugin: tuple[Node, FakeKube, Kubelet], case: str, message: str
) -> None:
    _, kube, kubelet = shared_plugin
    if case == "missing":
        claim = Claim(uid="1a2b3c4d-ghost", name="ghost")
    else:
        real = make_claim(kube, "replaced")
        claim = Claim(uid="9999-old-uid", name=real.name)
    assert message in kubelet.prepare([claim])[claim.uid].error


# --- start-up recovery and crash points -----------------------------------------------------


def test_start_rewrites_lost_cdi_specs(node: Node, fake: FakeKube, pex_root: Path) -> None:
    claim = make_claim(fake, "kiosk")
    with plugin(node, fake, pex_root), Kubelet(node.registration_socket, driver=DRIVER) as k:
        assert k.prepare([claim])[claim.uid].error == ""
    path = cdi.spec_path(claim.uid, cdi_dir=node.cdi_dir)
    written = path.read_text()
    path.unlink()  # /var/run/cdi is tmpfs: a reboot empties it, the checkpoint stays
    with plugin(node, fake, pex_root):
        assert path.read_text() == written


@pytest.mark.parametrize("point", FAULT_POINTS, ids=FAULT_POINTS)
def test_crash_point(node: Node, fake: FakeKube, pex_root: Path, point: str) -> None:
    claim = make_claim(fake, "kiosk", params=config(mode="1280x720@60", transform="rotate-90"))
    if point.startswith("unprepare"):
        with plugin(node, fake, pex_root), Kubelet(node.registration_socket,
                                                   driver=DRIVER) as k:
            assert k.prepare([claim])[claim.uid].error == ""
    # A claim's mode is applied, never written into the Display: that spec is a person's.
    assert display_spec(fake, HDMI) == {}

    with plugin(node, fake, pex_root, fault=point) as process, Kubelet(
        node.registration_socket, driver=DRIVER
    ) as k:
        call = k.prepare if point.startswith("prepare") else k.unprepare
        dies(process, lambda: call([claim]))

    with plugin(node, fake, pex_root), Kubelet(node.registration_socket, driver=DRIVER) as k:
        check_invariants(node)
        if point.startswith("prepare"):
            answer = k.prepare([claim])[claim.uid]
            assert answer.error == "" and [d.device_name for d in answer.devices] == [HDMI]
            assert node.checkpoint()[claim.uid]["state"] == "prepared"
            assert cdi.spec_path(claim.uid, cdi_dir=node.cdi_dir).exists()
            assert "mode=1280x720@60" in (node.etc / "weston.ini").read_text()
        assert k.unprepare([claim]) == {claim.uid: ""}
        check_invariants(node)
        assert node.checkpoint() == {}
        assert cdi.list_specs(cdi_dir=node.cdi_dir) == ()
        assert display_spec(fake, HDMI) == {}
        assert "mode=1920x1080@60" in (node.etc / "weston.ini").read_text()


def test_start_undoes_started_prepare_of_deleted_claim(
    node: Node, fake: FakeKube, pex_root: Path
) -> None:
    claim = make_claim(fake, "kiosk", params=config(mode="1280x720@60"))
    with plugin(node, fake, pex_root, fault="prepare-cdi-written") as process, Kubelet(
        node.registration_socket, driver=DRIVER
    ) as k:
        dies(process, lambda: k.prepare([claim]))
    assert node.checkpoint()[claim.uid]["state"] == "started"
    assert "mode=1280x720@60" in (node.etc / "weston.ini").read_text()
    sync_client(fake.url).delete(ResourceClaim, claim.name, namespace="default")
    with plugin(node, fake, pex_root):
        assert node.checkpoint() == {}
        assert cdi.list_specs(cdi_dir=node.cdi_dir) == ()
        assert "mode=1920x1080@60" in (node.etc / "weston.ini").read_text()
        assert display_spec(fake, HDMI) == {}


# --- a mode change on a real compositor ----------------------------------------------------


def _headless_size(socket: Path) -> tuple[int, int, int]:
    (output,) = list_outputs(socket, timeout=10.0)
    return output.mode.width, output.mode.height, output.transform.value


def test_without_the_layout_module_a_mode_change_restarts_the_compositor(
        node: Node, fake: FakeKube, pex_root: Path) -> None:
    """A stock shell has no control socket: the restart is the fallback that applies a mode."""
    node.etc.mkdir(parents=True)
    (node.etc / "weston.ini").write_text(INITIAL_INI)
    claim = make_claim(fake, "kiosk", params=config(mode="1280x720@60"))
    with (
        weston(node, pex_root) as socket,
        plugin(node, fake, pex_root, alias="HDMI-A-1=headless"),
        Kubelet(node.registration_socket, driver=DRIVER) as k,
    ):
        assert _headless_size(socket)[:2] == (1920, 1080)
        before = (node.etc / "weston.pid").read_text()
        assert k.prepare([claim])[claim.uid].error == ""
        assert (node.etc / "weston.pid").read_text() != before
        assert _headless_size(socket)[:2] == (1280, 720)
        assert display_spec(fake, HDMI) == {}
        assert k.unprepare([claim]) == {claim.uid: ""}
        assert _headless_size(socket)[:2] == (1920, 1080)
        assert display_spec(fake, HDMI) == {}


# --- a claim's mode across a pod roll ---------------------------------------------------------

PERSON_MODE, CLAIM_MODE, EDITED_MODE = "1280x720@60", "1024x768@60", "1600x900@60"
ROLL_ALIAS = "HDMI-A-1=headless"


def _declare(node: Node, fake: FakeKube, pex_root: Path) -> None:
    """The declare init container: flags for the simulated card and API, env as the manifest
    gives it (NODE_NAME)."""
    argv = [
        *binary_argv("declare"), "declare",
        f"--sysfs-root={sysfs_root(node.root)}", f"--dev-root={dev_root(node.root)}",
        f"--config={node.etc / 'weston.ini'}", f"--runtime-dir={node.runtime_dir}",
        f"--shell={SHELL}", f"--output-alias={ROLL_ALIAS}", f"--api-server={fake.url}",
    ]
    done = subprocess.run(["setpriv", "--pdeathsig", "KILL", "--", *argv],
                          env=binary_env(pex_root, NODE_NAME=NODE), capture_output=True,
                          timeout=START_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr.decode()


@contextlib.contextmanager
def pod(node: Node, fake: FakeKube, pex_root: Path) -> Iterator[tuple[Path, Process]]:
    """One pod of the DaemonSet: a fresh emptyDir, declare, weston, the operator (started once
    weston answers, so its start-up restart is done when its registration socket accepts)."""
    shutil.rmtree(node.etc, ignore_errors=True)
    node.etc.mkdir(parents=True)
    _declare(node, fake, pex_root)
    with (
        weston(node, pex_root) as socket,
        plugin(node, fake, pex_root, alias=ROLL_ALIAS) as operator,
    ):
        yield socket, operator


def _size(socket: Path) -> str:
    width, height, _ = _headless_size(socket)
    return f"{width}x{height}@60"


def test_a_claims_mode_survives_a_roll_and_release_restores_the_persons_mode(
    tmp_path: Path, fake: FakeKube, pex_root: Path
) -> None:
    node = Node(tmp_path)
    others = tuple(parse_mode(m) for m in (EDITED_MODE, PERSON_MODE, CLAIM_MODE))
    write_tree(tmp_path, SimCard(connectors=(
        sim_monitor("HDMI-A", 1, Mode(1920, 1080, 60000), others),)))
    sync_client(fake.url).patch(DisplayResource, display_name(NODE, HDMI),
                                {"spec": {"mode": PERSON_MODE}}, patch_type=PatchType.MERGE)
    first = make_claim(fake, "first", params=config(mode=CLAIM_MODE))
    second = make_claim(fake, "second", params=config(mode=CLAIM_MODE))
    with pod(node, fake, pex_root) as (socket, operator), Kubelet(
            node.registration_socket, driver=DRIVER) as k:
        # A new pod with no claim sets each mode once: declare's start mode stands.
        assert _size(socket) == PERSON_MODE
        assert not operator.log_contains("sent SIGTERM")
        assert k.prepare([first])[first.uid].error == ""
        assert _size(socket) == CLAIM_MODE
    with pod(node, fake, pex_root) as (socket, operator), Kubelet(
            node.registration_socket, driver=DRIVER) as k:
        # declare started weston at the Display's mode; the operator's start put the claim's
        # back, and the Display still says what the person set.
        assert _size(socket) == CLAIM_MODE
        assert operator.log_contains("the operator started: the claims' settings")
        assert display_spec(fake, HDMI) == {"mode": PERSON_MODE}
        assert k.unprepare([first]) == {first.uid: ""}
        assert _size(socket) == PERSON_MODE

        assert k.prepare([second])[second.uid].error == ""
        assert _size(socket) == CLAIM_MODE
        # A person edits the Display during the claim: the claim's mode still applies.
        sync_client(fake.url).patch(DisplayResource, display_name(NODE, HDMI),
                                    {"spec": {"mode": EDITED_MODE}}, patch_type=PatchType.MERGE)
    with pod(node, fake, pex_root) as (socket, _), Kubelet(
            node.registration_socket, driver=DRIVER) as k:
        assert _size(socket) == CLAIM_MODE
        assert k.unprepare([second]) == {second.uid: ""}
        # Released: the person's edit is what applies, and it was never overwritten.
        assert _size(socket) == EDITED_MODE
        assert display_spec(fake, HDMI) == {"mode": EDITED_MODE}


def _scrape(port: int) -> dict[str, float]:
    """The operator's metrics: each sample by its name and labels as written."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    samples = {}
    for line in text.decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def test_prepare_and_restart_metrics_are_recorded(node: Node, fake: FakeKube,
                                                  pex_root: Path) -> None:
    node.etc.mkdir(parents=True)
    (node.etc / "weston.ini").write_text(INITIAL_INI)
    fake.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    moded = make_claim(fake, "moded", params=config(mode="1280x720@60"))
    bad = make_claim(fake, "bad", params=config(mode="3840x2160@60"))
    port = free_port()
    with (
        weston(node, pex_root),
        plugin(node, fake, pex_root, alias="HDMI-A-1=headless", metrics_port=port) as operator,
        Kubelet(node.registration_socket, driver=DRIVER) as k,
    ):
        # The start-up's own restart (this hand-written weston.ini is not what the operator
        # derives, and a stock shell cannot be asked what it runs) is done once the
        # registration socket accepts.
        assert _scrape(port)['display_compositor_restarts_total{reason="start"}'] == 1
        # Prepares are refused until the watchdog has seen the compositor answer.
        operator.wait_until(lambda: k.prepare([moded])[moded.uid].error == "", timeout=30.0,
                            what="prepare ok")
        refused = _scrape(port).get('display_prepare_errors_total{reason="refused"}', 0.0)
        # The restart for the moded claim's mode may not have been seen answering yet (the
        # watchdog probes every half second): a refusal then is retried, as the kubelet does.
        errors: list[str] = []

        def bad_answered() -> bool:
            errors.append(k.prepare([bad])[bad.uid].error)
            return not errors[-1].startswith("the compositor does not answer")

        operator.wait_until(bad_answered, timeout=30.0, what="the bad claim answered")
        assert "field 'mode' value '3840x2160@60'" in errors[-1]
        assert k.unprepare([moded]) == {moded.uid: ""}
        samples = _scrape(port)
    # Without the layout module, one restart for the claim's mode, one for its release; the
    # output was changed by a restart three times, the start-up's included.
    assert samples['display_compositor_restarts_total{reason="unsupported"}'] == 2
    assert samples['display_output_reconfigures_total{output="headless",result="fallback"}'] == 3
    assert samples['display_prepare_errors_total{reason="claim"}'] == 1
    assert (samples.get('display_prepare_errors_total{reason="refused"}', 0.0)
            == refused + len(errors) - 1)
    # The moded claim and the bad one were timed; refused attempts do no work and are not.
    assert samples["display_prepare_duration_seconds_count"] == 2
    assert samples["display_prepare_duration_seconds_sum"] > 0


def test_operator_with_publisher_refuses_prepares_while_the_compositor_hangs(
    node: Node, fake: FakeKube, pex_root: Path
) -> None:
    """The whole operator: slice published, metrics served, a hang taints and refuses, recovery."""
    node.etc.mkdir(parents=True)
    (node.etc / "weston.ini").write_text(INITIAL_INI)
    claim = make_claim(fake, "kiosk")
    # The slice is owned by the Node object, as in a cluster.
    fake.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    port = free_port()
    with (
        weston(node, pex_root),
        plugin(node, fake, pex_root, alias="HDMI-A-1=headless", metrics_port=port) as operator,
        Kubelet(node.registration_socket, driver=DRIVER) as k,
    ):
        operator.wait_until(
            lambda: set(slice_devices(fake)) == {HDMI, DP}, timeout=30.0, what="slice published"
        )
        # The watchdog has to see the compositor answer once before prepares are accepted.
        operator.wait_until(
            lambda: k.prepare([claim])[claim.uid].error == "", timeout=30.0, what="prepare ok"
        )
        assert k.unprepare([claim]) == {claim.uid: ""}
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        assert b"display_slice_publishes_total" in metrics

        pid = int((node.etc / "weston.pid").read_text())
        os.kill(pid, signal.SIGSTOP)
        try:
            operator.wait_until(
                lambda: bool(slice_devices(fake).get(HDMI)),
                timeout=30.0,
                what="devices tainted",
            )
            refused = k.prepare([claim])[claim.uid].error
            assert "compositor does not answer" in refused
            # A hang is a crash: the watchdog SIGKILLs weston (no restart order).
            operator.wait_until(
                lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid),
                timeout=30.0,
                what="watchdog killed the hung compositor",
            )
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        assert operator.log_contains("SIGKILL") or operator.log_contains("killed")


def test_sighup_rereads_sysfs_at_once(node: Node, fake: FakeKube, pex_root: Path) -> None:
    """No uevent reaches a simulated card: SIGHUP is how a person (or simnode) asks for a rescan.

    The periodic resync is an hour here, so only the signal can make the slice follow.
    """
    node.etc.mkdir(parents=True)
    (node.etc / "weston.ini").write_text(INITIAL_INI)
    fake.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    with (
        weston(node, pex_root),
        plugin(node, fake, pex_root, alias="HDMI-A-1=headless", metrics_port=free_port(),
               extra_args=["--hotplug-resync=3600"]) as operator,
    ):
        operator.wait_until(
            lambda: set(slice_devices(fake)) == {HDMI, DP}, timeout=30.0, what="slice published"
        )
        hotplug(node.root, "card0-DP-1", status="disconnected")
        operator.send_signal(signal.SIGHUP)
        operator.wait_until(
            lambda: set(slice_devices(fake)) == {HDMI}, timeout=30.0, what="slice drops DP-1"
        )
        assert operator.log_contains("re-reading sysfs on request")


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


# --- no growth over many cycles -------------------------------------------------------------


def _usage(pid: int) -> tuple[int, int, int]:
    """Open files, threads and RSS (KiB) of `pid`."""
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return fds, int(status["Threads"]), int(status["VmRSS"].split()[0])


CYCLES = 1000
WARM_UP = 50


def test_cycles_do_not_grow_files_threads_or_memory(
    node: Node, fake: FakeKube, pex_root: Path
) -> None:
    claim = make_claim(fake, "kiosk", devices=(HDMI, DP))
    with plugin(node, fake, pex_root) as process, Kubelet(node.registration_socket,
                                                          driver=DRIVER) as k:
        idle_threads = _usage(process.pid)[1]
        for cycle in range(CYCLES + WARM_UP):
            if cycle == WARM_UP:
                before = _usage(process.pid)
            assert k.prepare([claim])[claim.uid].error == ""
            assert k.unprepare([claim]) == {claim.uid: ""}
        after = _usage(process.pid)
    print(f"after {CYCLES} cycles: fds {before[0]}->{after[0]}, threads {before[1]}->"
          f"{after[1]}, RSS {before[2]}->{after[2]} KiB")
    assert after[0] <= before[0]
    # gRPC's pool starts a worker whenever none is idle at the moment a call arrives, up to
    # its cap: a bound, not growth.
    assert after[1] <= idle_threads + WORKERS
    assert after[2] - before[2] < 8 * 1024


# --- per-claim sockets from the layout module ------------------------------------------------

X1_SIZE = (1920, 1080)  # HDMI-A-1's preferred mode, as X1
X2_SIZE = (1280, 1024)  # DP-1's, as X2
RED = (255, 0, 0)
GREEN = (0, 255, 0)
BLACK = (0, 0, 0)
LAYOUT_WAIT_S = 30.0
CONTAINER_DIR = Path("/var/run/display.liken.sh")
LAYOUT_ALIASES = ("HDMI-A-1=X1", "DP-1=X2")


@pytest.fixture(scope="module")
def layout_shell(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The layout module, built from source as the weston image builds it."""
    return build_layout(tmp_path_factory.mktemp("layout"))


@pytest.fixture
def layout_node(layout_shell: Path) -> Iterator[Node]:
    """A node whose weston.ini makes the layout module the shell, X1 and X2 its outputs.

    Its root is a short temp dir: claims' socket paths must fit sun_path (107 bytes).
    """
    with tempfile.TemporaryDirectory(prefix="dl-") as tmp:
        node = make_node(Path(tmp))
        node.etc.mkdir(parents=True)
        outputs = "".join(
            f"\n[output]\nname={name}\nmode={w}x{h}@60\n"
            for name, (w, h) in (("X1", X1_SIZE), ("X2", X2_SIZE))
        )
        layout = LayoutSockets.beside(node.etc / "weston.ini").section()
        (node.etc / "weston.ini").write_text(f"[core]\nshell={layout_shell}\n\n{layout}{outputs}")
        yield node


@contextlib.contextmanager
def layout_compositor(node: Node, pex_root: Path) -> Iterator[None]:
    with xvfb(screen=(4096, 2160), log_dir=node.root) as x, weston(
        node, pex_root, x11_display=x.display
    ):
        yield


def _layout_plugin(node: Node, fake: FakeKube, pex_root: Path,
                   layout_shell: Path) -> contextlib.AbstractContextManager[Process]:
    return plugin(node, fake, pex_root, layout_shell=layout_shell, aliases=LAYOUT_ALIASES,
                  container_dir=CONTAINER_DIR)


def _host_socket(node: Node, uid: str) -> Path:
    """The claim's socket on the node, from its CDI spec: WAYLAND_DISPLAY mapped back through
    the spec's one mount, as the consumer's container sees it."""
    spec = json.loads(cdi.spec_path(uid, cdi_dir=node.cdi_dir).read_text())
    (device,) = spec["devices"]
    edits = device["containerEdits"]
    (mount,) = edits["mounts"]
    env = dict(e.split("=", 1) for e in edits["env"])
    assert env["XDG_RUNTIME_DIR"] == mount["containerPath"]
    inside = Path(env["WAYLAND_DISPLAY"])
    return Path(mount["hostPath"]) / inside.relative_to(mount["containerPath"])


def _wait_colour(node: Node, output: str, colour: tuple[int, int, int]) -> None:
    """Capture `output` until its corners and centre are `colour`."""
    deadline = time.monotonic() + LAYOUT_WAIT_S
    with LayoutCapture(LayoutSockets.beside(node.etc / "weston.ini").capture,
                       timeout=LAYOUT_WAIT_S) as capture:
        while True:
            frame = capture.frame(output)
            w, h = frame.header.width, frame.header.height
            points = ((0, 0), (w - 1, h - 1), (w // 2, h // 2))
            seen = [frame.rgb(x, y) for x, y in points]
            if all(c == colour for c in seen):
                return
            if time.monotonic() > deadline:
                pytest.fail(f"{output}: wanted {colour} everywhere, last saw {seen}")


def _shown_on_own_outputs(node: Node, sockets: Mapping[str, Path]) -> None:
    """A red client through the first socket fills X1, a green one through the second X2."""
    (red_socket, green_socket) = sockets.values()
    with (
        SolidClient(red_socket, colour=RED) as red,
        SolidClient(green_socket, colour=GREEN) as green,
    ):
        _wait_colour(node, "X1", RED)
        _wait_colour(node, "X2", GREEN)
        assert red.configured[-1] == X1_SIZE and green.configured[-1] == X2_SIZE


def test_layout_claims_get_their_own_sockets_on_their_own_outputs(
    layout_node: Node, fake: FakeKube, pex_root: Path, layout_shell: Path
) -> None:
    node = layout_node
    on_x1 = make_claim(fake, "left", devices=(HDMI,))
    on_x2 = make_claim(fake, "right", devices=(DP,))
    with (
        layout_compositor(node, pex_root),
        _layout_plugin(node, fake, pex_root, layout_shell),
        Kubelet(node.registration_socket, driver=DRIVER) as k,
    ):
        answers = k.prepare([on_x1, on_x2])
        assert {uid: a.error for uid, a in answers.items()} == {on_x1.uid: "", on_x2.uid: ""}
        sockets = {c.uid: _host_socket(node, c.uid) for c in (on_x1, on_x2)}
        claims_dir = node.runtime_dir / "claims"
        for uid, path in sockets.items():
            assert path == claims_dir / uid / "wayland-0"
            # What the consumer's mount holds: its own socket, nothing else.
            assert [p.name for p in path.parent.iterdir()] == ["wayland-0"]
            assert path.is_socket()
        assert sorted(p.name for p in claims_dir.iterdir()) == sorted(sockets)
        _shown_on_own_outputs(node, sockets)

        assert k.unprepare([on_x1]) == {on_x1.uid: ""}
        assert not (claims_dir / on_x1.uid).exists()
        assert sockets[on_x2.uid].is_socket()
        with SolidClient(sockets[on_x2.uid], colour=GREEN):
            _wait_colour(node, "X2", GREEN)
            _wait_colour(node, "X1", BLACK)
        assert k.unprepare([on_x2]) == {on_x2.uid: ""}
        assert list(claims_dir.iterdir()) == []
        assert cdi.list_specs(cdi_dir=node.cdi_dir) == ()


def test_layout_sockets_come_back_after_compositor_and_plugin_restart(
    layout_node: Node, fake: FakeKube, pex_root: Path, layout_shell: Path
) -> None:
    node = layout_node
    claims = (make_claim(fake, "left", devices=(HDMI,)), make_claim(fake, "right", devices=(DP,)))
    with layout_compositor(node, pex_root):
        with (
            _layout_plugin(node, fake, pex_root, layout_shell),
            Kubelet(node.registration_socket, driver=DRIVER) as k,
        ):
            assert all(a.error == "" for a in k.prepare(list(claims)).values())
        sockets = {c.uid: _host_socket(node, c.uid) for c in claims}
        # The compositor crashes while the plugin is down: its module forgets every claim.
        os.kill(int((node.etc / "weston.pid").read_text()), signal.SIGKILL)
    with layout_compositor(node, pex_root), _layout_plugin(node, fake, pex_root, layout_shell):
        with LayoutControl(LayoutSockets.beside(node.etc / "weston.ini").control) as control:
            listed = {(c.claim_uid, c.path) for c in control.list_claim_sockets()}
        assert listed == {(f"{c.uid}.{d}", sockets[c.uid])
                          for c, d in zip(claims, (HDMI, DP), strict=True)}
        _shown_on_own_outputs(node, sockets)


def test_layout_mode_change_is_live_and_keeps_the_other_claims_client(
    layout_node: Node, fake: FakeKube, pex_root: Path, layout_shell: Path
) -> None:
    node = layout_node
    plain = make_claim(fake, "plain", devices=(DP,))
    moded = make_claim(fake, "moded", params=config(mode="1280x720@60"))
    with (
        layout_compositor(node, pex_root),
        _layout_plugin(node, fake, pex_root, layout_shell) as operator,
        Kubelet(node.registration_socket, driver=DRIVER) as k,
    ):
        assert k.prepare([plain])[plain.uid].error == ""
        before = (node.etc / "weston.pid").read_text()
        with SolidClient(_host_socket(node, plain.uid), colour=GREEN) as green:
            _wait_colour(node, "X2", GREEN)
            assert k.prepare([moded])[moded.uid].error == ""
            assert (node.etc / "weston.pid").read_text() == before
            assert not operator.log_contains("sent SIGTERM")
            with SolidClient(_host_socket(node, moded.uid), colour=RED) as red:
                _wait_colour(node, "X1", RED)
                assert red.configured[-1] == (1280, 720)
            assert green.roundtrip(10.0) and not green.closed.is_set()
            _wait_colour(node, "X2", GREEN)
        assert k.unprepare([moded, plain]) == {moded.uid: "", plain.uid: ""}
        assert list((node.runtime_dir / "claims").iterdir()) == []


def test_layout_module_unreachable_fails_the_claim_and_writes_nothing(
    layout_node: Node, fake: FakeKube, pex_root: Path, layout_shell: Path
) -> None:
    node = layout_node
    claim = make_claim(fake, "kiosk")
    with (
        _layout_plugin(node, fake, pex_root, layout_shell),
        Kubelet(node.registration_socket, driver=DRIVER) as k,
    ):
        error = k.prepare([claim])[claim.uid].error
        control = LayoutSockets.beside(node.etc / "weston.ini").control
        assert f"cannot connect to {control}: ENOENT" in error
        assert cdi.list_specs(cdi_dir=node.cdi_dir) == ()
        assert node.checkpoint()[claim.uid]["state"] == "started"
        assert k.unprepare([claim]) == {claim.uid: ""}
        assert node.checkpoint() == {}
        assert not (node.runtime_dir / "claims" / claim.uid).exists()


@contextlib.contextmanager
def headless_layout_node(layout_shell: Path) -> Iterator[Node]:
    """A node for headless weston (one output, `headless`) with the layout module as shell."""
    with tempfile.TemporaryDirectory(prefix="dh-") as tmp:
        node = make_node(Path(tmp))
        node.etc.mkdir(parents=True)
        layout = LayoutSockets.beside(node.etc / "weston.ini").section()
        (node.etc / "weston.ini").write_text(
            f"[core]\nshell={layout_shell}\n\n{layout}\n[output]\nname=headless\nmode=320x240\n"
        )
        yield node


SOCKET_FAULTS = ("prepare-socket-created", "prepare-cdi-written", "unprepare-socket-removed")


@pytest.mark.parametrize("point", SOCKET_FAULTS, ids=SOCKET_FAULTS)
def test_layout_crash_around_the_socket_step(
    fake: FakeKube, pex_root: Path, layout_shell: Path, point: str
) -> None:
    """A plugin killed next to the socket step, restarted: the claim ends prepared with its
    socket (prepare) or gone with its socket and directory (unprepare)."""
    claim = make_claim(fake, "kiosk")
    with headless_layout_node(layout_shell) as node, weston(node, pex_root):
        control = LayoutSockets.beside(node.etc / "weston.ini").control

        def listed() -> set[str]:
            with LayoutControl(control) as connection:
                return {c.claim_uid for c in connection.list_claim_sockets()}

        run = functools.partial(plugin, node, fake, pex_root, layout_shell=layout_shell,
                                alias="HDMI-A-1=headless")
        if point.startswith("unprepare"):
            with run(), Kubelet(node.registration_socket, driver=DRIVER) as k:
                assert k.prepare([claim])[claim.uid].error == ""
        with run(fault=point) as process, Kubelet(node.registration_socket,
                                                  driver=DRIVER) as k:
            call = k.prepare if point.startswith("prepare") else k.unprepare
            dies(process, lambda: call([claim]))
        with run(), Kubelet(node.registration_socket, driver=DRIVER) as k:
            check_invariants(node)
            if point.startswith("prepare"):
                assert k.prepare([claim])[claim.uid].error == ""
                assert listed() == {f"{claim.uid}.{HDMI}"}
                with SolidClient(_host_socket(node, claim.uid), colour=GREEN):
                    _wait_colour(node, "headless", GREEN)
            else:
                assert node.checkpoint() == {}
            assert k.unprepare([claim]) == {claim.uid: ""}
            assert listed() == set()
            assert list((node.runtime_dir / "claims").iterdir()) == []


def test_layout_watchdog_restores_sockets_when_the_compositor_comes_back(
    fake: FakeKube, pex_root: Path, layout_shell: Path
) -> None:
    """With the publisher, a compositor that crashes and comes back gets the claims' sockets
    again without a plugin restart: the watchdog's listener restores them."""
    fake.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    claim = make_claim(fake, "kiosk")
    with (
        headless_layout_node(layout_shell) as node,
        plugin(node, fake, pex_root, layout_shell=layout_shell, alias="HDMI-A-1=headless",
               metrics_port=free_port()) as operator,
    ):
        with weston(node, pex_root), Kubelet(node.registration_socket, driver=DRIVER) as k:
            operator.wait_until(lambda: k.prepare([claim])[claim.uid].error == "",
                                timeout=30.0, what="prepare ok")
            socket = _host_socket(node, claim.uid)
            outages = operator.log_text().count("compositor unavailable")
            # The watchdog's first "available" may have restored the claim already.
            restores = operator.log_text().count("restored the sockets of 1 of 1")
            os.kill(int((node.etc / "weston.pid").read_text()), signal.SIGKILL)
            # Only an outage the watchdog sees makes it call its listeners.
            operator.wait_until(
                lambda: operator.log_text().count("compositor unavailable") > outages,
                timeout=30.0, what="the watchdog saw the crash",
            )
        with weston(node, pex_root):
            operator.wait_until(
                lambda: operator.log_text().count("restored the sockets of 1 of 1") > restores,
                timeout=30.0, what="sockets restored",
            )
            with SolidClient(socket, colour=GREEN):
                _wait_colour(node, "headless", GREEN)
