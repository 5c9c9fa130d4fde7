"""The operator's flags that its diagnosis subcommands share: one definition each, so the
flag, its environment variable and its default (the contract with the manifest) cannot drift
between `operator` and `dry-run`. Imports click and libdisplay.cli alone: every `--help` goes
through here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeVar

import click

from libdisplay.cli import PathParam

F = TypeVar("F", bound=Callable[..., Any])


def path_option(flag: str, envvar: str, default: str, help_text: str) -> Callable[[F], F]:
    return click.option(flag, envvar=envvar, default=default, show_default=True,
                        type=PathParam(), help=f"{help_text} (env {envvar}).")


# The DRA socket's name in the plugin dir (draplugin.settings uses it; here so `checkpoint`
# can tell a plugin dir without importing the operator's settings).
DRA_SOCKET: Final = "dra.sock"
plugin_dir = path_option("--plugin-dir", "PLUGIN_DIR", "/var/lib/kubelet/plugins/display.liken.sh",
                         f"The plugin's dir: {DRA_SOCKET} and the checkpoint")
cdi_dir = path_option("--cdi-root", "CDI_ROOT", "/var/run/cdi", "Where CDI specs go")
# `--config` / WESTON_CONFIG, as in declare, westonctl and capture (libdisplay.cli's
# weston_config_option); the parameter keeps the name weston_config the commands read.
weston_config = click.option(
    "--config", "weston_config", envvar="WESTON_CONFIG", default="/etc/weston/weston.ini",
    show_default=True, type=PathParam(dir_okay=False),
    help="The weston.ini the operator regenerates (env WESTON_CONFIG).")
container_runtime_dir = path_option("--container-runtime-dir", "CONTAINER_RUNTIME_DIR",
                                    "/var/run/display.liken.sh",
                                    "Where consumers' containers see the runtime dir")
socket = click.option("--socket", envvar="WESTON_SOCKET", default="wayland-0",
                      show_default=True,
                      help="The Wayland socket's name in the runtime dir (env WESTON_SOCKET).")
delivery = click.option(
    "--delivery", envvar="SOCKET_DELIVERY", type=click.Choice(["layout", "shared"]),
    default="layout", show_default=True,
    help="How a claim gets its Wayland socket: its own from the layout module, mounted alone, "
    "or the compositor's public one (a stock shell, tests) (env SOCKET_DELIVERY).")
