"""The pod's cross-container contract (libdisplay.pod) is what the DaemonSet mounts, and what
the operator's command line defaults to: a path changed on one side only fails here."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from draplugin.main import operator
from libdisplay import pod
from tests.deploy.manifests import OPERATOR_RENDERINGS, all_containers, container, mounts, volume


@pytest.mark.parametrize("rendering", OPERATOR_RENDERINGS)
def test_every_container_mounts_the_shared_config_dir_where_the_contract_says(
        rendering: str) -> None:
    found = {c["name"]: mounts(c).get("weston-config") for c in all_containers(rendering)}
    assert found == dict.fromkeys(found, str(pod.CONFIG_DIR)), found
    assert set(found) >= {"declare", "weston", "operator"}


@pytest.mark.parametrize(("name", "path", "users"), [
    ("socket", pod.RUNTIME_DIR, ("weston", "operator")),
    ("cdi", pod.CDI_DIR, ("operator",)),
    ("kubelet-plugin", pod.PLUGIN_DIR, ("operator",)),
], ids=["runtime-dir", "cdi-dir", "plugin-dir"])
def test_each_host_path_is_the_contracts_and_mounted_at_it(name: str, path: Path,
                                                           users: tuple[str, ...]) -> None:
    """The containers see each hostPath at the host's own path: a CDI spec the operator
    writes names the host's paths, which the runtime resolves on the host."""
    assert volume(name)["hostPath"]["path"] == str(path)
    for user in users:
        assert mounts(container(user))[name] == str(path), user


def _default(flag: str) -> object:
    for param in operator.params:
        if isinstance(param, click.Option) and flag in param.opts:
            return param.default
    raise AssertionError(f"the operator has no option {flag}")


@pytest.mark.parametrize(("flag", "path"), [
    ("--cdi-root", pod.CDI_DIR),
    ("--plugin-dir", pod.PLUGIN_DIR),
    ("--container-runtime-dir", pod.RUNTIME_DIR),
    ("--config", pod.CONFIG_DIR / "weston.ini"),
])
def test_the_operators_defaults_are_the_contracts(flag: str, path: Path) -> None:
    assert Path(str(_default(flag))) == path
