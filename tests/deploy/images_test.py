"""What each image's base must hold for its binary to start (build.sh --dry-run's plan)."""

from __future__ import annotations

from tests.deploy.manifests import base_packages, build_plan


def _base(repository: str, arg: str = "BASE_IMAGE") -> set[str]:
    return base_packages(build_plan()[f"ghcr.io/liken-sh/{repository}"].build_args[arg])


def test_capture_base_has_the_openssl_command_its_start_up_leaf_needs() -> None:
    # capture/tls.py makes the self-signed leaf it serves before a Secret exists with it.
    assert "openssl" in _base("display-capture")


def test_compositor_is_trixies_weston_14_on_python_3_13() -> None:
    assert {"weston", "python3.13"} <= _base("display-weston")
    assert "libweston-14-dev" in _base("display-weston", "BUILD_IMAGE")
