"""What every binary's command line shares: logging a person can read, and the version.

Kept free of heavy imports: `--help` of every binary goes through here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from libdisplay import __version__

if TYPE_CHECKING:
    from pathlib import Path

VERSION = __version__

F = TypeVar("F", bound=Callable[..., Any])

_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def setup_logging(verbosity: int = 0, *, stream: object = None) -> None:
    """Log to stderr; `-v` is debug. LOG_LEVEL (a level name) wins when set."""
    import logging

    level_name = os.environ.get("LOG_LEVEL", "").upper()
    level = getattr(logging, level_name, None) if level_name else None
    if not isinstance(level, int):
        level = logging.DEBUG if verbosity > 0 else logging.INFO
    logging.basicConfig(
        level=level,
        format=_FORMAT,
        datefmt="%Y-%m-%dT%H:%M:%S",
        stream=stream or sys.stderr,  # type: ignore[arg-type]
        force=True,
    )


class PathParam(click.Path):
    """click.Path whose values are pathlib.Paths. pathlib (with urllib.parse and ipaddress)
    is imported when a value is converted, so a `--help` does without it."""

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Path:
        from pathlib import Path

        return Path(os.fsdecode(super().convert(value, param, ctx)))


def echo_json(obj: object, *, indent: int | None = None, sort_keys: bool = False) -> None:
    """Print `obj` as JSON; json is imported here, not by every `--help`."""
    import json

    click.echo(json.dumps(obj, indent=indent, sort_keys=sort_keys))


# Read by setup_logging for every command of every binary, so every group's --help says so.
LOG_LEVEL_HELP = ("\b\nEnvironment:\n  LOG_LEVEL  a level name (DEBUG, INFO, WARNING, ERROR); wins"
                  " over -v")


def env_help(text: str, envvar: str) -> str:
    """An option's help naming its environment variable, as every option with one does."""
    return f"{text.rstrip('.')} (env {envvar})."


json_option = click.option("--json", "as_json", is_flag=True, help="Print as JSON.")


def binary_group(name: str, help_text: str) -> click.Group:
    """A binary's top-level command: `--version`, `-v`, and logging set up for every command."""

    @click.group(
        name=name, help=help_text, epilog=LOG_LEVEL_HELP,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    @click.version_option(VERSION, prog_name=name)
    @click.option("-v", "--verbose", count=True, help="Log at debug level.")
    def group(verbose: int) -> None:
        setup_logging(verbose)

    return group


def output_aliases(values: tuple[str, ...]) -> dict[str, str]:
    """`--output-alias CONNECTOR=NAME` values as a dict (simulated nodes name x11 outputs X1..)."""
    aliases = {}
    for value in values:
        connector, sep, name = value.partition("=")
        if not sep or not connector or not name:
            raise click.BadParameter(
                f"{value!r} is not CONNECTOR=NAME", param_hint="--output-alias"
            )
        aliases[connector] = name
    return aliases


def compose(*options: Callable[[F], F]) -> Callable[[F], F]:
    """One decorator for `options`, applied as if stacked in this order (the first on top)."""

    def apply(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return apply


# Options several binaries share. One definition each, so the flag, its environment
# variable and its default — the contract with the pod manifest — cannot drift apart.


def _directory_option(flag: str, envvar: str, default: str, help_text: str) -> Callable[[F], F]:
    return click.option(flag, envvar=envvar, default=default, show_default=True,
                        type=PathParam(file_okay=False), help=env_help(help_text, envvar))


sysfs_root_option = _directory_option(
    "--sysfs-root", "SYSFS_ROOT", "/sys", "Where sysfs is mounted (a simulated tree in tests).")
dev_root_option = _directory_option(
    "--dev-root", "DEV_ROOT", "/dev", "Where the claim's card nodes appear (<dev-root>/dri/cardN).")
output_alias_option = click.option(
    "--output-alias",
    envvar="WESTON_OUTPUT_ALIASES",
    multiple=True,
    metavar="CONNECTOR=NAME",
    help="Name an output as the backend does (simulated nodes: HDMI-A-1=X1; env"
    " WESTON_OUTPUT_ALIASES, space-separated).",
)
runtime_dir_option = _directory_option(
    "--runtime-dir", "WESTON_RUNTIME_DIR", "/var/run/display.liken.sh",
    "weston's XDG_RUNTIME_DIR as weston sees it: the hostPath consumers mount; claims'"
    " sockets go under its claims/")
shell_option = click.option(
    "--shell",
    envvar="WESTON_SHELL",
    default="layout-shell.so",
    show_default=True,
    help="weston's shell: the layout module, or a stock shell for tests (env WESTON_SHELL).",
)

# What every binary that derives weston.ini reads of the node: the card in sysfs and /dev,
# what its outputs are called, the shell and weston's runtime dir. declare, the operator and
# its dry runs take them all, so one pod environment means one node to each.
node_options = compose(
    sysfs_root_option, dev_root_option, output_alias_option, shell_option, runtime_dir_option)


def weston_config_option(help_text: str) -> Callable[[F], F]:
    """`--config` / WESTON_CONFIG: the weston.ini in the pod's /etc/weston."""
    return click.option(
        "--config",
        envvar="WESTON_CONFIG",
        default="/etc/weston/weston.ini",
        show_default=True,
        type=PathParam(dir_okay=False),
        help=env_help(help_text, "WESTON_CONFIG"),
    )
