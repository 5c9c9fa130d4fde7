"""What each image's base must hold for its binary to start (build.sh --dry-run's plan)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from deploy.images import capture_tls, cli_checks
from tests.deploy.manifests import base_packages, build_plan


def _base(repository: str, arg: str = "BASE_IMAGE") -> set[str]:
    return base_packages(build_plan()[f"ghcr.io/liken-sh/{repository}"].build_args[arg])


def test_capture_base_has_the_openssl_command_its_start_up_leaf_needs() -> None:
    # capture/tls.py makes the self-signed leaf it serves before a Secret exists with it.
    assert "openssl" in _base("display-capture")


def test_compositor_is_trixies_weston_14_on_python_3_13() -> None:
    assert {"weston", "python3.13"} <= _base("display-weston")
    assert "libweston-14-dev" in _base("display-weston", "BUILD_IMAGE")


def test_cli_base_has_the_library_whose_parser_the_smoke_run_compares() -> None:
    # deploy/images/ddcutil_parse.py calls libddcutil's ddca_parse_capabilities_string.
    assert {"ddcutil", "libddcutil4", "edid-decode"} <= _base("display-operator-cli")


def test_edid_decode_text_is_read_as_the_oracle_records_it(testdata: Path) -> None:
    edids = testdata / "edid"
    oracle = {e["file"]: e for e in json.loads((edids / "oracle.json").read_text())["files"]}
    for name in sorted(oracle)[::7]:
        text = subprocess.run(["edid-decode", "-c", str(edids / name)], capture_output=True,
                              text=True, timeout=30, check=False).stdout
        decoded = cli_checks.parse_edid_decode(text)
        assert {f: decoded[f] for f in cli_checks.EDID_FIELDS} == {
            f: oracle[name][f] for f in cli_checks.EDID_FIELDS}, name


def test_a_secret_is_projected_as_the_kubelet_does(tmp_path: Path) -> None:
    capture_tls.project_secret(tmp_path, {"tls.crt": b"one", "tls.key": b"k1"})
    first = (tmp_path / "..data").resolve()
    capture_tls.project_secret(tmp_path, {"tls.crt": b"two", "tls.key": b"k2"})
    assert (tmp_path / "tls.crt").read_bytes() == b"two"
    assert os.readlink(tmp_path / "tls.crt") == "..data/tls.crt"
    assert (tmp_path / "..data").resolve() != first
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("..")) == [
        "tls.crt", "tls.key"]
