"""draplugin: the operator container. The DRA kubelet plugin for display.liken.sh and the
node publisher of monitors."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from draplugin import options
from draplugin.diagnose.commands import COMMANDS as DIAGNOSIS_COMMANDS
from libdisplay.cli import binary_group, echo_json, json_option, node_options, output_aliases
from libdisplay.kube.cli_options import api_options

if TYPE_CHECKING:
    from pathlib import Path

F = TypeVar("F", bound=Callable[..., Any])


def _seconds_option(flag: str, envvar: str, default: float, help_text: str, *,
                    minimum: float = 0.1) -> Callable[[F], F]:
    """A duration in seconds, also set by `envvar`, never below `minimum`."""
    return click.option(flag, envvar=envvar, default=default, show_default=True,
                        type=click.FloatRange(min=minimum), help=f"{help_text} (env {envvar}).")


cli = binary_group("draplugin", "Publish this node's monitors and prepare them for claiming pods.")


@cli.command("operator", epilog="\b\nEnvironment (the pod's downward API):\n"
             "  POD_NAMESPACE, POD_NAME  this pod, whose weston container's restart count is"
             " the compositor's crash count (0 without them)")
@click.option(
    "--node-name",
    envvar="NODE_NAME",
    required=True,
    help="This node's name: the pool and the Displays' prefix (env NODE_NAME).",
)
@options.plugin_dir
@options.path_option(
    "--registry-dir",
    "REGISTRY_DIR",
    "/var/lib/kubelet/plugins_registry",
    "The kubelet's plugin registry dir",
)
@options.cdi_dir
@options.weston_config
@options.path_option(
    "--restarts-dir", "WESTON_RESTARTS_DIR", "/etc/weston/restarts", "Where restart orders go"
)
@options.path_option(
    "--pid-file",
    "WESTON_PID_FILE",
    "/etc/weston/weston.pid",
    "weston's pid, as westonctl writes it",
)
@node_options
@options.container_runtime_dir
@options.socket
@options.delivery
@_seconds_option("--restart-timeout", "RESTART_TIMEOUT", 10.0,
                 "Seconds for a restarted compositor to answer")
@_seconds_option("--hotplug-resync", "HOTPLUG_RESYNC", 30.0,
                 "Seconds between re-reads of sysfs without a uevent, for lost events; SIGHUP "
                 "re-reads at once")
@_seconds_option("--slice-resync", "SLICE_RESYNC", 5.0,
                 "Seconds between checks that the ResourceSlice is still as published")
@_seconds_option("--liveness-timeout", "LIVENESS_TIMEOUT", 60.0,
                 "/healthz on the metrics port fails once the publisher's loop has not "
                 "completed a pass for this many seconds")
@_seconds_option("--api-backoff-cap", "API_BACKOFF_CAP", 2.0,
                 "The longest delay in seconds between retries of a failed API call",
                 minimum=0.001)
@api_options
@click.option(
    "--metrics-addr",
    envvar="METRICS_ADDR",
    default=":9200",
    show_default=True,
    help="Where Prometheus metrics are served (env METRICS_ADDR).",
)
@click.option(
    "--publish/--no-publish",
    envvar="PUBLISH",
    default=True,
    show_default=True,
    help="Run the node publisher (slice, Displays, hotplug, watchdog, DDC/CI, metrics); "
    "--no-publish serves the kubelet alone, for tests of the plugin (env PUBLISH: true or "
    "false).",
)
@click.option(
    "--fault-point",
    envvar="DRAPLUGIN_FAULT_POINT",
    hidden=True,
    help="Tests only: SIGKILL this process when it reaches this step.",
)
def operator(**options: Any) -> None:
    """Serve the kubelet: registration and the DRA service, until SIGTERM (the main mode)."""
    from draplugin.arenas import limit_malloc_arenas

    limit_malloc_arenas()  # before any thread starts
    from draplugin.driver.state import FAULT_POINTS

    fault = options["fault_point"]
    if fault is not None and fault not in FAULT_POINTS:
        raise click.BadParameter(
            f"{fault!r} is not one of {', '.join(FAULT_POINTS)}", param_hint="--fault-point"
        )
    import logging

    from draplugin.node.retry import Backoff
    from draplugin.node.settings import NodeSettings
    from draplugin.settings import KubeAccess, Settings

    # lightkube's HTTP library logs every request at INFO; a person reads the plugin's lines.
    logging.getLogger("httpx2").setLevel(max(logging.WARNING, logging.getLogger().level))
    node = NodeSettings(
        name=options["node_name"],
        sysfs_root=options["sysfs_root"],
        dev_root=options["dev_root"],
        pod=_this_pod(),
        aliases=output_aliases(options["output_alias"]),
        hotplug_resync=options["hotplug_resync"],
        slice_resync=options["slice_resync"],
        liveness_timeout=options["liveness_timeout"],
        backoff=Backoff.capped(options["api_backoff_cap"]),
    )
    settings = Settings(
        node=node,
        plugin_dir=options["plugin_dir"],
        registry_dir=options["registry_dir"],
        cdi_dir=options["cdi_root"],
        weston_ini=options["weston_config"],
        restarts_dir=options["restarts_dir"],
        pid_file=options["pid_file"],
        socket_dir=options["runtime_dir"],
        container_socket_dir=options["container_runtime_dir"],
        socket_name=options["socket"],
        restart_timeout_s=options["restart_timeout"],
        kube=KubeAccess(api_server=options["api_server"], kubeconfig=options["kubeconfig"],
                        token_file=options["api_token_file"], ca_file=options["api_ca_file"]),
        shell=options["shell"],
        delivery=options["delivery"],
        fault_point=fault,
    )
    from draplugin.operator import Operator, OperatorError

    try:
        running = Operator.start(settings, publish=options["publish"],
                                 metrics_addr=options["metrics_addr"])
    except OperatorError as err:
        raise click.ClickException(str(err)) from err
    sys.exit(running.run())


def _this_pod() -> tuple[str, str] | None:
    """(namespace, name) of the operator's pod, from the downward API's env; None outside a
    pod, which leaves the compositor's crash count at 0."""
    namespace, pod = os.environ.get("POD_NAMESPACE"), os.environ.get("POD_NAME")
    return (namespace, pod) if namespace and pod else None


@cli.command("power")
@click.argument("state", metavar="On|Off|Standby")
@click.option("--selector", "-l", required=True, envvar="DISPLAY_SELECTOR",
              help="The Displays to switch: a label selector, key=value, key!=value, key or "
                   "!key, comma-separated (env DISPLAY_SELECTOR).")
@api_options
def power(state: str, selector: str, **api: Any) -> None:
    """Set spec.power to STATE on every Display SELECTOR picks (a schedule's CronJob runs
    it: deploy/examples/display-power-schedule.yaml). Exits 1 when it picks none."""
    from draplugin import schedule
    from libdisplay.kube.cli_options import endpoint
    from libdisplay.kube.lightkube_client import client
    from libdisplay.kube.lightkube_errors import from_lightkube

    try:
        wanted = schedule.power_state(state)
        schedule.parse_selector(selector)  # a bad selector fails before any call
    except schedule.ScheduleError as err:
        raise click.BadParameter(str(err)) from err
    try:
        done = schedule.switch(client(endpoint(api)), wanted, selector)
    except schedule.ScheduleError as err:
        raise click.ClickException(str(err)) from err
    except Exception as err:  # the API's refusals and outages; anything else is a bug
        failed = from_lightkube(err, "switch Displays")
        if failed is None:
            raise
        raise click.ClickException(f"the API refused or failed: {failed}") from err
    for item in done:
        click.echo(f"{item.name}: {item.result} (spec.power {item.before or 'unset'} -> {state})")


@cli.command("checkpoint")
@options.plugin_dir
@click.option("--json", "as_json", is_flag=True,
              help="Print as JSON (the checkpoint is JSON: the same output, as every read-only "
              "command takes --json).")
def checkpoint_cmd(plugin_dir: Path, as_json: bool) -> None:
    """Print the checkpoint of prepared claims, as JSON (read-only).

    Fails unless PLUGIN_DIR is the driver's: a directory holding its checkpoint or its dra.sock.
    A running driver with no claim prepared yet prints an empty checkpoint."""
    del as_json  # JSON either way
    from draplugin.driver import checkpoint

    path = checkpoint.path_in(plugin_dir)
    if not plugin_dir.is_dir():
        raise click.ClickException(
            f"plugin dir {plugin_dir} is not a directory (set --plugin-dir or PLUGIN_DIR)")
    if not path.exists() and not (plugin_dir / options.DRA_SOCKET).exists():
        raise click.ClickException(
            f"{plugin_dir} is not this driver's plugin dir: it holds neither {path.name} nor "
            f"{options.DRA_SOCKET} (set --plugin-dir or PLUGIN_DIR)")
    try:
        click.echo(checkpoint.render(checkpoint.load(path)), nl=False)
    except checkpoint.CheckpointError as err:
        raise click.ClickException(str(err)) from err


@cli.command("cdi")
@options.cdi_dir
@json_option
def cdi_cmd(cdi_root: Path, as_json: bool) -> None:
    """List the claim UIDs that have a CDI spec of this driver (read-only).

    Fails unless CDI_ROOT is a directory; an empty list is said on stderr."""
    from libdisplay import cdi

    if not cdi_root.is_dir():
        raise click.ClickException(
            f"CDI root {cdi_root} is not a directory (set --cdi-root or CDI_ROOT)")
    uids = cdi.list_specs(cdi_dir=cdi_root)
    if as_json:
        echo_json([{"uid": uid, "path": str(cdi.spec_path(uid, cdi_dir=cdi_root))}
                   for uid in uids], indent=2)
        return
    for uid in uids:
        click.echo(f"{uid}\t{cdi.spec_path(uid, cdi_dir=cdi_root)}")
    if not uids:
        click.echo(f"no CDI spec of this driver in {cdi_root}", err=True)


# The read-only diagnosis subcommands (their module imports click alone).
for _command in DIAGNOSIS_COMMANDS:
    cli.add_command(_command)


def main() -> None:
    """The PEX's entry point: a function, so that the PEX imports this module (runpy, which
    running it as a script takes, costs every start its own imports)."""
    cli(prog_name="draplugin")


if __name__ == "__main__":
    main()
