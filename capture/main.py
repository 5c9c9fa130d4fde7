"""capture: the capture container. Serves stills and clips of every screen over HTTPS.

`capture capture` is the container's main mode (settings from the environment, see
`capture/settings.py`). `outputs` and `shoot` are read-only diagnosis commands that talk to the
layout module's capture socket directly, with no server, TLS or apiserver in the way.

Each command imports what it uses when it runs, so `--help` loads only click and the shared
command-line helpers (pathlib alone would bring urllib and ipaddress).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from capture import environment
from libdisplay.cli import binary_group, echo_json, json_option, weston_config_option

if TYPE_CHECKING:
    from pathlib import Path

_DEFAULT_SOCKET = "/etc/weston/capture.sock"


cli = binary_group("capture", "Serve screenshots and clips of this node's screens.")


@cli.command("capture", epilog=environment.help_text())
def capture_command() -> None:
    """Serve HTTPS on CAPTURE_ADDR until SIGTERM (the container's main mode).

    Its settings are environment variables, listed below."""
    import asyncio

    from capture.settings import SettingsError, from_env

    try:
        settings = from_env()
    except SettingsError as exc:
        # A usage error: its pointer to `capture capture --help` finds the settings listed.
        raise click.UsageError(str(exc)) from exc
    from capture.server import serve_forever

    try:
        asyncio.run(serve_forever(settings))
    except ExceptionGroup:
        # The failed task has logged why; exiting non-zero has the kubelet restart us.
        sys.exit(1)


@cli.command("outputs")
@weston_config_option("weston.ini whose [output] sections name the outputs.")
@json_option
def outputs_command(config: Path, as_json: bool) -> None:
    """List the outputs weston.ini names, one a line (read-only)."""
    from libdisplay.compositor.weston import WestonIni, WestonIniError

    try:
        with open(config, encoding="utf-8") as file:
            ini = WestonIni.parse(file.read())
    except (OSError, WestonIniError) as exc:
        raise click.ClickException(f"cannot read {config}: {exc}") from exc
    if as_json:
        echo_json([{"name": output.name} for output in ini.outputs], indent=2)
        return
    for output in ini.outputs:
        click.echo(output.name)


@cli.command("shoot")
@click.argument("output")
@click.argument("file", type=click.Path(dir_okay=False))
# `--socket` is its old name (and westonctl's Wayland socket): kept for scripts that use it.
@click.option("--capture-socket", "--socket", "socket_path", envvar="CAPTURE_SOCKET",
              type=click.Path(),
              default=_DEFAULT_SOCKET, show_default=True,
              help="The layout capture socket, as the server reads it (env CAPTURE_SOCKET).")
def shoot_command(output: str, file: str, socket_path: str) -> None:
    """Write one PNG of OUTPUT to FILE, straight from the capture socket."""
    from capture.png import encode_png
    from libdisplay import fsutil
    from libdisplay.compositor.layout import LayoutCapture, LayoutError

    try:
        with LayoutCapture(socket_path) as capture:
            frame = capture.frame(output)
    except LayoutError as exc:
        raise click.ClickException(str(exc)) from exc
    # Full size, unlike the server's stills: a person diagnosing a screen wants every pixel.
    png = encode_png(frame.header, frame.pixels)
    fsutil.atomic_write(file, png)
    header = frame.header
    click.echo(f"{file}: {header.width}x{header.height} {header.pixel_format}", err=True)


def main() -> None:
    """The PEX's entry point: a function, so that the PEX imports this module (runpy, which
    running it as a script takes, costs every start its own imports)."""
    cli(prog_name="capture")


if __name__ == "__main__":
    main()
