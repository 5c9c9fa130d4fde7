"""With no API flags, in a pod, every binary reaches its API server in-cluster: the error on a
machine without the kubelet's service-account mount names that mount, not another source."""

from __future__ import annotations

import asyncio

import pytest
from click.testing import CliRunner

from capture.auth import HttpReviews, ReviewUnavailableError
from declare.main import cli as declare_cli
from draplugin.main import cli as draplugin_cli
from libdisplay.kube.access import SERVICE_ACCOUNT

IN_A_POD = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
NO_FLAGS = {"KUBE_API_SERVER": "", "KUBECONFIG": "", "KUBE_API_TOKEN_FILE": "",
            "KUBE_API_CA_FILE": ""}


@pytest.fixture(autouse=True)
def pod_env(monkeypatch: pytest.MonkeyPatch) -> None:
    if (SERVICE_ACCOUNT / "token").exists():
        pytest.skip("this machine has a service-account mount: the test needs none")
    for name, value in {**IN_A_POD, **NO_FLAGS}.items():
        if value:
            monkeypatch.setenv(name, value)
        else:
            monkeypatch.delenv(name, raising=False)


def test_the_operator_looks_for_the_mounted_account() -> None:
    result = CliRunner().invoke(draplugin_cli, ["operator", "--node-name=n1", "--no-publish"])
    assert result.exit_code == 1, result.output
    assert f"cannot read the token file {SERVICE_ACCOUNT}/token" in result.output


def test_declare_looks_for_the_mounted_account() -> None:
    # Its log goes to the stderr the runner captures (binary_group sets logging up per run).
    result = CliRunner().invoke(declare_cli, ["declare", "--sysfs-root=/nonexistent",
                                              "--dry-run"])
    assert result.exit_code != 0  # no card there; the endpoint was chosen before that
    assert f"cannot read the token file {SERVICE_ACCOUNT}/token" in result.output


def test_capture_looks_for_the_mounted_account() -> None:
    async def build() -> None:
        HttpReviews(None)

    with pytest.raises(ReviewUnavailableError, match=f"token file {SERVICE_ACCOUNT}/token"):
        asyncio.run(build())
