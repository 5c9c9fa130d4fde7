from __future__ import annotations

import dataclasses
import json
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest

from draplugin.driver import delivery
from draplugin.driver.delivery import DeliveryError, LayoutDelivery, SharedDelivery
from draplugin.testing import settings as make_settings
from libdisplay import cdi
from libdisplay.cdi import ClaimedOutput

UID = "0c1d-claim"
HDMI = ClaimedOutput(device="card0-hdmi-a-1", output="HDMI-A-1")
DP = ClaimedOutput(device="card0-dp-1", output="DP-1")
INSIDE = PurePosixPath("/var/run/display.liken.sh")


@pytest.fixture
def root() -> Iterator[Path]:
    # Short: the control socket's path must fit sun_path.
    with tempfile.TemporaryDirectory(prefix="dv-") as tmp:
        yield Path(tmp)


def layout(root: Path, *, timeout: float = 5.0) -> LayoutDelivery:
    return LayoutDelivery(control=root / "layout.sock", host_dir=root / "run",
                          container_dir=INSIDE, cdi_dir=root / "cdi", timeout=timeout)


def _env(spec: dict[str, object], index: int) -> dict[str, str]:
    devices = spec["devices"]
    assert isinstance(devices, list)
    return dict(e.split("=", 1) for e in devices[index]["containerEdits"]["env"])


def _mounts(spec: dict[str, object], index: int) -> list[dict[str, object]]:
    devices = spec["devices"]
    assert isinstance(devices, list)
    mounts: list[dict[str, object]] = devices[index]["containerEdits"]["mounts"]
    return mounts


def test_layout_spec_of_one_device_mounts_only_the_claims_dir(root: Path) -> None:
    spec = layout(root).build_spec(UID, (HDMI,))
    assert _mounts(spec, 0) == [{
        "hostPath": f"{root}/run/claims/{UID}",
        "containerPath": f"{INSIDE}/claims/{UID}",
        "options": list(cdi.MOUNT_OPTIONS),
    }]
    assert _env(spec, 0) == {
        "XDG_RUNTIME_DIR": f"{INSIDE}/claims/{UID}",
        "WAYLAND_DISPLAY": f"{INSIDE}/claims/{UID}/wayland-0",
        "WAYLAND_DISPLAY_CARD0_HDMI_A_1": f"{INSIDE}/claims/{UID}/wayland-0",
        "DISPLAY_OUTPUT_CARD0_HDMI_A_1": "HDMI-A-1",
        "DISPLAY_OUTPUT": "HDMI-A-1",
    }


def test_layout_spec_of_two_devices_gives_each_its_own_socket(root: Path) -> None:
    spec = layout(root).build_spec(UID, (HDMI, DP))
    assert _mounts(spec, 0) == _mounts(spec, 1)
    first, second = _env(spec, 0), _env(spec, 1)
    assert first["WAYLAND_DISPLAY"] == f"{INSIDE}/claims/{UID}/wayland-0"
    assert second["WAYLAND_DISPLAY"] == f"{INSIDE}/claims/{UID}/wayland-1"
    assert second["WAYLAND_DISPLAY_CARD0_DP_1"] == second["WAYLAND_DISPLAY"]
    assert "DISPLAY_OUTPUT" not in first and "DISPLAY_OUTPUT" not in second


def test_write_spec_writes_what_build_spec_builds(root: Path) -> None:
    target = layout(root)
    target.write_spec(UID, (HDMI,))
    written = json.loads(cdi.spec_path(UID, cdi_dir=root / "cdi").read_text())
    assert written == target.build_spec(UID, (HDMI,))


def test_no_module_fails_create_naming_the_socket_and_makes_no_dir(root: Path) -> None:
    with pytest.raises(DeliveryError) as caught:
        layout(root).create_sockets(UID, (HDMI,))
    assert f"cannot connect to {root / 'layout.sock'}: ENOENT" in str(caught.value)
    assert not (root / "run" / "claims" / UID).exists()


def test_no_module_still_removes_the_claims_dir(root: Path) -> None:
    target = layout(root)
    stale = target.claim_dir(UID) / "wayland-0"
    stale.parent.mkdir(parents=True)
    stale.write_text("left by a killed compositor")
    assert target.remove_sockets(UID) is True
    assert not target.claim_dir(UID).exists()
    assert target.remove_sockets(UID) is False
    assert target.held() == frozenset()


def test_module_that_never_answers_fails_remove_and_keeps_the_dir(root: Path) -> None:
    target = layout(root, timeout=0.2)
    target.claim_dir(UID).mkdir(parents=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
        silent.bind(str(target.control))
        silent.listen()
        with pytest.raises(DeliveryError, match="no answer within 0.2 s"):
            target.remove_sockets(UID)
    assert target.claim_dir(UID).is_dir()


def test_shared_delivery_mounts_the_whole_dir_and_has_no_sockets(root: Path) -> None:
    shared = delivery.from_settings(dataclasses.replace(make_settings(root), delivery="shared"))
    assert isinstance(shared, SharedDelivery)
    shared.create_sockets(UID, (HDMI,))
    shared.write_spec(UID, (HDMI,))
    assert shared.remove_sockets(UID) is False and shared.held() == frozenset()
    written = json.loads(cdi.spec_path(UID, cdi_dir=root / "cdi").read_text())
    assert _mounts(written, 0)[0]["hostPath"] == str(root / "run")
    assert _env(written, 0)["WAYLAND_DISPLAY"] == "wayland-0"


def test_layout_is_the_default_with_the_control_socket_beside_weston_ini(root: Path) -> None:
    chosen = delivery.from_settings(make_settings(root))
    assert isinstance(chosen, LayoutDelivery)
    assert chosen.control == root / "etc" / "layout.sock"
    assert chosen.claim_dir(UID) == root / "run" / "claims" / UID
