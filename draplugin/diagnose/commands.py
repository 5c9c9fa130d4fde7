"""draplugin's diagnosis subcommands: `ddc BUS`, and `dry-run weston-ini|slice|cdi`, which
print what the operator would write for a sysfs tree (and a claim) and write nothing.

The flags are the operator's own (names, environment variables and defaults), so the same
pod environment gives the same answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from draplugin import options
from libdisplay.cli import (
    PathParam,
    compose,
    dev_root_option,
    echo_json,
    node_options,
    output_aliases,
)

if TYPE_CHECKING:
    from pathlib import Path

F = TypeVar("F", bound=Callable[..., Any])

_json_option = click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
# For a command whose output is a JSON document already: every read-only command takes --json.
_json_document_option = click.option("--json", "as_json", is_flag=True,
                                     help="Print as JSON (the output is JSON either way).")

# The operator's flags that shape what it writes.
_operator_options = compose(
    node_options,
    options.weston_config,
    options.plugin_dir,
    options.container_runtime_dir,
    options.socket,
    options.delivery,
    click.option("--displays", "display_files", multiple=True,
                 type=PathParam(dir_okay=False),
                 help="A file of Display objects (kubectl get displays -o yaml), standing for "
                 "the API; without it no Display exists."),
)


def _node_option(*, required: bool) -> Callable[[F], F]:
    return click.option("--node-name", envvar="NODE_NAME", required=required,
                        help="This node's name: the pool and the Displays' prefix "
                        "(env NODE_NAME).")


def _settings(options: dict[str, Any]) -> Any:
    """The operator's Settings for these flags; what a dry run never touches keeps its default."""
    from pathlib import Path

    from draplugin.node.settings import NodeSettings
    from draplugin.settings import KubeAccess, Settings

    unused = Path("/nonexistent")
    node = NodeSettings(name=options.get("node_name") or "", sysfs_root=options["sysfs_root"],
                        dev_root=options["dev_root"],
                        aliases=output_aliases(options["output_alias"]))
    return Settings(
        node=node,
        plugin_dir=options["plugin_dir"],
        registry_dir=unused,
        cdi_dir=unused,
        weston_ini=options["weston_config"],
        restarts_dir=unused,
        pid_file=unused,
        socket_dir=options["runtime_dir"],
        container_socket_dir=options["container_runtime_dir"],
        socket_name=options["socket"],
        restart_timeout_s=10.0,
        kube=KubeAccess(),
        shell=options["shell"],
        delivery=options["delivery"],
    )


def _kube(options: dict[str, Any], claims: list[dict[str, Any]] | None = None) -> Any:
    from draplugin.diagnose import plans

    return plans.FileKube(claims=claims or (),
                          displays=plans.displays_from(options["display_files"]))


def _print_json(obj: object) -> None:
    echo_json(obj, indent=2, sort_keys=True)


@click.command("ddc")
@click.argument("bus")
@dev_root_option
@_json_option
def ddc_cmd(bus: str, dev_root: Path, as_json: bool) -> None:
    """Probe DDC/CI on BUS as the operator does: capabilities, brightness, contrast, input
    source, power (read-only; exits 1 when the monitor does not answer).

    BUS is /dev/i2c-N, a bare N (<dev-root>/i2c-N), or a simulated bus's unix socket.
    """
    from draplugin.diagnose.ddc_probe import BusPathError, bus_path, probe_bus, render

    path = bus_path(bus, dev_root=dev_root)
    try:
        state = probe_bus(path)
    except BusPathError as err:
        raise click.BadParameter(str(err), param_hint="BUS") from err
    if as_json:
        _print_json({"bus": str(path), **state.to_status()})
    else:
        click.echo(render(path, state), nl=False)
    if not state.supported:
        raise SystemExit(1)


@click.group("dry-run")
def dry_run() -> None:
    """Print what the operator would write for a sysfs tree (and a claim); nothing is written."""


def _failures() -> tuple[type[Exception], ...]:
    from draplugin.diagnose.plans import DiagnoseInputError
    from draplugin.driver.checkpoint import CheckpointError
    from libdisplay import cdi
    from libdisplay.hardware import drm

    return (DiagnoseInputError, CheckpointError, drm.DrmError, cdi.CdiError)


@dry_run.command("weston-ini")
@_node_option(required=False)
@_operator_options
@click.option("--json", "as_json", is_flag=True,
              help="Print its sections as JSON: [{\"section\": NAME, \"keys\": {KEY: VALUE}}].")
def weston_ini_cmd(as_json: bool, **options: Any) -> None:
    """The weston.ini the operator would write: each output at the mode of the prepared claim
    holding it (the checkpoint), else its Display's spec.mode, else the monitor's preferred
    mode."""
    from draplugin.diagnose import plans

    if options["display_files"] and not options["node_name"]:
        raise click.UsageError("--displays needs --node-name: Displays are named per node")
    try:
        text = plans.weston_ini(_settings(options), _kube(options))
    except _failures() as err:
        raise click.ClickException(str(err)) from err
    if as_json:
        _print_ini_json(text)
    else:
        click.echo(text, nl=False)


def _print_ini_json(text: str) -> None:
    """weston.ini's sections in order, each with its keys (a repeated section stays apart)."""
    from libdisplay.compositor.weston import WestonIni

    sections = WestonIni.parse(text).sections
    echo_json([{"section": s.name, "keys": {e.key: e.value for e in s.entries()}}
               for s in sections], indent=2)


@dry_run.command("slice")
@_node_option(required=True)
@click.option("--node-uid", default="00000000-0000-0000-0000-000000000000", show_default=True,
              help="The Node's uid, for the slice's owner reference (the API has the real one).")
@click.option("--ddc/--no-ddc", default=True, show_default=True,
              help="Probe each monitor's DDC/CI, as the publisher does, for the `ddc` attribute.")
@_operator_options
@_json_document_option
def slice_cmd(node_uid: str, ddc: bool, as_json: bool, **options: Any) -> None:
    """The ResourceSlice the operator would publish for this node (JSON)."""
    from draplugin.diagnose import plans

    del as_json  # JSON either way
    try:
        _print_json(plans.resource_slice(_settings(options), node_uid=node_uid, ddc=ddc))
    except _failures() as err:
        raise click.ClickException(str(err)) from err


@dry_run.command("cdi")
@click.argument("claim_file", type=PathParam(dir_okay=False))
@_node_option(required=True)
@_operator_options
@_json_document_option
def cdi_cmd(claim_file: Path, as_json: bool, **options: Any) -> None:
    """The CDI spec the operator would write for CLAIM_FILE, a ResourceClaim with its
    allocation (kubectl get resourceclaim NAME -o yaml), checked as prepare checks it (JSON)."""
    from draplugin.diagnose import plans
    from draplugin.driver.allocation import AllocationError
    from draplugin.driver.claimconfig import ClaimConfigError
    from draplugin.driver.state import PrepareError

    del as_json  # JSON either way
    failures: tuple[type[Exception], ...] = (*_failures(), PrepareError, AllocationError,
                                             ClaimConfigError)
    try:
        claim = plans.claim_from(claim_file)
        spec = plans.cdi_spec(_settings(options), _kube(options, [claim]), claim)
    except failures as err:
        raise click.ClickException(f"{claim_file}: {err}") from err
    _print_json(spec)


COMMANDS = (ddc_cmd, dry_run)
