from __future__ import annotations

import json
import re
from pathlib import Path, PurePosixPath

import pytest
import yaml

from libdisplay import cdi
from libdisplay.cdi import CdiNameError, ClaimedOutput, SocketDelivery

UID_LETTER = "f3b1c2d4-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
UID_DIGIT = "0a1b2c3d-4e5f-4061-8c9d-0e1f2a3b4c5d"
HDMI = ClaimedOutput("card0-hdmi-a-1", "HDMI-A-1")
DP = ClaimedOutput("card0-dp-1", "DP-1")
DELIVERY = SocketDelivery(
    host_dir=PurePosixPath("/var/run/display.liken.sh"),
    container_dir=PurePosixPath("/run/display"),
    socket_name="wayland-0",
)

# The CDI library's rules (pkg/parser/parser.go, pkg/cdi/device.go, spec.go), restated here so
# the test does not trust the module's own regular expressions.
_VENDOR_RE = re.compile(r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_CLASS_RE = re.compile(r"^[A-Za-z]([A-Za-z0-9_-]*[A-Za-z0-9])?$")
_DEVICE_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")
_KNOWN_VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")


def _check_like_cdi(spec: dict[str, object]) -> None:
    assert set(spec) == {"cdiVersion", "kind", "devices"}
    assert spec["cdiVersion"] in _KNOWN_VERSIONS
    vendor, _, klass = str(spec["kind"]).partition("/")
    assert _VENDOR_RE.match(vendor) and _CLASS_RE.match(klass)
    devices = spec["devices"]
    assert isinstance(devices, list) and devices, "invalid spec, no devices"
    for device in devices:
        assert set(device) == {"name", "containerEdits"}
        assert _DEVICE_RE.match(device["name"])
        edits = device["containerEdits"]
        assert edits, "invalid device, empty device edits"
        assert set(edits) <= {"env", "mounts"}
        assert all(re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", e) for e in edits["env"])
        for mount in edits["mounts"]:
            # No "type": that field needs 0.4.0.
            assert set(mount) == {"hostPath", "containerPath", "options"}
            assert all(isinstance(o, str) for o in mount["options"])


@pytest.mark.parametrize(
    ("uid", "version"),
    [(UID_LETTER, "0.3.0"), (UID_DIGIT, "0.5.0")],
    ids=["uid-led-by-a-letter", "uid-led-by-a-digit"],
)
def test_spec_for_one_monitor(uid: str, version: str) -> None:
    spec = cdi.build_spec(uid, [HDMI], DELIVERY)
    _check_like_cdi(spec)
    assert spec == {
        "cdiVersion": version,
        "kind": "k8s.display.liken.sh/display",
        "devices": [
            {
                "name": f"{uid}-card0-hdmi-a-1",
                "containerEdits": {
                    "env": [
                        "XDG_RUNTIME_DIR=/run/display",
                        "WAYLAND_DISPLAY=wayland-0",
                        "DISPLAY_OUTPUT_CARD0_HDMI_A_1=HDMI-A-1",
                        "DISPLAY_OUTPUT=HDMI-A-1",
                    ],
                    "mounts": [
                        {
                            # The directory, never the socket file: a file bind mount would
                            # pin the dead socket across a compositor restart.
                            "hostPath": "/var/run/display.liken.sh",
                            "containerPath": "/run/display",
                            "options": ["rbind", "ro", "nosuid", "nodev", "noexec"],
                        }
                    ],
                },
            }
        ],
    }


def test_spec_for_two_monitors_names_each_output() -> None:
    spec = cdi.build_spec(UID_LETTER, [HDMI, DP], DELIVERY)
    _check_like_cdi(spec)
    devices = spec["devices"]
    assert isinstance(devices, list)
    envs = [d["containerEdits"]["env"] for d in devices]
    assert "DISPLAY_OUTPUT_CARD0_HDMI_A_1=HDMI-A-1" in envs[0]
    assert "DISPLAY_OUTPUT_CARD0_DP_1=DP-1" in envs[1]
    # Both devices may land in one container: no variable may say two things.
    assert not any(e.startswith("DISPLAY_OUTPUT=") for env in envs for e in env)


def test_device_ids_and_spec_path() -> None:
    assert cdi.device_ids(UID_DIGIT, [HDMI, DP]) == (
        f"k8s.display.liken.sh/display={UID_DIGIT}-card0-hdmi-a-1",
        f"k8s.display.liken.sh/display={UID_DIGIT}-card0-dp-1",
    )
    assert cdi.spec_path(UID_DIGIT) == Path(
        f"/var/run/cdi/k8s.display.liken.sh-display_{UID_DIGIT}.yaml"
    )


def test_the_json_file_is_yaml(tmp_path: Path) -> None:
    cdi.write_spec(UID_DIGIT, [HDMI, DP], DELIVERY, cdi_dir=tmp_path)
    text = cdi.spec_path(UID_DIGIT, cdi_dir=tmp_path).read_text()
    assert yaml.safe_load(text) == json.loads(text) == cdi.build_spec(UID_DIGIT, [HDMI, DP],
                                                                      DELIVERY)  # fmt: skip


def test_write_list_remove(tmp_path: Path) -> None:
    cdi_dir = tmp_path / "cdi"
    ids = cdi.write_spec(UID_LETTER, [HDMI], DELIVERY, cdi_dir=cdi_dir)
    assert ids == cdi.device_ids(UID_LETTER, [HDMI])
    cdi.write_spec(UID_DIGIT, [DP], DELIVERY, cdi_dir=cdi_dir)
    path = cdi.spec_path(UID_LETTER, cdi_dir=cdi_dir)
    assert path.stat().st_mode & 0o777 == 0o644
    # Other drivers' specs and stray files in the shared directory are not ours.
    (cdi_dir / f"k8s.liken.sh-gpu_{UID_LETTER}.yaml").write_text("{}")
    (cdi_dir / f"k8s.display.liken.sh-display_{UID_LETTER}.json").write_text("{}")
    (cdi_dir / f".k8s.display.liken.sh-display_{UID_DIGIT}.yaml.77.tmp").write_text("{")
    (cdi_dir / "k8s.display.liken.sh-display_bad_.yaml").write_text("{}")
    (cdi_dir / f"k8s.display.liken.sh-display_{UID_DIGIT}x.yaml").mkdir()
    assert cdi.list_specs(cdi_dir=cdi_dir) == (UID_DIGIT, UID_LETTER)
    assert cdi.remove_spec(UID_LETTER, cdi_dir=cdi_dir) is True
    assert cdi.remove_spec(UID_LETTER, cdi_dir=cdi_dir) is False
    assert cdi.list_specs(cdi_dir=cdi_dir) == (UID_DIGIT,)
    assert cdi.list_specs(cdi_dir=tmp_path / "missing") == ()


def test_rewriting_a_spec_replaces_it(tmp_path: Path) -> None:
    cdi.write_spec(UID_LETTER, [HDMI, DP], DELIVERY, cdi_dir=tmp_path)
    cdi.write_spec(UID_LETTER, [DP], DELIVERY, cdi_dir=tmp_path)
    spec = json.loads(cdi.spec_path(UID_LETTER, cdi_dir=tmp_path).read_text())
    assert [d["name"] for d in spec["devices"]] == [f"{UID_LETTER}-card0-dp-1"]
    assert [p.name for p in tmp_path.iterdir()] == [cdi.spec_path(UID_LETTER).name]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: cdi.build_spec("a/b", [HDMI], DELIVERY), "claim UID 'a/b'"),
        (lambda: cdi.build_spec("", [HDMI], DELIVERY), "claim UID ''"),
        (lambda: cdi.build_spec("abc-", [HDMI], DELIVERY), "claim UID 'abc-'"),
        (lambda: cdi.spec_path("../etc"), "claim UID '../etc'"),
        (lambda: cdi.device_ids("-x", [HDMI]), "claim UID '-x'"),
        (lambda: cdi.build_spec(UID_LETTER, [], DELIVERY), "at least one device"),
        (lambda: cdi.build_spec(UID_LETTER, [HDMI, HDMI], DELIVERY), "listed twice"),
        (lambda: ClaimedOutput("card0-HDMI-A-1", "HDMI-A-1"), "not a DNS label"),
        (lambda: ClaimedOutput("card0_hdmi", "HDMI-A-1"), "not a DNS label"),
        (lambda: ClaimedOutput("card0-hdmi-a-1", "HDMI A 1"), "not an output name"),
        (lambda: SocketDelivery(PurePosixPath("run/x"), PurePosixPath("/run/d"), "wayland-0"),
         "host_dir 'run/x'"),
        (lambda: SocketDelivery(PurePosixPath("/run/x"), PurePosixPath("/"), "wayland-0"),
         "container_dir '/'"),
        (lambda: SocketDelivery(PurePosixPath("/run/x"), PurePosixPath("/run/d"), "a/wayland-0"),
         "socket_name 'a/wayland-0'"),
    ],
    ids=["uid-slash", "uid-empty", "uid-trailing-dash", "path-traversal", "ids-bad-uid",
         "no-devices", "duplicate-device", "device-uppercase", "device-underscore",
         "output-spaces", "relative-host-dir", "container-root", "socket-in-subdir"],
)  # fmt: skip
def test_invalid_names_are_refused(make: object, message: str) -> None:
    with pytest.raises(CdiNameError, match=message):
        make()  # type: ignore[operator]


@pytest.mark.parametrize(
    ("names", "version"),
    [(["abc-card0-dp-1"], "0.3.0"), (["abc-x", "1bc-x"], "0.5.0"), (["Zed"], "0.3.0")],
    ids=["letters", "one-digit-led", "uppercase-letter"],
)
def test_minimum_version(names: list[str], version: str) -> None:
    assert cdi.minimum_version(names) == version


def test_kind_and_vendor_follow_the_reference_drivers() -> None:
    assert (cdi.VENDOR, cdi.CLASS, cdi.KIND) == (
        "k8s.display.liken.sh", "display", "k8s.display.liken.sh/display",
    )  # fmt: skip
    assert _VENDOR_RE.match(cdi.VENDOR) and _CLASS_RE.match(cdi.CLASS)
