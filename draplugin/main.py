"""draplugin: the operator container. The DRA kubelet plugin for display.liken.sh and the
node publisher of monitors."""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from draplugin import options
from draplugin.diagnose.commands import COMMANDS as DIAGNOSIS_COMMANDS
from libdisplay.cli import binary_group, node_options, output_aliases
from libdisplay.kubecli import api_options

F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger("draplugin")


def _seconds_option(flag: str, envvar: str, default: float, help_text: str, *,
                    minimum: float = 0.1) -> Callable[[F], F]:
    """A duration in seconds, also set by `envvar`, never below `minimum`."""
    return click.option(flag, envvar=envvar, default=default, show_default=True,
                        type=click.FloatRange(min=minimum), help=f"{help_text} (env {envvar}).")


cli = binary_group("draplugin", "Publish this node's monitors and prepare them for claiming pods.")


@cli.command("operator")
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
    "--no-publish serves the kubelet alone, for tests of the plugin.",
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
    from draplugin.checkpoint import CheckpointError
    from draplugin.state import FAULT_POINTS, Driver

    fault = options["fault_point"]
    if fault is not None and fault not in FAULT_POINTS:
        raise click.BadParameter(
            f"{fault!r} is not one of {', '.join(FAULT_POINTS)}", param_hint="--fault-point"
        )
    from draplugin.kube import LightkubeKube
    from draplugin.service import PluginServer
    from draplugin.settings import KubeAccess, Settings

    # lightkube's HTTP library logs every request at INFO; a person reads the plugin's lines.
    logging.getLogger("httpx2").setLevel(max(logging.WARNING, logging.getLogger().level))
    settings = Settings(
        node_name=options["node_name"],
        plugin_dir=options["plugin_dir"],
        registry_dir=options["registry_dir"],
        cdi_dir=options["cdi_root"],
        weston_ini=options["weston_config"],
        restarts_dir=options["restarts_dir"],
        pid_file=options["pid_file"],
        socket_dir=options["runtime_dir"],
        container_socket_dir=options["container_runtime_dir"],
        socket_name=options["socket"],
        sysfs_root=options["sysfs_root"],
        dev_root=options["dev_root"],
        aliases=output_aliases(options["output_alias"]),
        restart_timeout_s=options["restart_timeout"],
        hotplug_resync_s=options["hotplug_resync"],
        slice_resync_s=options["slice_resync"],
        liveness_timeout_s=options["liveness_timeout"],
        api_backoff_cap_s=options["api_backoff_cap"],
        kube=KubeAccess(api_server=options["api_server"], kubeconfig=options["kubeconfig"],
                        token_file=options["api_token_file"], ca_file=options["api_ca_file"]),
        shell=options["shell"],
        delivery=options["delivery"],
        fault_point=fault,
    )
    from draplugin.supervisor import EXIT_CODE, Supervisor
    from libdisplay.kubeaccess import NoEndpointError

    try:
        endpoint = settings.kube.endpoint()
    except NoEndpointError as err:
        raise click.ClickException(str(err)) from err
    supervisor = Supervisor()
    node = (
        _start_publisher(settings, metrics_addr=options["metrics_addr"],
                         on_fatal=lambda err: supervisor.fail("the node publisher", err))
        if options["publish"]
        else None
    )
    driver = Driver(
        settings,
        LightkubeKube(endpoint),
        ddc=node.runtime.ddc_hook() if node else None,
        refuse=node.refusal if node else None,
        on_change=node.claims_changed if node else None,
        metrics=node.runtime.metrics if node else None,
        # One owner of the compositor: the publisher's, counted in its metrics.
        compositor=node.compositor if node else settings.compositor(),
        on_applied=node.specs_applied if node else None,
        **_claim_status(settings, endpoint),
    )
    try:
        driver.recover()
    except CheckpointError as err:
        # Never reset it: prepared claims of running pods are only in there.
        raise click.ClickException(f"{err}; fix or move it by hand") from err
    if node is not None:
        node.runtime.add_availability_listener(_restore_when_back(driver))
        node.runtime.follow_connectors_with(
            lambda plugged: driver.follow_connectors(plugged=plugged))
    server = PluginServer(settings, driver, health=node.health if node else None)

    def on_signal(signum: int, _frame: object) -> None:
        log.info("got %s: stopping", signal.Signals(signum).name)
        server.stop()

    supervisor.attach(server.stop)
    if supervisor.failed:
        sys.exit(EXIT_CODE)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if node is not None:
        # The conventional "re-read your inputs": a person who fixed a cable, or the simulated
        # node whose uevents never reach netlink, gets the slice updated now.
        signal.signal(signal.SIGHUP, lambda _signum, _frame: node.rescan())
    server.start()
    log.info("operator ready on node %s", settings.node_name)
    try:
        server.wait()
    finally:
        if node is not None:
            _stop_publisher(node)
    if supervisor.failed:
        sys.exit(EXIT_CODE)


def _stop_publisher(node: Any) -> None:
    from draplugin.node.runtime import NodeThreadError

    try:
        node.stop()
    except NodeThreadError as err:  # a stuck loop: the process exit ends it
        log.error("%s", err)


def _claim_status(settings: Any, endpoint: Any) -> dict[str, Callable[..., None]]:
    """The driver's hooks that write what each prepared claim got into its ResourceClaim's
    status (draplugin.claimstatus), and take it out at release."""
    from draplugin.claimstatus import AppliedOutput, ClaimStatusWriter, DeviceStatus
    from draplugin.node.displays import ClaimRef
    from libdisplay import kubelightkube

    writer = ClaimStatusWriter(kubelightkube.client(endpoint, field_manager="display-operator"),
                               pool=settings.node_name)

    def key(entry: Any) -> ClaimRef:
        return ClaimRef(namespace=entry.namespace, name=entry.name, uid=entry.uid)

    def applied(entry: Any, states: Any) -> None:
        writer.report(key(entry), [
            DeviceStatus.ready_with(AppliedOutput.from_output_state(device, state))
            if state is not None else DeviceStatus.not_ready(
                device, "OutputUnknown", "the compositor cannot say what this output runs at "
                "now (not running, or without the layout module)")
            for device, state in states.items()])

    def released(entry: Any) -> None:
        writer.withdraw(key(entry))

    return {"on_claim_applied": applied, "on_claim_released": released}


def _restore_when_back(driver: Any) -> Callable[[Any], None]:
    """A watchdog listener: a compositor that answers again has lost every claim's socket.

    The watchdog calls it on the publisher's event loop, which must not wait for the
    driver's lock (held through a whole prepare), so the restore runs on a thread of its own.
    """
    import threading

    def restore() -> None:
        try:
            driver.restore_sockets()
        except Exception:  # the next "available" or start tries again; never silently
            log.exception("restoring the claims' sockets failed")

    def on_availability(availability: Any) -> None:
        if availability.available:
            threading.Thread(target=restore, name="restore-sockets", daemon=True).start()

    return on_availability


def _start_publisher(settings: Any, *, metrics_addr: str,
                     on_fatal: Callable[[BaseException], None]) -> Any:
    """The node publisher on its own thread (it is asyncio; the kubelet side is sync gRPC)."""
    from draplugin.publisher import start_publisher

    return start_publisher(settings, metrics_addr=metrics_addr, on_fatal=on_fatal)


@cli.command("checkpoint")
@options.plugin_dir
def checkpoint_cmd(plugin_dir: Path) -> None:
    """Print the checkpoint of prepared claims (read-only)."""
    from draplugin import checkpoint

    try:
        click.echo(checkpoint.render(checkpoint.load(checkpoint.path_in(plugin_dir))), nl=False)
    except checkpoint.CheckpointError as err:
        raise click.ClickException(str(err)) from err


@cli.command("cdi")
@options.cdi_dir
def cdi_cmd(cdi_root: Path) -> None:
    """List the claim UIDs that have a CDI spec of this driver (read-only)."""
    from libdisplay import cdi

    for uid in cdi.list_specs(cdi_dir=cdi_root):
        click.echo(f"{uid}\t{cdi.spec_path(uid, cdi_dir=cdi_root)}")


# The read-only diagnosis subcommands (their module imports click alone).
for _command in DIAGNOSIS_COMMANDS:
    cli.add_command(_command)


if __name__ == "__main__":
    cli(prog_name="draplugin")
