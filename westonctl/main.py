"""westonctl: the compositor's container. Runs weston as its child, restarts it on an
order, and exits on any exit no order names; `ping` and `outputs` diagnose its socket."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from libdisplay.cli import (
    PathParam,
    binary_group,
    echo_json,
    json_option,
    runtime_dir_option,
    weston_config_option,
)

if TYPE_CHECKING:
    from pathlib import Path

_DEFAULT_SOCKET = "wayland-0"


def _socket_path(runtime_dir: Path, socket: str) -> Path:
    return runtime_dir / socket  # an absolute socket replaces the directory


_socket_option = click.option(
    "--socket",
    envvar="WESTON_SOCKET",
    default=_DEFAULT_SOCKET,
    show_default=True,
    help="The public Wayland socket's name in the runtime dir, or an absolute path"
    " (env WESTON_SOCKET).",
)


cli = binary_group("westonctl", "Supervise the Weston compositor and diagnose its socket.")


@cli.command()
@weston_config_option("weston.ini, written by the declare container.")
@click.option(
    "--config-wait",
    envvar="WESTON_CONFIG_WAIT",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds to wait for the config before failing (env WESTON_CONFIG_WAIT).",
)
@runtime_dir_option
@_socket_option
@click.option(
    "--backend",
    envvar="WESTON_BACKEND",
    default="drm-backend.so",
    show_default=True,
    help="weston's backend: headless-backend.so or x11-backend.so in tests"
    " (env WESTON_BACKEND).",
)
@click.option(
    "--renderer",
    envvar="WESTON_RENDERER",
    default=None,
    help="weston's renderer; default: the backend's own. With gl, a weston that fails before"
    " its socket is up is started again with pixman (env WESTON_RENDERER).",
)
@click.option(
    "--output-count",
    envvar="WESTON_OUTPUT_COUNT",
    default=None,
    type=click.IntRange(min=1),
    help="How many outputs a windowed backend (x11) makes; the DRM backend has its heads"
    " (env WESTON_OUTPUT_COUNT).",
)
@click.option(
    "--restarts-dir",
    envvar="WESTON_RESTARTS_DIR",
    default="/etc/weston/restarts",
    show_default=True,
    type=PathParam(file_okay=False),
    help="Where the operator writes restart orders naming weston's pid (env WESTON_RESTARTS_DIR).",
)
@click.option(
    "--pid-file",
    envvar="WESTON_PID_FILE",
    default="/etc/weston/weston.pid",
    show_default=True,
    type=PathParam(dir_okay=False),
    help="Where weston's current pid is written (env WESTON_PID_FILE).",
)
# The debug scopes weston writes to the log beside "log" (drm-backend says why each view goes
# to a plane or to the renderer). Empty by default because drm-backend writes about a hundred
# lines on every repaint, and a film repaints every frame. They are not behind weston's --debug:
# that flag also opens the debug protocol and authorises screenshots (weston_capture_v1) for
# every client, which would let any consumer read every screen.
@click.option(
    "--log-scopes",
    envvar="WESTON_LOG_SCOPES",
    default="",
    help="Comma-separated weston debug scopes for the log (env WESTON_LOG_SCOPES).",
)
@click.option("--stop-grace", default=4.0, show_default=True, type=click.FloatRange(min=0),
              help="Seconds weston has to exit after SIGTERM before SIGKILL.")
@click.argument("weston_args", nargs=-1, type=click.UNPROCESSED)
def weston(
    config: Path,
    config_wait: float,
    runtime_dir: Path,
    socket: str,
    backend: str,
    renderer: str | None,
    output_count: int | None,
    restarts_dir: Path,
    pid_file: Path,
    log_scopes: str,
    stop_grace: float,
    weston_args: tuple[str, ...],
) -> None:
    """Wait for weston.ini, run weston as a child and restart it on orders (the main mode).

    Extra arguments after `--` go to weston. Exits non-zero on any weston exit that no
    restart order names, so the container's restart count is the crash count.
    """
    from libdisplay.compositor.renderer import RENDERER_FILE
    from westonctl.supervisor import (
        Supervision,
        SupervisorError,
        WestonCommand,
        supervise,
    )

    command = WestonCommand(
        config=config,
        runtime_dir=runtime_dir,
        socket=socket,
        backend=backend,
        renderer=renderer,
        output_count=output_count,
        log_scopes=log_scopes,
        extra_args=weston_args,
    )
    # The renderer file sits beside the pid file, where the operator reads it.
    supervision = Supervision(restarts_dir=restarts_dir, pid_file=pid_file,
                              renderer_file=pid_file.parent / RENDERER_FILE,
                              stop_grace_s=stop_grace)
    try:
        code = supervise(command, supervision, config_wait_s=config_wait)
    except SupervisorError as err:
        raise click.ClickException(str(err)) from err
    sys.exit(code)


@cli.command()
@runtime_dir_option
@_socket_option
@click.option("--timeout", default=1.0, show_default=True, type=click.FloatRange(min=0.01),
              help="Seconds to wait for weston's answer before calling it hung.")
@json_option
def ping(runtime_dir: Path, socket: str, timeout: float, as_json: bool) -> None:
    """Classify the socket: answering, hung, dead or absent (exit 0 only when answering)."""
    from libdisplay.compositor.wayland import Liveness, probe

    result = probe(_socket_path(runtime_dir, socket), timeout=timeout)
    if as_json:
        echo_json(
            {
                "path": str(result.path),
                "state": str(result.state),
                "round_trip_s": result.round_trip_s,
                "detail": result.detail,
            }
        )
    else:
        rtt = f" in {result.round_trip_s * 1000:.2f} ms" if result.round_trip_s is not None else ""
        click.echo(f"{result.path}: {result.state}{rtt} ({result.detail})")
    sys.exit(0 if result.state is Liveness.ANSWERING else 1)


@cli.command()
@runtime_dir_option
@_socket_option
@click.option("--timeout", default=5.0, show_default=True, type=click.FloatRange(min=0.01),
              help="Seconds to wait for weston's list of outputs.")
@json_option
def outputs(runtime_dir: Path, socket: str, timeout: float, as_json: bool) -> None:
    """List the outputs the compositor reports: name, make, model, mode, transform, scale."""
    from libdisplay.compositor.wayland import WaylandError, list_outputs

    try:
        found = list_outputs(_socket_path(runtime_dir, socket), timeout=timeout)
    except WaylandError as err:
        raise click.ClickException(str(err)) from err
    if as_json:
        echo_json(
            [
                {
                    "name": o.name,
                    "make": o.make,
                    "model": o.model,
                    "mode": str(o.mode),
                    "transform": o.transform.name.lower(),
                    "scale": o.scale,
                    "position": list(o.position),
                    "physical_size_mm": list(o.physical_size_mm),
                }
                for o in found
            ],
            indent=2,
        )
        return
    for o in found:
        click.echo(
            f"{o.name or '?':<12} {o.mode!s:<18} {o.transform.name.lower():<18} "
            f"scale {o.scale}  {o.make} {o.model}  at {o.position[0]},{o.position[1]}"
        )


def main() -> None:
    """The PEX's entry point: a function, so that the PEX imports this module (runpy, which
    running it as a script takes, costs every start its own imports)."""
    cli(prog_name="westonctl")


if __name__ == "__main__":
    main()
