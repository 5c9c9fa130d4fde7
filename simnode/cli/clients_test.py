"""clients: a claim's CDI edits as a host process's environment."""

from __future__ import annotations

from typing import Any

import pytest

from simnode.cli import clients


def _spec(env: list[str], *, container: str, host: str) -> dict[str, Any]:
    mount = {"hostPath": host, "containerPath": container, "options": ["rbind"]}
    return {"devices": [{"name": "d", "containerEdits": {"env": env, "mounts": [mount]}}]}


CASES = {
    # id: (env entry, container path, host path, expected name -> value)
    "same-path": ("XDG_RUNTIME_DIR=/run/d/claims/u", "/run/d/claims/u", "/run/d/claims/u",
                  ("XDG_RUNTIME_DIR", "/run/d/claims/u")),
    "mapped-dir": ("XDG_RUNTIME_DIR=/var/run/display", "/var/run/display", "/tmp/sim/run",
                   ("XDG_RUNTIME_DIR", "/tmp/sim/run")),
    "mapped-file": ("WAYLAND_DISPLAY=/var/run/display/wayland-0", "/var/run/display",
                    "/tmp/sim/run", ("WAYLAND_DISPLAY", "/tmp/sim/run/wayland-0")),
    "prefix-only": ("X=/var/run/displayX", "/var/run/display", "/tmp/sim/run",
                    ("X", "/var/run/displayX")),
    "not-a-path": ("DISPLAY_OUTPUT=X2", "/var/run/display", "/tmp/sim/run",
                   ("DISPLAY_OUTPUT", "X2")),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_cdi_env_maps_container_paths_to_host_paths(case: str) -> None:
    entry, container, host, (name, value) = CASES[case]
    assert clients.cdi_env(_spec([entry], container=container, host=host)) == {name: value}


def test_cdi_env_refuses_an_entry_without_a_value() -> None:
    with pytest.raises(clients.ClientError, match="'JUSTANAME' is not NAME=VALUE"):
        clients.cdi_env(_spec(["JUSTANAME"], container="/a", host="/b"))
